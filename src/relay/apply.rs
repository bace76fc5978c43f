//! Apply: consumes a remote data centre's topic in order and applies each of its transactions
//! whole, in a local transaction that also records the consumed offset and the source position
//! in `relay_applied`, and the last GTID applied per replication domain in
//! `relay_applied_gtids`. A crash loses either the whole transaction and its offset or neither,
//! so the replay after a restart is exact; a transaction published twice (capture restarted
//! before its checkpoint, or another server of the source data centre published it again after
//! a failover) is recognised by its GTID and skipped. A transaction that cannot be placed after
//! what was applied stops applying from that source, visibly, until its stream is started anew
//! (see [`super::order`]); a message that cannot be applied (it does not parse, lacks its
//! primary key, changes a table not relayed here, or fails for a definite reason) stops it
//! until the relay starts again. Capture and the other appliers go on either way. An UPDATE or
//! DELETE that does not find its before image here is a conflict, recorded and resolved as
//! `relay.on_conflict` says (see [`Conflicts`]). An applier that is behind puts up to
//! `relay.apply_batch` consecutive source transactions in one local transaction.
//!
//! The consumer takes the topic's single partition by `assign` at the offset stored in MySQL;
//! no consumer-group offsets are involved.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};

use crate::kafka::CreateRedacted;
use crate::mysql::encode::push_sql_string;
use crate::mysql::lock::{lock_name, try_lock};
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};
use crate::relay::settings::{LoopFilterMode, OnConflict, RemoteDc};

use super::change::{Change, Kind, Row, RowChange, TxnRef, Value, row_to_json};
use super::context::{
    APPLIED_GTIDS_TABLE, APPLIED_TABLE, CONFLICTS_TABLE, LOOP_KEYS_TABLE, RelayContext, RelayError,
};
use super::contract::{self, Contract, LocalColumn};
use super::loop_filter::CacheKey;
use super::order::{Followed, Verdict, order};
use super::sql;
use super::stats::{ApplyStats, Running};

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
/// Transactions read and prepared ahead of the one being applied.
const READY_AHEAD: usize = 64;
/// Statements sent in one round trip, in bytes (well under any max_allowed_packet).
const STATEMENT_BUDGET: usize = 1 << 20;
/// Recorded keys per row of `relay_loop_keys`: 64 hex digits each, half the budget.
const KEYS_PER_CHUNK: usize = 8192;

/// A transaction's messages, gathered in order.
#[derive(Debug, Default)]
struct Assembler {
    changes: Vec<Change>,
}

impl Assembler {
    /// Adds a message; returns the transaction it completes. A transaction that was cut off
    /// (capture died while publishing it, and published it again whole after restarting) is
    /// dropped when the next transaction starts.
    fn push(&mut self, change: Change) -> Option<Vec<Change>> {
        let expected = self.changes.len() as u32;
        let continues = self.changes.first().is_some_and(|first| {
            first.txn.seq == change.txn.seq && first.position == change.position
        });
        if change.txn.index == 0 {
            if !self.changes.is_empty() {
                tracing::warn!(
                    seq = self.changes[0].txn.seq,
                    "a transaction's messages stopped short; it was published again"
                );
            }
            self.changes.clear();
        } else if !(continues && change.txn.index == expected) {
            // The rest of a transaction whose start was not read: it comes again whole.
            self.changes.clear();
            return None;
        }
        let complete = change.txn.is_last();
        self.changes.push(change);
        complete.then(|| std::mem::take(&mut self.changes))
    }
}

/// What is stored for a source in `relay_applied` and `relay_applied_gtids`.
#[derive(Debug, Clone)]
struct Applied {
    next_offset: i64,
    followed: Followed,
}

/// Runs the applier of one remote data centre until `shutdown` is set; returns on the first
/// error.
pub async fn run_once(
    context: &RelayContext,
    remote: &RemoteDc,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let topic = context.relay.topic(&remote.dc);
    let stats = context
        .stats
        .applier(&remote.dc)
        .ok_or_else(|| RelayError::Refused(format!("{} is not one of relay.remotes", remote.dc)))?;
    let mut conn = mysql::connect(context.url()).await?;
    let mut setup: Vec<&str> = SESSION_SETUP.to_vec();
    if context.loop_filter() == LoopFilterMode::SkipReplication {
        setup.push("SET SESSION skip_replication = 1");
    }
    for statement in setup {
        conn.query_drop(statement)
            .await
            .map_err(DbError::mysql(format!(
                "setting up the applier's session: {statement}"
            )))?;
    }
    // One applier per source and database: the lock goes with the connection, also when the
    // process dies.
    let lock = lock_name(&["relay-apply", &context.state_database, &remote.dc]);
    if !try_lock(&mut conn, &lock, 0).await? {
        return Err(RelayError::Busy(format!(
            "another relay applies {} here (it holds lock {lock})",
            remote.dc
        )));
    }
    let applied = load_applied(&mut conn, &remote.dc, &topic).await?;
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
    // Reading, decoding and writing the SQL of the next transactions overlaps with applying
    // the current one.
    let (ready_tx, ready_rx) = mpsc::channel(READY_AHEAD);
    let mut stop_applying = shutdown.clone();
    tokio::try_join!(
        read(
            &consumer, &topic, remote, applied, stats, shutdown, ready_tx
        ),
        apply_all(
            context,
            &mut conn,
            &remote.dc,
            stats,
            ready_rx,
            &mut stop_applying
        ),
    )?;
    let _ = conn.disconnect().await;
    Ok(())
}

