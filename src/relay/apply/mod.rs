//! Apply: consumes a remote data centre's topic in order and applies each of its transactions
//! whole, in a local transaction that also records the consumed offset and the source position
//! in `relay_applied`, and the last GTID applied per replication domain in
//! `relay_applied_gtids`. A source transaction is applied part by part as its messages arrive,
//! inside that one local transaction, so neither its size nor the applier's memory depend on
//! each other: what is read ahead and prepared is bounded by `relay.apply_memory_bytes`, and each
//! statement by a sixteenth of it and the server's `max_allowed_packet`. The loop marker (the row
//! of `relay_applied_gtids`) is the local transaction's first write, so capture drops the whole
//! of it. A crash loses either the whole transaction and its offset or neither,
//! so the replay after a restart is exact; a transaction published twice (capture restarted
//! before its checkpoint, or another server of the source data centre published it again after
//! a failover) is recognised by its GTID and skipped. A transaction that cannot be placed after
//! what was applied stops applying from that source, visibly, until its stream is started anew
//! (see [`super::order`]); a message that cannot be applied (it does not parse, lacks its
//! primary key, changes a table not relayed here, or fails for a definite reason) rolls the open
//! local transaction back and stops it until the relay starts again. Capture and the other
//! appliers go on either way. An applier that is behind puts up to `relay.apply_batch`
//! consecutive source transactions in one local transaction. With the `cache` loop filter each
//! part records its changes' keys in `relay_loop_keys` before its changes, inside the same local
//! transaction (see [`super::loop_filter`]).
//!
//! The consumer takes the topic's single partition by `assign` at the offset stored in MySQL;
//! no consumer-group offsets are involved.
//!
//! In the order a message goes: `read` (the topic to source transactions, placed by GTID, in
//! parts with their SQL, held within the memory budget), `place` (parts into local
//! transactions, once their tables match), `conflicts` (a part applied change by change),
//! `schema` (the schema cache), `record` (the applied position and stops).
//!
//! Every wait on the local database is bounded by `relay.apply_timeout`: a server that hangs
//! keeps the connection open and answers nothing, so past the bound the applier drops the
//! connection and starts again from `relay_applied`. A commit whose answer never came is
//! settled there: the applier's named lock goes with the old connection only once the server
//! has finished with it (the commit done or rolled back), and the new one waits for it before
//! reading where to resume.

mod conflicts;
mod place;
mod read;
mod record;
mod schema;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::kafka::{CreateRedacted, FULL_PREFETCH_BACKOFF_MS};
use crate::mysql::bound::within;
use crate::mysql::encode::push_sql_string;
use crate::mysql::lock::{lock_name, try_lock};
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};
use crate::relay::settings::{
    LoopFilterMode, MIN_MESSAGE_BYTES, OnBadMessage, OnConflict, RemoteDc,
};

use super::change::{
    Change, ChangeKind, Contracts, Kind, Position, Resume, Row, RowChange, TxnRef, Value,
    row_to_json,
};
use super::context::{
    APPLIED_GTIDS_TABLE, APPLIED_TABLE, APPLIED_TABLES_TABLE, CONFLICTS_TABLE, DEAD_LETTERS_TABLE,
    LOOP_KEYS_TABLE, RelayContext, RelayError,
};
use super::contract::{self, Contract, LocalColumn};
use super::loop_filter::CacheKey;
use super::order::{Followed, Verdict, order};
use super::signing::{Covered, Refusal, Verifier, claimed_dc};
use super::sql;
use super::stats::{ApplyStats, DeadLettering, Running};
use super::text_filter::RelayedTextFilters;

use conflicts::*;
use place::*;
use read::*;
use record::*;
use schema::*;
pub(super) use schema::{local_columns, local_key};

/// The applier's session: strict, so a value that does not fit fails instead of being cut;
/// backslash escapes in literals (no NO_BACKSLASH_ESCAPES), which [`sql`] writes; explicit
/// zeros stay zeros in AUTO_INCREMENT columns; UTC for
/// TIMESTAMP values; foreign keys were checked where the change was made, and a parent row may
/// still be on its way from another data centre.
const SESSION_SETUP: &[&str] = &[
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO'",
    "SET SESSION time_zone = '+00:00'",
    "SET NAMES utf8mb4",
    "SET SESSION foreign_key_checks = 0",
];

/// How long a local table's columns are trusted before they are read again.
const SCHEMA_RECHECK: Duration = Duration::from_secs(5);
/// How long applying waits before checking a mismatched table again.
const MISMATCH_RETRY: Duration = Duration::from_secs(5);
/// Parts read and prepared ahead of the one being applied (their bytes are bounded, too).
const READY_AHEAD: usize = 64;
/// Statements sent in one round trip, in bytes, at most.
const STATEMENT_BUDGET: usize = 1 << 20;
/// librdkafka's default `fetch.max.bytes`: what one fetch from a partition may take, at most.
const MOST_FETCH_BYTES: usize = 52_428_800;
/// How many times larger than the topic's bytes a fetch may be once decompressed, as the
/// applier plans for (lz4 on change messages, which repeat column names and kinds).
const FETCH_EXPANSION: usize = 16;
/// `max_allowed_packet` less this is what a statement may take (the packet's own framing).
const PACKET_OVERHEAD: usize = 1024;
/// How long past its own wait `GET_LOCK` may take to answer.
const LOCK_ANSWER: Duration = Duration::from_secs(5);
/// The savepoint before each source transaction in a local transaction: a transaction cut off
/// in the topic is undone to it.
const SOURCE_SAVEPOINT: &str = "SAVEPOINT relay_source";
const UNDO_SOURCE: &str = "ROLLBACK TO SAVEPOINT relay_source";
/// The savepoint before a part with UPDATEs or DELETEs: a part where one does not find its row
/// is undone to it and applied again change by change.
const PART_SAVEPOINT: &str = "SAVEPOINT relay_part";
const UNDO_PART: &str = "ROLLBACK TO SAVEPOINT relay_part";

/// What is stored for a source in `relay_applied` and `relay_applied_gtids`.
#[derive(Debug, Clone)]
struct Applied {
    next_offset: i64,
    followed: Followed,
    /// The run of the source's capture the last transaction applied came from.
    run: Option<u64>,
}

/// One wait on the target database within `limit` (`relay.apply_timeout`): past it, a
/// transient [`DbError::TimedOut`], and the applier starts again on a new connection (the
/// driver discards one whose command was dropped part-way).
pub(super) async fn on_target<T>(
    limit: Duration,
    what: impl Fn() -> String,
    work: impl Future<Output = Result<T, mysql_async::Error>>,
) -> Result<T, DbError> {
    within(limit, &what, async {
        work.await.map_err(|source| DbError::Mysql {
            context: what(),
            source,
        })
    })
    .await
}

/// Runs the applier of one remote data centre until `shutdown` is set; returns on the first
/// error. A target database that stops answering is reported once (the log, the applier's
/// `target_hung`), and once more when it answers again.
pub async fn run_once(
    context: &RelayContext,
    remote: &RemoteDc,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let stats = context
        .stats
        .applier(&remote.dc)
        .ok_or_else(|| RelayError::Refused(format!("{} is not one of relay.remotes", remote.dc)))?;
    let result = apply(context, remote, stats, shutdown).await;
    if let Err(e) = &result
        && e.is_hang()
        && stats.target_hung.hung()
    {
        tracing::error!(
            source = remote.dc,
            database = %context.url().redacted(),
            "the database stopped answering the applier of {}: {e}; it starts again until the \
             database answers",
            remote.dc
        );
    }
    result
}

async fn apply(
    context: &RelayContext,
    remote: &RemoteDc,
    stats: &ApplyStats,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let topic = context.topic(&remote.dc);
    let wait = context.relay.apply_timeout;
    let mut conn = mysql::connect(context.url()).await?;
    let mut setup: Vec<&str> = SESSION_SETUP.to_vec();
    if context.loop_filter() == LoopFilterMode::SkipReplication {
        setup.push("SET SESSION skip_replication = 1");
    }
    for statement in setup {
        let what = || format!("setting up the applier's session: {statement}");
        on_target(wait, what, conn.query_drop(statement)).await?;
    }
    // One applier per source and database: the lock goes with the connection, also when the
    // process dies. A connection this applier dropped (its server hung) may hold it until the
    // server is done with it: waited for, within the bound.
    let lock = lock_name(&["relay-apply", &context.state_database, &remote.dc]);
    let lock_wait = u32::try_from(wait.as_secs()).unwrap_or(u32::MAX);
    let locked = within(
        wait + LOCK_ANSWER,
        || format!("taking lock {lock}"),
        try_lock(&mut conn, &lock, lock_wait),
    )
    .await?;
    if !locked {
        return Err(RelayError::Busy(format!(
            "another relay applies {} here (it holds lock {lock})",
            remote.dc
        )));
    }
    let limits = Limits::new(context, &mut conn).await?;
    let verifier = Verifier::of(&context.relay.keys, &remote.dc);
    if verifier.is_none() {
        tracing::info!(
            source = remote.dc,
            "relay.keys has no key of {}: its messages are applied without checking a signature",
            remote.dc
        );
    }
    let applied = load_applied(&mut conn, wait, &remote.dc, &topic).await?;
    if stats.target_hung.answered() {
        tracing::info!(
            source = remote.dc,
            database = %context.url().redacted(),
            "the database answers the applier of {} again",
            remote.dc
        );
    }
    let consumer = consumer(context, remote, &topic, applied.next_offset)?;
    stats
        .next_offset
        .store(applied.next_offset, Ordering::Relaxed);
    let _running = Running::mark(&stats.running);
    tracing::info!(
        dc = context.dc(),
        source = remote.dc,
        topic,
        offset = applied.next_offset,
        "apply started"
    );
    // Reading, decoding and writing the SQL of the next parts overlaps with applying the
    // current one.
    let (ready_tx, ready_rx) = mpsc::channel(READY_AHEAD);
    let mut stop_applying = shutdown.clone();
    let reader = Reader {
        topic: &topic,
        remote,
        stats,
        limits: &limits,
        cache: context.loop_filter() == LoopFilterMode::Cache,
        dead_letter: context.relay.on_bad_message == OnBadMessage::DeadLetter,
        verifier,
        held: Arc::new(Semaphore::new(limits.held_bytes)),
        text_filters: context.text_filters.as_deref(),
        database: &context.state_database,
        ready: ready_tx,
    };
    tokio::try_join!(
        reader.read(&consumer, applied, shutdown),
        apply_all(
            context,
            &mut conn,
            &remote.dc,
            stats,
            &limits,
            ready_rx,
            &mut stop_applying
        ),
    )?;
    let _ = within(wait, || "disconnecting".into(), async {
        conn.disconnect()
            .await
            .map_err(DbError::mysql("disconnecting"))
    })
    .await;
    Ok(())
}