/// A transaction read and turned into SQL, waiting to be applied.
struct Ready {
    changes: Vec<Change>,
    statements: Vec<sql::Statement>,
    /// The offset after its last message (and after any already applied ones before it).
    next_offset: i64,
    /// How far the applier is in the source's stream once it is applied.
    followed: Followed,
}

/// What the reading half hands the applying half.
enum Item {
    Ready(Ready),
    /// A message that cannot be applied: applying stops, and reading too.
    Bad {
        why: String,
    },
    /// A transaction that cannot be placed after what was applied: applying stops.
    Unordered {
        why: String,
        commit_ts: u32,
    },
}

fn consumer(
    context: &RelayContext,
    remote: &RemoteDc,
    topic: &str,
    offset: i64,
) -> Result<StreamConsumer, RelayError> {
    let brokers = remote.brokers_or(&context.kafka.brokers);
    let consumer: StreamConsumer = context
        .kafka_config(brokers)
        .set(
            "group.id",
            format!("logstamp-relay-{}-from-{}", context.dc(), remote.dc),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A stored offset the topic no longer has means changes were deleted unapplied: stop.
        .set("auto.offset.reset", "error")
        // Caught up, a fetch waits this long for new messages; brokers answer as soon as one
        // arrives, but a short wait bounds the delay where they do not.
        .set("fetch.wait.max.ms", "100")
        .create_redacted()
        .map_err(RelayError::kafka("creating the Kafka consumer"))?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    consumer
        .assign(&assignment)
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    Ok(consumer)
}

/// Reads the topic from the stored offset, gathers each transaction, skips those already
/// applied, and hands the rest on with their SQL. After a transaction that cannot be placed it
/// hands on nothing more until the source's stream starts anew (a new epoch). Ends at shutdown,
/// or when nobody applies.
async fn read(
    consumer: &StreamConsumer,
    topic: &str,
    remote: &RemoteDc,
    applied: Applied,
    stats: &ApplyStats,
    shutdown: &mut watch::Receiver<bool>,
    ready: mpsc::Sender<Item>,
) -> Result<(), RelayError> {
    let mut assembler = Assembler::default();
    // How far the transactions handed on go, and the offset after the last message read.
    let mut followed = applied.followed;
    let mut consumed = applied.next_offset;
    let mut stopped = false;
    loop {
        let message = tokio::select! {
            _ = shutdown.changed() => return Ok(()),
            message = consumer.recv() => message,
        };
        let message = match message {
            Ok(message) => message,
            Err(KafkaError::MessageConsumption(
                code @ (RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset),
            )) => {
                return Err(RelayError::Refused(format!(
                    "{topic} no longer has offset {consumed} ({code}): changes from {} were \
                     deleted before they were applied; copy the relayed tables anew and reset \
                     its row in relay_applied",
                    remote.dc
                )));
            }
            Err(e) => {
                // librdkafka reconnects by itself; say why it is slow.
                tracing::warn!(topic, "reading from Kafka: {e}");
                continue;
            }
        };
        let offset = message.offset();
        let change = match Change::from_json(message.payload().unwrap_or_default()) {
            Ok(change) if change.dc == remote.dc => change,
            Ok(change) => {
                let why = format!("holds a change from {}, not {}", change.dc, remote.dc);
                return halt(&ready, format!("{topic} offset {offset} {why}"), shutdown).await;
            }
            Err(e) => return halt(&ready, format!("{topic} offset {offset}: {e}"), shutdown).await,
        };
        consumed = offset + 1;
        let Some(changes) = assembler.push(change) else {
            continue;
        };
        let first = &changes[0];
        let position = &first.position;
        let gtid = position.gtid.as_deref().unwrap_or("none");
        let next = match order(&followed, &remote.dc, position.gtid(), &first.stream) {
            Verdict::Apply(next) if !stopped || next.epoch > followed.epoch => next,
            // Stopped: only a new epoch goes on.
            Verdict::Apply(_) => continue,
            Verdict::Applied => {
                // Published again by a capture that restarted before its checkpoint, or by
                // another server of the source after a failover.
                stats.skipped_transactions.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(gtid, seq = first.txn.seq, "already applied");
                continue;
            }
            Verdict::Unordered(why) => {
                if !stopped {
                    stopped = true;
                    let item = Item::Unordered {
                        why: format!(
                            "{topic} offset {offset}, transaction {} ({gtid}): {why}",
                            first.txn.seq
                        ),
                        commit_ts: first.commit_ts,
                    };
                    if ready.send(item).await.is_err() {
                        return Ok(());
                    }
                }
                continue;
            }
        };
        if stopped {
            stopped = false;
            tracing::info!(
                source = remote.dc,
                epoch = next.epoch,
                "the stream of {} was started anew: applying goes on",
                remote.dc
            );
        }
        let rows: Vec<&RowChange> = changes.iter().map(|c| &c.row).collect();
        let statements = match sql::statements(&rows) {
            Ok(statements) => statements,
            Err(e) => {
                let why = format!(
                    "{topic} offset {offset}, transaction {} ({gtid}, {}:{}): {e}",
                    first.txn.seq, position.file, position.pos
                );
                return halt(&ready, why, shutdown).await;
            }
        };
        followed = next.clone();
        let next = Ready {
            changes,
            statements,
            next_offset: consumed,
            followed: next,
        };
        if ready.send(Item::Ready(next)).await.is_err() {
            // The applying half stopped; its result says why.
            return Ok(());
        }
    }
}

/// Hands on a message that cannot be applied, then reads nothing more until shutdown: the
/// applier stops there, visibly, and capture and the other appliers go on.
async fn halt(
    ready: &mpsc::Sender<Item>,
    why: String,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    if ready.send(Item::Bad { why }).await.is_ok() {
        // Ends when shutdown is set or its sender dropped.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    Ok(())
}

/// Applies the transactions handed on, in order, each once its tables match here. When more
/// are waiting, up to `relay.apply_batch` go into one local transaction: each source
/// transaction stays whole, and one commit serves them all.
async fn apply_all(
    context: &RelayContext,
    conn: &mut Conn,
    source_dc: &str,
    stats: &ApplyStats,
    mut ready: mpsc::Receiver<Item>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let mut schemas = SchemaCache::default();
    let most = context.relay.apply_batch;
    let mut group: Vec<Ready> = Vec::with_capacity(most);
    // An item that ended the last group instead of joining it.
    let mut held: Option<Item> = None;
    // Stopped at a bad message: what is still handed on is dropped, unapplied, until shutdown.
    let mut halted = false;
    // The change applying waits at, recorded once however often it is tried again.
    let mut waiting_at: Option<TxnRef> = None;
    loop {
        let item = match held.take() {
            Some(item) => item,
            None => match ready.recv().await {
                Some(item) => item,
                None => break,
            },
        };
        let first = match item {
            _ if halted => continue,
            Item::Ready(first) => first,
            Item::Bad { why } => {
                halted = true;
                stop_visibly(conn, stats, source_dc, &why).await?;
                continue;
            }
            Item::Unordered { why, commit_ts } => {
                // Everything before it is applied; nothing after it is until the source's
                // stream starts anew. The transaction waiting ages in the lag.
                stats.lag.behind_since(commit_ts);
                stop_visibly(conn, stats, source_dc, &why).await?;
                continue;
            }
        };
        group.push(first);
        while group.len() < most {
            match ready.try_recv() {
                Ok(Item::Ready(next)) => group.push(next),
                Ok(other) => {
                    held = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let changes: Vec<&Change> = group.iter().flat_map(|t| &t.changes).collect();
        stats.lag.behind_since(changes[0].commit_ts);
        let placed = apply_when_possible(
            conn,
            &mut schemas,
            context,
            &group,
            stats,
            &mut waiting_at,
            shutdown,
        )
        .await;
        match placed {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                // A definite failure (a table not relayed here, a value the local column
                // cannot hold): the same transactions would fail again.
                rollback(conn, source_dc).await?;
                halted = true;
                stop_visibly(conn, stats, source_dc, &e.to_string()).await?;
                group.clear();
                continue;
            }
        }
        stats.stopped.store(false, Ordering::Relaxed);
        stats.conflict_stopped.store(false, Ordering::Relaxed);
        waiting_at = None;
        stats
            .applied_transactions
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        stats
            .applied_changes
            .fetch_add(changes.len() as u64, Ordering::Relaxed);
        if let Some(last) = group.last() {
            stats.next_offset.store(last.next_offset, Ordering::Relaxed);
        }
        if ready.is_empty() && held.is_none() {
            stats.lag.caught_up();
        }
        group.clear();
    }
    Ok(())
}

/// Applies `group` once its tables are the same here as at the source and no conflict holds it
/// back (`relay.on_conflict = "stop"`), recording why and trying again every
/// [`MISMATCH_RETRY`] meanwhile; `false` when shutdown came first.
async fn apply_when_possible(
    conn: &mut Conn,
    schemas: &mut SchemaCache,
    context: &RelayContext,
    group: &[Ready],
    stats: &ApplyStats,
    waiting_at: &mut Option<TxnRef>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<bool, RelayError> {
    let changes: Vec<&Change> = group.iter().flat_map(|t| &t.changes).collect();
    let source_dc = &changes[0].dc;
    loop {
        let why = match check_schemas(conn, schemas, context, &changes, source_dc).await {
            Ok(()) => {
                stats.schema_mismatch.store(false, Ordering::Relaxed);
                match apply(context, conn, source_dc, group, stats, waiting_at).await? {
                    Outcome::All => return Ok(true),
                    Outcome::WaitingAt(why) => {
                        stats.conflict_stopped.store(true, Ordering::Relaxed);
                        why
                    }
                }
            }
            Err(RelayError::SchemaMismatch(why)) => {
                stats.schema_mismatch.store(true, Ordering::Relaxed);
                why
            }
            Err(other) => return Err(other),
        };
        tracing::error!(source = source_dc, "{why}");
        record_error(conn, source_dc, &why).await?;
        tokio::select! {
            _ = shutdown.changed() => return Ok(false),
            _ = tokio::time::sleep(MISMATCH_RETRY) => {}
        }
    }
}

/// How applying a group went.
enum Outcome {
    /// Committed, conflicts resolved by `relay.on_conflict = "apply"` included.
    All,
    /// Rolled back at a conflict (`relay.on_conflict = "stop"`), for this reason.
    WaitingAt(String),
}

/// Applies consecutive source transactions with their bookkeeping in one local transaction.
async fn apply(
    context: &RelayContext,
    conn: &mut Conn,
    source_dc: &str,
    group: &[Ready],
    stats: &ApplyStats,
    waiting_at: &mut Option<TxnRef>,
) -> Result<Outcome, RelayError> {
    // Under the cache filter every change's key, as long as every change writes its row.
    let loop_keys = match context.loop_filter() {
        LoopFilterMode::Cache => group
            .iter()
            .flat_map(|t| &t.changes)
            .map(|c| CacheKey::of(&c.row))
            .collect(),
        _ => Vec::new(),
    };
    let mut conflicts = Conflicts {
        context,
        source_dc,
        stats,
        waiting_at,
        loop_keys,
        resolved: 0,
    };
    let result = apply_in_transaction(conn, &mut conflicts, group).await;
    if matches!(result, Ok(Outcome::All)) {
        // Counted once committed: a rolled back resolution is found again on the replay.
        stats
            .conflicts
            .fetch_add(conflicts.resolved, Ordering::Relaxed);
    }
    result
}

/// The group's statements in as few round trips as fit, in one transaction; COMMIT once every
/// UPDATE and DELETE found its row. When one did not, the transaction is rolled back and
/// applied again change by change, handling each conflict (see [`Conflicts`]).
async fn apply_in_transaction(
    conn: &mut Conn,
    conflicts: &mut Conflicts<'_>,
    group: &[Ready],
) -> Result<Outcome, RelayError> {
    let Some(newest) = group.last() else {
        return Ok(Outcome::All);
    };
    let source_dc = conflicts.source_dc;
    let last = &newest.changes[newest.changes.len() - 1];
    let context = || {
        format!(
            "applying transactions {} to {} from {source_dc} (up to {}:{})",
            group[0].changes[0].txn.seq, last.txn.seq, last.position.file, last.position.pos
        )
    };
    let changes: usize = group.iter().map(|t| t.changes.len()).sum();
    // The marker and the bookkeeping first, then the changes: one round trip for a transaction
    // that fits the budget, and COMMIT. The server stops at the first failing statement; the
    // transaction is rolled back with the connection (dropped with a transient error) or by the
    // caller (after a definite one).
    let bookkeeping = [
        applied_update(source_dc, last, group.len(), changes, newest.next_offset),
        gtids_update(source_dc, &newest.followed),
    ];
    let loop_keys = |keys: &[CacheKey]| loop_keys_updates(source_dc, newest.next_offset, keys);
    let every_key = loop_keys(&conflicts.loop_keys);
    let begin = std::iter::once("START TRANSACTION")
        .chain(bookkeeping.iter().chain(&every_key).map(String::as_str))
        .map(|sql| (sql, false));
    let statements = group
        .iter()
        .flat_map(|t| &t.statements)
        .map(|s| (s.sql.as_str(), s.finds_row));
    let all_found = run_batches(conn, begin.chain(statements))
        .await
        .map_err(DbError::mysql(context()))?;
    if all_found {
        conn.query_drop("COMMIT")
            .await
            .map_err(DbError::mysql(context()))?;
        return Ok(Outcome::All);
    }
    conn.query_drop("ROLLBACK")
        .await
        .map_err(DbError::mysql(context()))?;
    conn.query_drop("START TRANSACTION")
        .await
        .map_err(DbError::mysql(context()))?;
    for statement in &bookkeeping {
        conn.query_drop(statement)
            .await
            .map_err(DbError::mysql(context()))?;
    }
    for change in group.iter().flat_map(|t| &t.changes) {
        if let Some(why) = conflicts.apply_one(conn, change).await? {
            conn.query_drop("ROLLBACK")
                .await
                .map_err(DbError::mysql(context()))?;
            return Ok(Outcome::WaitingAt(why));
        }
    }
    // Only now is it known which changes wrote their rows.
    for statement in loop_keys(&conflicts.loop_keys) {
        conn.query_drop(statement)
            .await
            .map_err(DbError::mysql(context()))?;
    }
    conn.query_drop("COMMIT")
        .await
        .map_err(DbError::mysql(context()))?;
    Ok(Outcome::All)
}

/// Sends `statements` in batches under [`STATEMENT_BUDGET`]; whether each that must find its
/// row changed exactly one.
async fn run_batches<'a>(
    conn: &mut Conn,
    statements: impl Iterator<Item = (&'a str, bool)>,
) -> Result<bool, mysql_async::Error> {
    let mut all_found = true;
    let mut batch = String::new();
    let mut finds = Vec::new();
    for (sql, finds_row) in statements {
        if !batch.is_empty() && batch.len() + sql.len() > STATEMENT_BUDGET {
            all_found &= run_batch(conn, std::mem::take(&mut batch), &finds).await?;
            finds.clear();
        }
        if !batch.is_empty() {
            batch.push_str(";\n");
        }
        batch.push_str(sql);
        finds.push(finds_row);
    }
    if !batch.is_empty() {
        all_found &= run_batch(conn, batch, &finds).await?;
    }
    Ok(all_found)
}

/// Runs one multi-statement batch; whether each statement marked in `finds` changed one row
/// (the session leaves CLIENT_FOUND_ROWS off, so an UPDATE counts the rows it changed).
async fn run_batch(
    conn: &mut Conn,
    batch: String,
    finds: &[bool],
) -> Result<bool, mysql_async::Error> {
    let mut result = conn.query_iter(batch).await?;
    let mut all_found = true;
    for (i, finds_row) in finds.iter().enumerate() {
        if *finds_row && result.affected_rows() != 1 {
            all_found = false;
        }
        if i + 1 < finds.len() {
            // Each statement's result is an OK packet: reading it moves to the next one's.
            result.collect::<mysql_async::Row>().await?;
        }
    }
    result.drop_result().await?;
    Ok(all_found)
}

/// Applies changes one at a time and records each conflict, resolved as `relay.on_conflict`
/// says.
struct Conflicts<'a> {
    context: &'a RelayContext,
    source_dc: &'a str,
    stats: &'a ApplyStats,
    /// The change applying waits at, if it does: recorded once, however often tried again.
    waiting_at: &'a mut Option<TxnRef>,
    /// Under the cache filter, the keys of the changes that write their rows, recorded in
    /// `relay_loop_keys` with them: a conflicting change's own key gives way to the keys of
    /// the writes that made it win.
    loop_keys: Vec<CacheKey>,
    /// Conflicts resolved by applying the change, counted once committed.
    resolved: u64,
}

impl Conflicts<'_> {
    /// Applies `change` in the open transaction; on a conflict records it and either makes the
    /// change win or returns why applying waits (the caller rolls back).
    async fn apply_one(
        &mut self,
        conn: &mut Conn,
        change: &Change,
    ) -> Result<Option<String>, RelayError> {
        let Some(statement) = self.statement(&change.row)? else {
            return Ok(None);
        };
        let table = format!("{}.{}", change.row.schema, change.row.table);
        let source_dc = self.source_dc;
        let failed = || format!("applying a change of {table} from {source_dc}");
        conn.query_drop(&statement.sql)
            .await
            .map_err(DbError::mysql(failed()))?;
        if !statement.finds_row || conn.affected_rows() == 1 {
            return Ok(None);
        }
        let found: Option<String> = conn
            .query_first(self.sql(sql::found_row(&change.row))?)
            .await
            .map_err(DbError::mysql(failed()))?;
        let stop = self.context.relay.on_conflict == OnConflict::Stop;
        if stop && *self.waiting_at == Some(change.txn) {
            return Ok(Some(self.waiting_reason(change, &table)));
        }
        if stop {
            // Recorded outside the transaction, which is rolled back.
            conn.query_drop("ROLLBACK")
                .await
                .map_err(DbError::mysql(failed()))?;
        }
        self.record(conn, change, found.as_deref(), stop).await?;
        if stop {
            *self.waiting_at = Some(change.txn);
            self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(self.waiting_reason(change, &table)));
        }
        // The change itself wrote nothing to the binlog, so its key is not recorded.
        self.drop_key(CacheKey::of(&change.row));
        for forced in sql::forced(&change.row) {
            if let Some(statement) = self.statement(&forced)? {
                conn.query_drop(&statement.sql)
                    .await
                    .map_err(DbError::mysql(failed()))?;
                // Only a row written reaches the binlog, so only its key is recorded.
                if conn.affected_rows() > 0 {
                    self.keep_key(CacheKey::of(&forced));
                }
            }
        }
        self.resolved += 1;
        tracing::warn!(
            source = self.source_dc,
            table,
            "a {} from {} did not find its row here as it was there: recorded in \
             {CONFLICTS_TABLE}, and the change applied",
            change.row.kind,
            self.source_dc
        );
        Ok(None)
    }

    /// Under the cache filter, records the key of a row written, for capture to drop.
    fn keep_key(&mut self, key: CacheKey) {
        if self.context.loop_filter() == LoopFilterMode::Cache {
            self.loop_keys.push(key);
        }
    }

    /// Takes back one recording of `key`.
    fn drop_key(&mut self, key: CacheKey) {
        if let Some(at) = self.loop_keys.iter().position(|k| *k == key) {
            self.loop_keys.swap_remove(at);
        }
    }

    fn statement(&self, row: &RowChange) -> Result<Option<sql::Statement>, RelayError> {
        self.sql(sql::statement(row))
    }

    /// A statement the reading half already wrote once for the same change cannot fail.
    fn sql<T>(&self, written: Result<T, String>) -> Result<T, RelayError> {
        written.map_err(|e| RelayError::Refused(format!("a change from {}: {e}", self.source_dc)))
    }

    fn waiting_reason(&self, change: &Change, table: &str) -> String {
        format!(
            "a {} of {table} from {} (transaction {}, {}) did not find its row here as it was \
             there (see {CONFLICTS_TABLE}); relay.on_conflict is stop, so applying from {} \
             waits: make the row here equal the expected image (insert it if it is missing), \
             or set relay.on_conflict = \"apply\" and restart, and applying goes on",
            change.row.kind,
            self.source_dc,
            change.txn.seq,
            change.position.gtid.as_deref().unwrap_or("no GTID"),
            self.source_dc
        )
    }

    async fn record(
        &self,
        conn: &mut Conn,
        change: &Change,
        found: Option<&str>,
        stopped: bool,
    ) -> Result<(), RelayError> {
        let row = &change.row;
        let json =
            |r: &Row| serde_json::Value::Object(row_to_json(r).into_iter().collect()).to_string();
        conn.exec_drop(
            format!(
                "INSERT INTO `{CONFLICTS_TABLE}` (source_dc, source_gtid, table_schema, \
                 table_name, change_type, row_key, expected, found, change_message, resolution) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                self.source_dc,
                change.position.gtid.as_deref().unwrap_or_default(),
                &row.schema,
                &row.table,
                row.kind.to_string(),
                json(&row.key),
                row.before.as_ref().map(json).unwrap_or_default(),
                found,
                String::from_utf8_lossy(&change.to_json()).into_owned(),
                if stopped { "stopped" } else { "applied" },
            ),
        )
        .await
        .map_err(DbError::mysql(format!(
            "recording a conflict of {}.{} from {}",
            row.schema, row.table, self.source_dc
        )))?;
        Ok(())
    }
}

/// Records the transaction in `relay_applied`: the marker, and where a restart resumes.
fn applied_update(
    source_dc: &str,
    last: &Change,
    transactions: usize,
    changes: usize,
    next_offset: i64,
) -> String {
    let mut sql = format!(
        "UPDATE `{APPLIED_TABLE}` SET next_offset = {next_offset}, source_pos = {}, \
         source_seq = {}, source_commit_ts = {}, \
         applied_transactions = applied_transactions + {transactions}, \
         applied_changes = applied_changes + {changes}, last_error = NULL, source_file = ",
        last.position.pos, last.txn.seq, last.commit_ts
    );
    push_sql_string(&mut sql, &last.position.file);
    sql.push_str(", source_gtid = ");
    push_sql_string(&mut sql, last.position.gtid.as_deref().unwrap_or_default());
    sql.push_str(" WHERE source_dc = ");
    push_sql_string(&mut sql, source_dc);
    sql
}

/// Records the keys of the changes applied, for the `cache` loop filter: capture finds them in
/// the binlog with the changes (see [`super::loop_filter`]). Keys go in chunks of
/// [`KEYS_PER_CHUNK`], so that no statement outgrows the budget.
fn loop_keys_updates(source_dc: &str, next_offset: i64, keys: &[CacheKey]) -> Vec<String> {
    keys.chunks(KEYS_PER_CHUNK)
        .enumerate()
        .map(|(chunk, keys)| {
            let mut sql = format!(
                "INSERT INTO `{LOOP_KEYS_TABLE}` (source_dc, chunk, next_offset, cache_keys) \
                 VALUES ("
            );
            push_sql_string(&mut sql, source_dc);
            sql.push_str(&format!(", {chunk}, {next_offset}, "));
            let bytes = keys.iter().flat_map(|k| *k.as_bytes()).collect();
            sql::push_literal(&mut sql, Some(&Value::Bytes(bytes)));
            sql.push_str(
                ") ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), \
                 cache_keys = VALUES(cache_keys)",
            );
            sql
        })
        .collect()
}

/// Records how far the applier is in the source's stream: what recognises a transaction
/// published again, on any server of the source.
fn gtids_update(source_dc: &str, followed: &Followed) -> String {
    let mut sql =
        format!("INSERT INTO `{APPLIED_GTIDS_TABLE}` (source_dc, epoch, applied) VALUES (");
    push_sql_string(&mut sql, source_dc);
    sql.push_str(&format!(", {}, ", followed.epoch));
    push_sql_string(&mut sql, &followed.applied.to_string());
    sql.push_str(") ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), applied = VALUES(applied)");
    sql
}

async fn load_applied(
    conn: &mut Conn,
    source_dc: &str,
    topic: &str,
) -> Result<Applied, RelayError> {
    let context = || format!("reading the applied offset of {source_dc}");
    conn.exec_drop(
        format!(
            "INSERT IGNORE INTO `{APPLIED_TABLE}` (source_dc, topic, next_offset) VALUES (?, ?, 0)"
        ),
        (source_dc, topic),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    let row: Option<mysql_async::Row> = conn
        .exec_first(
            format!(
                "SELECT a.next_offset, g.epoch, g.applied, a.topic FROM `{APPLIED_TABLE}` a \
                 LEFT JOIN `{APPLIED_GTIDS_TABLE}` g ON g.source_dc = a.source_dc \
                 WHERE a.source_dc = ?"
            ),
            (source_dc,),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let mut row = row.ok_or_else(|| RelayError::Refused(format!("{}: no row", context())))?;
    let stored_topic: String = take(&mut row, 3, "relay_applied.topic")?;
    if stored_topic != topic {
        return Err(RelayError::Refused(format!(
            "{source_dc} was applied from topic {stored_topic}, now configured as {topic}: \
             offsets of one topic mean nothing in another; reset its row in relay_applied"
        )));
    }
    let epoch: Option<u64> = take(&mut row, 1, "relay_applied_gtids.epoch")?;
    let applied: Option<String> = take(&mut row, 2, "relay_applied_gtids.applied")?;
    Ok(Applied {
        next_offset: take(&mut row, 0, "relay_applied.next_offset")?,
        followed: Followed {
            epoch: epoch.unwrap_or(0),
            applied: applied.unwrap_or_default().parse().map_err(|e| {
                RelayError::Refused(format!(
                    "relay_applied_gtids of {source_dc} holds a bad GTID state: {e}"
                ))
            })?,
        },
    })
}

/// Stops applying from `source_dc` where everybody sees it: the log, `relay status`, the
/// `logstamp_relay_apply_stopped` metric and readiness.
async fn stop_visibly(
    conn: &mut Conn,
    stats: &ApplyStats,
    source_dc: &str,
    why: &str,
) -> Result<(), RelayError> {
    stats.stopped.store(true, Ordering::Relaxed);
    tracing::error!(
        source = source_dc,
        "applying from {source_dc} stopped: {why}"
    );
    record_error(conn, source_dc, why).await
}

/// Ends the transaction a failed apply left open.
async fn rollback(conn: &mut Conn, source_dc: &str) -> Result<(), RelayError> {
    conn.query_drop("ROLLBACK")
        .await
        .map_err(DbError::mysql(format!(
            "rolling back a failed apply from {source_dc}"
        )))?;
    Ok(())
}

/// Stores why applying is stuck, for `relay status`.
async fn record_error(conn: &mut Conn, source_dc: &str, message: &str) -> Result<(), RelayError> {
    conn.exec_drop(
        format!("UPDATE `{APPLIED_TABLE}` SET last_error = ? WHERE source_dc = ?"),
        (message, source_dc),
    )
    .await
    .map_err(DbError::mysql(format!(
        "recording the error of {source_dc}"
    )))?;
    Ok(())
}

/// What was last found to agree, by table: the source's kinds and contract, trusted for
/// [`SCHEMA_RECHECK`] (the local table is read again after that, or as soon as a message
/// carries another definition).
#[derive(Debug, Default)]
struct SchemaCache {
    checked: HashMap<(String, String), (Instant, Definition)>,
}

/// A source table's definition as a message carries it.
#[derive(Debug, Clone, PartialEq)]
struct Definition {
    kinds: BTreeMap<String, Kind>,
    contract: Option<Arc<Contract>>,
}

/// Refuses a transaction touching a table that is not relayed here (for good) or that differs
/// (until they agree): with the message's contract, in its primary key or any column's exact
/// type; without one (a capture from before the contract), in its columns' names and kinds.
async fn check_schemas(
    conn: &mut Conn,
    cache: &mut SchemaCache,
    context: &RelayContext,
    changes: &[&Change],
    source_dc: &str,
) -> Result<(), RelayError> {
    for change in changes {
        let row = &change.row;
        let name = (row.schema.clone(), row.table.clone());
        let definition = Definition {
            kinds: row.columns.clone(),
            contract: row.contract.clone(),
        };
        if let Some((at, checked)) = cache.checked.get(&name)
            && at.elapsed() < SCHEMA_RECHECK
            && *checked == definition
        {
            continue;
        }
        if !context.is_relayed(&row.schema, &row.table) {
            return Err(RelayError::Refused(format!(
                "{source_dc} sends changes of {}.{} (transaction {}, {}:{}), which relay.tables \
                 does not list here",
                row.schema, row.table, change.txn.seq, change.position.file, change.position.pos
            )));
        }
        let local = local_columns(conn, &row.schema, &row.table).await?;
        let differences = match &row.contract {
            Some(source) => {
                let key = local_key(conn, &row.schema, &row.table).await?;
                contract::differences(source, &contract::local_contract(&local, key), source_dc)
            }
            None => sql::column_differences(&row.columns, &local, source_dc),
        };
        if !differences.is_empty() {
            return Err(RelayError::SchemaMismatch(format!(
                "table {}.{} differs between {source_dc} and here: {}; applying from \
                 {source_dc} waits until the table is the same in both (DDL is not relayed)",
                row.schema,
                row.table,
                differences.join("; ")
            )));
        }
        cache.checked.insert(name, (Instant::now(), definition));
    }
    Ok(())
}

async fn local_columns(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<Vec<LocalColumn>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, \
             CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        .await
        .map_err(DbError::mysql(format!(
            "reading the columns of {schema}.{table}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(LocalColumn {
                name: take(&mut row, 0, "COLUMN_NAME")?,
                data_type: take(&mut row, 1, "DATA_TYPE")?,
                column_type: take(&mut row, 2, "COLUMN_TYPE")?,
                charset: take(&mut row, 3, "CHARACTER_SET_NAME")?,
                octet_length: take(&mut row, 4, "CHARACTER_OCTET_LENGTH")?,
                precision: take(&mut row, 5, "NUMERIC_PRECISION")?,
                scale: take(&mut row, 6, "NUMERIC_SCALE")?,
                datetime_precision: take(&mut row, 7, "DATETIME_PRECISION")?,
            })
        })
        .collect()
}

/// The local table's primary key columns, in key order.
async fn local_key(conn: &mut Conn, schema: &str, table: &str) -> Result<Vec<String>, DbError> {
    conn.exec(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? \
         AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (schema, table),
    )
    .await
    .map_err(DbError::mysql(format!(
        "reading the primary key of {schema}.{table}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::change::{Position, TxnRef};

    fn message(seq: u64, index: u32, count: u32) -> Change {
        let position = Position {
            file: "bin.000001".into(),
            pos: 100 + seq,
            gtid: None,
        };
        Change::test_delete(position, TxnRef { seq, index, count }, Default::default())
    }

    #[test]
    fn transactions_complete_at_their_last_message() {
        let mut a = Assembler::default();
        assert!(a.push(message(1, 0, 2)).is_none());
        let txn = a.push(message(1, 1, 2)).unwrap();
        assert_eq!(txn.len(), 2);
        assert_eq!(a.push(message(2, 0, 1)).unwrap().len(), 1);
    }

    #[test]
    fn a_cut_off_transaction_is_dropped_for_its_republished_whole() {
        let mut a = Assembler::default();
        assert!(a.push(message(1, 0, 3)).is_none());
        assert!(a.push(message(1, 1, 3)).is_none());
        // Capture restarted: the transaction again, from its start.
        assert!(a.push(message(1, 0, 3)).is_none());
        assert!(a.push(message(1, 1, 3)).is_none());
        assert_eq!(a.push(message(1, 2, 3)).unwrap().len(), 3);
    }

    #[test]
    fn the_tail_of_a_transaction_without_its_start_is_ignored() {
        let mut a = Assembler::default();
        assert!(a.push(message(4, 1, 3)).is_none());
        assert!(a.push(message(4, 2, 3)).is_none());
        assert!(a.push(message(5, 0, 1)).is_some());
        // A message of another transaction in the middle is a break, too.
        assert!(a.push(message(6, 0, 2)).is_none());
        assert!(a.push(message(7, 1, 2)).is_none());
    }
}