/// The sizes an applier keeps to, from `relay.apply_memory_bytes` and the server's
/// `max_allowed_packet`.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Bytes of messages gathered into one part.
    part_bytes: usize,
    /// Bytes of SQL parts waiting to be applied may hold together.
    held_bytes: usize,
    /// Bytes of one statement of several rows, and of statements sent in one round trip.
    statement_bytes: usize,
    /// Bytes of any one statement (one row's).
    packet_bytes: usize,
    /// How long any one wait on the database may take (`relay.apply_timeout`).
    wait: Duration,
    /// Recorded keys per row of `relay_loop_keys`: 64 hex digits each, half a statement.
    keys_per_chunk: usize,
}

impl Limits {
    async fn new(context: &RelayContext, conn: &mut Conn) -> Result<Limits, RelayError> {
        let wait = context.relay.apply_timeout;
        let packet: Option<u64> = on_target(
            wait,
            || "reading max_allowed_packet".into(),
            conn.query_first("SELECT @@max_allowed_packet"),
        )
        .await?;
        let packet = packet
            .and_then(|p| usize::try_from(p).ok())
            .unwrap_or(usize::MAX);
        Ok(Limits::of(context.relay.apply_memory_bytes, packet, wait))
    }

    fn of(memory: usize, max_allowed_packet: usize, wait: Duration) -> Limits {
        let packet_bytes = max_allowed_packet.saturating_sub(PACKET_OVERHEAD);
        // A 64th for the messages of the part being gathered (decoded, they take several
        // times their bytes), half for the parts waiting, an eighth for the consumer's fetch
        // queue (see `consumer`), the rest for what is being sent.
        let statement_bytes = (memory / 16).min(STATEMENT_BUDGET).min(packet_bytes);
        Limits {
            part_bytes: memory / 64,
            held_bytes: (memory / 2).min(Semaphore::MAX_PERMITS),
            statement_bytes,
            packet_bytes,
            keys_per_chunk: (statement_bytes / 128).max(1),
            wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_divide_the_memory_setting() {
        let settings = crate::config::Settings::defaults().unwrap();
        let memory = settings.relay.apply_memory_bytes;
        let limits = Limits::of(memory, 16 << 20, settings.relay.apply_timeout);
        assert_eq!(limits.part_bytes, memory / 64);
        assert_eq!(limits.held_bytes, memory / 2);
        assert_eq!(limits.statement_bytes, STATEMENT_BUDGET);
        // A row of recorded keys, in hex, takes at most half a statement.
        assert_eq!(limits.keys_per_chunk, STATEMENT_BUDGET / 128);
        // A small max_allowed_packet caps statements.
        let small = Limits::of(memory, 64 << 10, settings.relay.apply_timeout);
        assert_eq!(small.statement_bytes, (64 << 10) - PACKET_OVERHEAD);
        assert_eq!(small.packet_bytes, (64 << 10) - PACKET_OVERHEAD);
        assert_eq!(small.keys_per_chunk, small.statement_bytes / 128);
    }
}
