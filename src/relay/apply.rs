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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::kafka::CreateRedacted;
use crate::mysql::encode::push_sql_string;
use crate::mysql::lock::{lock_name, try_lock};
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};
use crate::relay::settings::{
    LoopFilterMode, MIN_MESSAGE_BYTES, OnBadMessage, OnConflict, RemoteDc,
};

use super::change::{
    Change, ChangeKind, Contracts, Kind, Position, Row, RowChange, TxnRef, Value, row_to_json,
};
use super::context::{
    APPLIED_GTIDS_TABLE, APPLIED_TABLE, CONFLICTS_TABLE, DEAD_LETTERS_TABLE, LOOP_KEYS_TABLE,
    RelayContext, RelayError,
};
use super::contract::{self, Contract, LocalColumn};
use super::loop_filter::CacheKey;
use super::order::{Followed, Verdict, order};
use super::sql;
use super::stats::{ApplyStats, DeadLettering, Running};

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
    let limits = Limits::new(context, &mut conn).await?;
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
        held: Arc::new(Semaphore::new(limits.held_bytes)),
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
    let _ = conn.disconnect().await;
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
    /// Recorded keys per row of `relay_loop_keys`: 64 hex digits each, half a statement.
    keys_per_chunk: usize,
}

impl Limits {
    async fn new(context: &RelayContext, conn: &mut Conn) -> Result<Limits, RelayError> {
        let packet: Option<u64> = conn
            .query_first("SELECT @@max_allowed_packet")
            .await
            .map_err(DbError::mysql("reading max_allowed_packet"))?;
        let packet = packet
            .and_then(|p| usize::try_from(p).ok())
            .unwrap_or(usize::MAX);
        Ok(Limits::of(context.relay.apply_memory_bytes, packet))
    }

    fn of(memory: usize, max_allowed_packet: usize) -> Limits {
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
        }
    }
}

/// A table a part changes, with the definition its messages give it.
#[derive(Debug, Clone, PartialEq)]
struct TableRef {
    schema: String,
    table: String,
    definition: Definition,
}

/// The end of a source transaction, read from its last message.
#[derive(Debug, Clone)]
struct End {
    position: Position,
    seq: u64,
    commit_ts: u32,
    /// The offset after its last message.
    next_offset: i64,
}

impl End {
    fn of(last: &Change, next_offset: i64) -> End {
        End {
            position: last.position.clone(),
            seq: last.txn.seq,
            commit_ts: last.commit_ts,
            next_offset,
        }
    }
}

/// Consecutive changes of a source transaction, turned into SQL, waiting to be applied.
struct Part<'a> {
    /// Its source transaction's sequence number in the topic, and where its first change is.
    seq: u64,
    position: Position,
    /// The offset after its last message.
    next_offset: i64,
    /// The first part of its source transaction.
    starts: bool,
    /// Set on the last part of its source transaction.
    end: Option<End>,
    /// How far the applier is in the source's stream once the transaction is applied.
    followed: Followed,
    statements: Vec<sql::Statement>,
    /// The changes whose statements must find their rows (UPDATEs and DELETEs), in order: what
    /// a conflict is applied and recorded from.
    finders: Vec<Change>,
    tables: Vec<TableRef>,
    /// The changes' keys, for the cache loop filter: recorded in `relay_loop_keys`.
    keys: Vec<CacheKey>,
    changes: u64,
    /// Messages it records in `relay_dead_letters` instead of applying them.
    dead_letters: u64,
    commit_ts: u32,
    /// Its share of `relay.apply_memory_bytes`, given back once it is applied.
    _held: Held<'a>,
}

impl Part<'_> {
    /// The source transaction it is part of, to dead-letter for `reason`.
    fn lettering(&self, reason: String) -> DeadLettering {
        DeadLettering {
            epoch: self.followed.epoch,
            seq: self.seq,
            gtid: self.position.gtid.clone(),
            reason,
        }
    }
}

/// A part's share of `relay.apply_memory_bytes`, shown in `logstamp_relay_apply_held_bytes`
/// while it lives.
struct Held<'a> {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
    gauge: &'a AtomicU64,
}

impl<'a> Held<'a> {
    fn new(permit: OwnedSemaphorePermit, bytes: u32, gauge: &'a AtomicU64) -> Held<'a> {
        let bytes = u64::from(bytes);
        gauge.fetch_add(bytes, Ordering::Relaxed);
        Held {
            _permit: permit,
            bytes,
            gauge,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What the reading half hands the applying half.
enum Item<'a> {
    Part(Box<Part<'a>>),
    /// A message that cannot be applied: applying stops, and reading too; with
    /// `relay.on_bad_message = "dead_letter"`, its source transaction (when it is known) is
    /// read again and dead-lettered.
    Bad {
        why: String,
        txn: Option<DeadLettering>,
    },
    /// A message that is no change of this source's (`relay.on_bad_message = "dead_letter"`):
    /// recorded in `relay_dead_letters`, and reading goes on.
    Stray {
        offset: i64,
        payload: Vec<u8>,
        why: String,
    },
    /// The source transaction whose parts were handed on stops short in the topic (capture
    /// restarted while publishing it and publishes it again whole): undo them.
    CutOff,
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
    // An eighth of relay.apply_memory_bytes for what librdkafka fetches ahead; one fetch may
    // go over it, and takes a message as large.
    let fetch_bytes =
        (context.relay.apply_memory_bytes / 8).clamp(MIN_MESSAGE_BYTES, MOST_FETCH_BYTES);
    // A fetch's size counts the topic's bytes, which capture compresses (lz4): a fetch of the
    // whole eighth grew the applier's peak by 69 MB over a 16 MiB setting on Apache Kafka (22
    // to 24 MB asking for a sixteenth of it). But it must hold the largest message: with less,
    // a 5.6 MB message was never delivered (tests/relay_sizes.rs).
    let partition_fetch_bytes = (fetch_bytes / FETCH_EXPANSION)
        .max(context.relay.max_message_bytes)
        .min(fetch_bytes);
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
        .set(
            "queued.max.messages.kbytes",
            (fetch_bytes / 1024).to_string(),
        )
        .set(
            "max.partition.fetch.bytes",
            partition_fetch_bytes.to_string(),
        )
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

/// The source transaction being read.
struct Reading {
    seq: u64,
    gtid: Option<String>,
    next_index: u32,
    /// Where the source's stream is once it is applied; `None` when it is skipped.
    apply: Option<Followed>,
    /// Some of its parts were handed on.
    handed_on: bool,
    /// Its messages not handed on yet, and their bytes.
    gathered: Vec<Change>,
    gathered_bytes: usize,
    /// Why its messages go to `relay_dead_letters` instead of being applied, if they do.
    lettered: Option<String>,
}

impl Reading {
    /// It is the transaction `lettering` names.
    fn is(&self, lettering: &DeadLettering, epoch: u64) -> bool {
        lettering.epoch == epoch && lettering.seq == self.seq && lettering.gtid == self.gtid
    }

    /// Its source transaction, to dead-letter for `reason`.
    fn lettering(&self, epoch: u64, reason: String) -> DeadLettering {
        DeadLettering {
            epoch,
            seq: self.seq,
            gtid: self.gtid.clone(),
            reason,
        }
    }

    fn continued_by(&self, change: &Change) -> bool {
        change.txn.index == self.next_index
            && change.txn.seq == self.seq
            && change.position.gtid == self.gtid
    }
}

/// The reading half of an applier.
struct Reader<'a> {
    topic: &'a str,
    remote: &'a RemoteDc,
    stats: &'a ApplyStats,
    limits: &'a Limits,
    /// The cache loop filter is on: parts carry their changes' keys.
    cache: bool,
    /// `relay.on_bad_message = "dead_letter"`.
    dead_letter: bool,
    /// What parts waiting to be applied may hold.
    held: Arc<Semaphore>,
    ready: mpsc::Sender<Item<'a>>,
}

impl<'a> Reader<'a> {
    /// Reads the topic from the stored offset, skips the transactions already applied, and
    /// hands the rest on in parts with their SQL. After a transaction that cannot be placed it
    /// hands on nothing more until the source's stream starts anew (a new epoch). Ends at
    /// shutdown, or when nobody applies; its end (dropping `ready`) ends the applying half.
    async fn read(
        self,
        consumer: &StreamConsumer,
        applied: Applied,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), RelayError> {
        let (topic, remote) = (self.topic, self.remote);
        // How far the transactions handed on whole go, and the offset after the last message
        // read.
        let mut followed = applied.followed;
        let mut consumed = applied.next_offset;
        let mut stopped = false;
        let mut reading: Option<Reading> = None;
        let mut contracts = Contracts::default();
        // A transaction that failed for good before this applier started again, to dead-letter.
        let mut lettering = self.stats.take_dead_lettering();
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
                         deleted before they were applied; copy the relayed tables anew and \
                         reset its row in relay_applied",
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
            let payload = message.payload().unwrap_or_default();
            let parsed = match Change::from_json_with(payload, &mut contracts) {
                Ok(change) if change.dc == remote.dc => Ok(change),
                Ok(change) => Err(format!(
                    "holds a change from {}, not {}",
                    change.dc, remote.dc
                )),
                Err(e) => Err(e.to_string()),
            };
            let change = match parsed {
                Ok(change) => change,
                // Not part of any transaction of this source's: the transaction being read,
                // if any, goes on after it.
                Err(why) if self.dead_letter => {
                    consumed = offset + 1;
                    let payload = payload.to_vec();
                    let stray = Item::Stray {
                        offset,
                        payload,
                        why,
                    };
                    if self.ready.send(stray).await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
                Err(why) => {
                    let why = format!("{topic} offset {offset}: {why}");
                    return halt(&self.ready, why, None, shutdown).await;
                }
            };
            consumed = offset + 1;
            let continues = reading.as_ref().is_some_and(|r| r.continued_by(&change));
            if !continues && let Some(cut) = reading.take() {
                // The rest of it comes again, whole, from its first message.
                if cut.handed_on {
                    tracing::warn!(
                        seq = cut.seq,
                        "a transaction's messages stopped short; it was published again"
                    );
                    if self.ready.send(Item::CutOff).await.is_err() {
                        return Ok(());
                    }
                }
            }
            if change.txn.index == 0 {
                let first = &change;
                let gtid = first.position.gtid.as_deref().unwrap_or("none");
                let apply = match order(&followed, &remote.dc, first.position.gtid(), &first.stream)
                {
                    Verdict::Apply(next) if !stopped || next.epoch > followed.epoch => {
                        if stopped {
                            stopped = false;
                            tracing::info!(
                                source = remote.dc,
                                epoch = next.epoch,
                                "the stream of {} was started anew: applying goes on",
                                remote.dc
                            );
                        }
                        Some(next)
                    }
                    // Stopped: only a new epoch goes on.
                    Verdict::Apply(_) => None,
                    Verdict::Applied => {
                        // Published again by a capture that restarted before its checkpoint,
                        // or by another server of the source after a failover.
                        self.stats
                            .skipped_transactions
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(gtid, seq = first.txn.seq, "already applied");
                        None
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
                            if self.ready.send(item).await.is_err() {
                                return Ok(());
                            }
                        }
                        None
                    }
                };
                let mut next = Reading {
                    seq: first.txn.seq,
                    gtid: first.position.gtid.clone(),
                    next_index: 0,
                    apply,
                    handed_on: false,
                    gathered: Vec::new(),
                    gathered_bytes: 0,
                    lettered: None,
                };
                if let Some(l) = lettering.take_if(|l| next.is(l, first.stream.epoch)) {
                    tracing::warn!(
                        source = remote.dc,
                        seq = next.seq,
                        gtid,
                        "dead-lettering a transaction: {}",
                        l.reason
                    );
                    next.lettered = Some(l.reason);
                }
                reading = Some(next);
            }
            // The rest of a transaction whose start was not read: it comes again whole.
            let Some(current) = reading.as_mut() else {
                continue;
            };
            current.next_index += 1;
            let last = change.txn.is_last();
            let Some(next) = current.apply.clone() else {
                if last {
                    reading = None;
                }
                continue;
            };
            let part = if let Some(reason) = &current.lettered {
                let letter = Letter {
                    change: &change,
                    offset,
                    payload,
                    reason,
                };
                self.dead_letter_part(letter, next.clone(), last, consumed)
                    .await
            } else {
                current.gathered_bytes += payload.len();
                current.gathered.push(change);
                if !last && current.gathered_bytes < self.limits.part_bytes {
                    continue;
                }
                self.part(current, next.clone(), last, consumed).await
            };
            let part = match part {
                Ok(part) => part,
                Err(e) if e.is_transient() => return Err(e),
                // A statement that cannot be written or sent: the same messages fail again.
                Err(e) => {
                    let why = e.to_string();
                    let txn = (self.dead_letter && current.lettered.is_none())
                        .then(|| current.lettering(next.epoch, why.clone()));
                    return halt(&self.ready, why, txn, shutdown).await;
                }
            };
            current.handed_on = true;
            if last {
                followed = next;
                reading = None;
            }
            if self.ready.send(Item::Part(Box::new(part))).await.is_err() {
                // The applying half stopped; its result says why.
                return Ok(());
            }
        }
    }

    /// Turns the messages gathered into a part, once parts waiting leave room for it.
    async fn part(
        &self,
        current: &mut Reading,
        followed: Followed,
        last: bool,
        next_offset: i64,
    ) -> Result<Part<'a>, RelayError> {
        let changes = std::mem::take(&mut current.gathered);
        current.gathered_bytes = 0;
        let (first, newest) = match (changes.first(), changes.last()) {
            (Some(first), Some(newest)) => (first, newest),
            _ => return Err(RelayError::Refused("an empty part".into())),
        };
        let refused = |e: String| {
            RelayError::Refused(format!(
                "{} transaction {} ({}, {}:{}): {e}",
                self.topic,
                newest.txn.seq,
                newest.position.gtid.as_deref().unwrap_or("none"),
                newest.position.file,
                newest.position.pos
            ))
        };
        let rows: Vec<&RowChange> = changes.iter().map(|c| &c.row).collect();
        let statements = sql::statements(&rows, self.limits.statement_bytes).map_err(refused)?;
        if let Some(large) = statements
            .iter()
            .find(|s| s.sql.len() > self.limits.packet_bytes)
        {
            return Err(refused(format!(
                "a statement of {} bytes does not fit the server's max_allowed_packet; raise \
                 max_allowed_packet here above {}",
                large.sql.len(),
                large.sql.len() + PACKET_OVERHEAD
            )));
        }
        let mut tables: Vec<TableRef> = Vec::new();
        for row in &rows {
            let table = TableRef {
                schema: row.schema.clone(),
                table: row.table.clone(),
                definition: Definition {
                    kinds: row.columns.clone(),
                    contract: row.contract.clone(),
                },
            };
            if !tables.contains(&table) {
                tables.push(table);
            }
        }
        let keys: Vec<CacheKey> = if self.cache {
            rows.iter().map(|row| CacheKey::of(row)).collect()
        } else {
            Vec::new()
        };
        // The changes kept for their conflicts take about what their statements do.
        let finding: usize = statements
            .iter()
            .filter(|s| s.finds_row)
            .map(|s| s.sql.len())
            .sum();
        let bytes: usize = statements.iter().map(|s| s.sql.len()).sum::<usize>()
            + finding
            + keys.len() * std::mem::size_of::<CacheKey>();
        let held = self.hold(bytes).await?;
        let (seq, position, commit_ts) = (first.txn.seq, first.position.clone(), first.commit_ts);
        let starts = first.txn.index == 0;
        let end = last.then(|| End::of(newest, next_offset));
        let count = changes.len() as u64;
        let finders: Vec<Change> = changes.into_iter().filter(|c| finds_row(&c.row)).collect();
        if finders.len() != statements.iter().filter(|s| s.finds_row).count() {
            return Err(RelayError::Refused(format!(
                "{} transaction {seq}: the changes that must find their rows do not match their \
                 statements",
                self.topic
            )));
        }
        Ok(Part {
            seq,
            position,
            next_offset,
            starts,
            end,
            followed,
            statements,
            finders,
            tables,
            keys,
            changes: count,
            dead_letters: 0,
            commit_ts,
            _held: held,
        })
    }

    /// A part that records one message of a transaction being dead-lettered in
    /// `relay_dead_letters`, in the local transaction, instead of applying it. Reading it again
    /// (a replay after a crash) records it once.
    async fn dead_letter_part(
        &self,
        letter: Letter<'_>,
        followed: Followed,
        last: bool,
        next_offset: i64,
    ) -> Result<Part<'a>, RelayError> {
        let change = letter.change;
        let mut sql = format!(
            "INSERT INTO `{DEAD_LETTERS_TABLE}` (topic, kafka_offset, source_dc, source_gtid, \
             source_seq, message, reason) VALUES ("
        );
        push_sql_string(&mut sql, self.topic);
        sql.push_str(&format!(", {}, ", letter.offset));
        push_sql_string(&mut sql, &change.dc);
        sql.push_str(", ");
        push_sql_string(&mut sql, change.position.gtid.as_deref().unwrap_or(""));
        sql.push_str(&format!(", {}, ", change.txn.seq));
        sql::push_literal(&mut sql, Some(&Value::Bytes(letter.payload.to_vec())));
        sql.push_str(", ");
        push_sql_string(&mut sql, letter.reason);
        sql.push_str(") ON DUPLICATE KEY UPDATE kafka_offset = kafka_offset");
        if sql.len() > self.limits.packet_bytes {
            return Err(RelayError::Refused(format!(
                "{} offset {}: recording it in {DEAD_LETTERS_TABLE} takes a statement of {} \
                 bytes, more than the server's max_allowed_packet; raise max_allowed_packet \
                 here above {}",
                self.topic,
                letter.offset,
                sql.len(),
                sql.len() + PACKET_OVERHEAD
            )));
        }
        let held = self.hold(sql.len()).await?;
        Ok(Part {
            seq: change.txn.seq,
            position: change.position.clone(),
            next_offset,
            starts: change.txn.index == 0,
            end: last.then(|| End::of(change, next_offset)),
            followed,
            statements: vec![sql::Statement {
                sql,
                finds_row: false,
            }],
            finders: Vec::new(),
            tables: Vec::new(),
            keys: Vec::new(),
            changes: 0,
            dead_letters: 1,
            commit_ts: change.commit_ts,
            _held: held,
        })
    }

    /// Waits until the parts waiting leave room for `bytes` more, and takes them.
    async fn hold(&self, bytes: usize) -> Result<Held<'a>, RelayError> {
        let share = u32::try_from(bytes.clamp(1, self.limits.held_bytes)).unwrap_or(u32::MAX);
        let permit = self
            .held
            .clone()
            .acquire_many_owned(share)
            .await
            .map_err(|_| RelayError::Refused("the applier's memory budget was closed".into()))?;
        Ok(Held::new(permit, share, &self.stats.held_bytes))
    }
}

/// A message to record in `relay_dead_letters`, and why.
struct Letter<'m> {
    change: &'m Change,
    offset: i64,
    payload: &'m [u8],
    reason: &'m str,
}

/// Whether the statement of `change` must find its row (see [`sql::statement`]): an UPDATE that
/// changes something, or a DELETE.
fn finds_row(change: &RowChange) -> bool {
    match change.kind {
        ChangeKind::Insert => false,
        ChangeKind::Update => !change.values.is_empty(),
        ChangeKind::Delete => true,
    }
}

/// Hands on a message that cannot be applied, then reads nothing more until shutdown: the
/// applier stops there, visibly, and capture and the other appliers go on.
async fn halt(
    ready: &mpsc::Sender<Item<'_>>,
    why: String,
    txn: Option<DeadLettering>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    if ready.send(Item::Bad { why, txn }).await.is_ok() {
        // Ends when shutdown is set or its sender dropped.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    Ok(())
}

/// The local transaction an applier has open (started, with its marker, by its first part).
#[derive(Default)]
struct Open {
    begun: bool,
    /// The source transactions applied in it, and their changes.
    transactions: usize,
    changes: u64,
    /// The end of the latest of them, and how far the source's stream is after it.
    end: Option<(End, Followed)>,
    /// The rows of `relay_loop_keys` written in it (`cache` loop filter).
    chunks: usize,
    /// Conflicts resolved by applying the change, counted once committed.
    resolved: u64,
    /// Messages recorded in `relay_dead_letters`, counted once committed.
    dead_letters: u64,
    /// What it held at the savepoint before the latest source transaction.
    at_savepoint: Counts,
    /// Statements applied but not sent yet: what needs no answer goes with the next round trip
    /// that does, or with the commit (an applier that is behind sends up to
    /// `relay.apply_batch` source transactions in one round trip, as a statement budget allows).
    unsent: Vec<String>,
    unsent_bytes: usize,
}

impl Open {
    /// The statements not sent yet, followed by `then`.
    fn send_with(&mut self, then: impl IntoIterator<Item = String>) -> Vec<String> {
        self.unsent_bytes = 0;
        let mut statements = std::mem::take(&mut self.unsent);
        statements.extend(then);
        statements
    }
}

/// What an open local transaction holds that a rollback to a savepoint takes back.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    changes: u64,
    chunks: usize,
    resolved: u64,
    dead_letters: u64,
}

impl Open {
    fn counts(&self) -> Counts {
        Counts {
            changes: self.changes,
            chunks: self.chunks,
            resolved: self.resolved,
            dead_letters: self.dead_letters,
        }
    }

    /// Back to what it held at a savepoint.
    fn restore(&mut self, counts: Counts) {
        self.changes = counts.changes;
        self.chunks = counts.chunks;
        self.resolved = counts.resolved;
        self.dead_letters = counts.dead_letters;
    }
}

/// How applying a part went.
enum Outcome {
    /// Applied, conflicts resolved by `relay.on_conflict = "apply"` included.
    All,
    /// Stopped at a conflict (`relay.on_conflict = "stop"`), for this reason; the caller rolls
    /// the local transaction back.
    WaitingAt(String),
}

/// Applies the parts handed on, in order, each once its tables match here. A source
/// transaction's parts go into one local transaction; when more are waiting, up to
/// `relay.apply_batch` whole source transactions share it, and one commit serves them all.
async fn apply_all(
    context: &RelayContext,
    conn: &mut Conn,
    source_dc: &str,
    stats: &ApplyStats,
    limits: &Limits,
    mut ready: mpsc::Receiver<Item<'_>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let mut schemas = SchemaCache::default();
    let mut open: Option<Open> = None;
    let applier = Applier {
        context,
        source_dc,
        limits,
    };
    // Stopped at a bad message: what is still handed on is dropped, unapplied, until shutdown.
    let mut halted = false;
    // Where messages that are no change of this source's are recorded, apart from the open
    // local transaction: they belong to no source transaction, and one that is undone must not
    // take them with it.
    let mut strays: Option<Conn> = None;
    while let Some(item) = ready.recv().await {
        let part = match item {
            _ if halted => continue,
            Item::Part(part) => part,
            Item::Bad {
                why,
                txn: Some(txn),
            } if applier.dead_letters() => {
                return applier
                    .dead_letter_again(conn, &mut open, stats, txn, &why)
                    .await;
            }
            Item::Bad { why, .. } => {
                halted = true;
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.stopped, &why)
                    .await?;
                continue;
            }
            Item::Stray {
                offset,
                payload,
                why,
            } => {
                applier
                    .record_stray(&mut strays, offset, &payload, &why, stats)
                    .await?;
                continue;
            }
            Item::CutOff => {
                if let Some(open) = open.as_mut() {
                    applier.undo_to_savepoint(conn, open).await?;
                }
                continue;
            }
            Item::Unordered { why, commit_ts } => {
                // Everything before it is applied; nothing after it is until the source's
                // stream starts anew. The transaction waiting ages in the lag.
                if let Some(done) = open.take() {
                    applier.finish(conn, done, stats).await?;
                }
                stats.lag.behind_since(commit_ts);
                stop_visibly(conn, &stats.stopped, source_dc, &why).await?;
                continue;
            }
        };
        stats.lag.behind_since(part.commit_ts);
        let placed = match applier
            .wait_for_schemas(conn, &mut schemas, &mut open, &part, stats, shutdown)
            .await
        {
            Ok(false) => return Ok(()),
            Ok(true) => applier.place(conn, &mut open, &part, &ready, stats).await,
            Err(e) => Err(e),
        };
        match placed {
            Ok(Outcome::All) => {}
            Ok(Outcome::WaitingAt(why)) => {
                // The local transaction goes whole, with the parts before the conflict that
                // are no longer in hand: applying starts again from the stored offset, and
                // meets the conflict again until the row here is repaired.
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.conflict_stopped, &why)
                    .await?;
                return Err(RelayError::Interrupted(why));
            }
            Err(e) if e.is_transient() => return Err(e),
            // A definite failure (a table not relayed here, a value the local column cannot
            // hold): the same transaction would fail again. Sent with the statements of
            // earlier parts, it may be one of theirs: they are applied again, each sent on its
            // own, to tell.
            Err(e) if !stats.sends_each_part(part.next_offset) => {
                open.take();
                rollback(conn, source_dc).await?;
                stats.send_each_part_until(part.next_offset);
                return Err(RelayError::Interrupted(format!(
                    "{e}; applying again part by part to find the transaction that failed"
                )));
            }
            Err(e) if applier.dead_letters() && part.dead_letters == 0 => {
                let why = e.to_string();
                let txn = part.lettering(why.clone());
                return applier
                    .dead_letter_again(conn, &mut open, stats, txn, &why)
                    .await;
            }
            Err(e) => {
                halted = true;
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.stopped, &e.to_string())
                    .await?;
            }
        }
    }
    Ok(())
}

/// The applying half of an applier.
struct Applier<'a> {
    context: &'a RelayContext,
    source_dc: &'a str,
    limits: &'a Limits,
}

impl Applier<'_> {
    /// Waits until the tables of `part` are the same here as at the source; `false` when
    /// shutdown came first. Waiting with a transaction open would hold its locks: what it holds
    /// of whole source transactions is committed first; part of one is undone, and read again
    /// from the stored offset (its first part).
    async fn wait_for_schemas(
        &self,
        conn: &mut Conn,
        schemas: &mut SchemaCache,
        open: &mut Option<Open>,
        part: &Part<'_>,
        stats: &ApplyStats,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, RelayError> {
        let source_dc = self.source_dc;
        loop {
            match check_schemas(conn, schemas, self.context, part, source_dc).await {
                Ok(()) => {
                    stats.schema_mismatch.store(false, Ordering::Relaxed);
                    return Ok(true);
                }
                Err(RelayError::SchemaMismatch(message)) => {
                    stats.schema_mismatch.store(true, Ordering::Relaxed);
                    tracing::error!(source = source_dc, "{message}");
                    if let Some(before) = open.take() {
                        if part.starts {
                            self.finish(conn, before, stats).await?;
                        } else {
                            rollback(conn, source_dc).await?;
                            record_error(conn, source_dc, &message).await?;
                            return Err(RelayError::Interrupted(message));
                        }
                    }
                    record_error(conn, source_dc, &message).await?;
                    tokio::select! {
                        _ = shutdown.changed() => return Ok(false),
                        _ = tokio::time::sleep(MISMATCH_RETRY) => {}
                    }
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Applies a part in the open local transaction, and commits it once its source
    /// transaction is whole and nothing more is waiting (or the batch is full).
    async fn place(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        part: &Part<'_>,
        ready: &mpsc::Receiver<Item<'_>>,
        stats: &ApplyStats,
    ) -> Result<Outcome, RelayError> {
        let current = open.get_or_insert_with(Open::default);
        if let Outcome::WaitingAt(why) = self.apply_part(conn, current, part, stats).await? {
            return Ok(Outcome::WaitingAt(why));
        }
        let batch_full = current.transactions >= self.context.relay.apply_batch;
        if part.end.is_some()
            && (batch_full || ready.is_empty())
            && let Some(done) = open.take()
        {
            self.finish(conn, done, stats).await?;
            if ready.is_empty() {
                stats.lag.caught_up();
            }
        }
        Ok(Outcome::All)
    }

    /// `relay.on_bad_message = "dead_letter"`.
    fn dead_letters(&self) -> bool {
        self.context.relay.on_bad_message == OnBadMessage::DeadLetter
    }

    /// A source transaction failed for good, perhaps after some of it was applied: rolls the
    /// local transaction back and ends the applier, which starts again from the stored offset
    /// and, reading `txn` again, records its messages in `relay_dead_letters` instead of
    /// applying them (their bytes were not kept).
    async fn dead_letter_again(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        stats: &ApplyStats,
        txn: DeadLettering,
        why: &str,
    ) -> Result<(), RelayError> {
        open.take();
        rollback(conn, self.source_dc).await?;
        let gtid = txn.gtid.as_deref().unwrap_or("none");
        let restart = format!(
            "transaction {} ({gtid}) from {} cannot be applied; it goes to \
             {DEAD_LETTERS_TABLE}: {why}",
            txn.seq, self.source_dc
        );
        stats.dead_letter_next(txn);
        Err(RelayError::Interrupted(restart))
    }

    /// Records a message that is no change of this source's in `relay_dead_letters`, on a
    /// connection of its own (opened when first needed), at once. Reading it again (before the
    /// stored offset passes it) records it once.
    async fn record_stray(
        &self,
        strays: &mut Option<Conn>,
        offset: i64,
        payload: &[u8],
        why: &str,
        stats: &ApplyStats,
    ) -> Result<(), RelayError> {
        let conn = match strays {
            Some(conn) => conn,
            None => strays.insert(mysql::connect(self.context.url()).await?),
        };
        let topic = self.context.relay.topic(self.source_dc);
        tracing::warn!(
            source = self.source_dc,
            topic,
            offset,
            "a message that is no change of {}'s goes to {DEAD_LETTERS_TABLE}: {why}",
            self.source_dc
        );
        conn.exec_drop(
            format!(
                "INSERT INTO `{DEAD_LETTERS_TABLE}` (topic, kafka_offset, source_dc, message, \
                 reason) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE kafka_offset = kafka_offset"
            ),
            (&topic, offset, self.source_dc, payload, why),
        )
        .await
        .map_err(DbError::mysql(format!(
            "recording {topic} offset {offset} in {DEAD_LETTERS_TABLE}"
        )))?;
        // 0 rows: recorded before (read again after a restart).
        if conn.affected_rows() == 1 {
            stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Stops applying from the source, visibly (`stopped` is the flag its metric and readiness
    /// show): after a bad message or a definite failure, or at a conflict
    /// (`relay.on_conflict = "stop"`). The open local transaction is rolled back whole.
    async fn roll_back_and_stop(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        stopped: &AtomicBool,
        why: &str,
    ) -> Result<(), RelayError> {
        // Also when a failed commit took it already.
        open.take();
        rollback(conn, self.source_dc).await?;
        stop_visibly(conn, stopped, self.source_dc, why).await
    }

    /// Applies a part in the open local transaction, starting it (with the loop marker first)
    /// if it is not yet. When an UPDATE or DELETE of the part does not find its row as it was
    /// at the source, the part is undone to its savepoint and applied again change by change,
    /// each conflict handled as `relay.on_conflict` says (see [`Conflicts`]).
    async fn apply_part(
        &self,
        conn: &mut Conn,
        open: &mut Open,
        part: &Part<'_>,
        stats: &ApplyStats,
    ) -> Result<Outcome, RelayError> {
        let mut first = Vec::new();
        if !open.begun {
            // The marker first: it changes the row (the transaction is not applied yet), so it
            // is logged, before any change capture could send back.
            first.push("START TRANSACTION".to_string());
            first.push(gtids_update(self.source_dc, &part.followed));
            open.begun = true;
        }
        if part.starts {
            first.push(SOURCE_SAVEPOINT.to_string());
            open.at_savepoint = open.counts();
        }
        let checks = !part.finders.is_empty();
        if checks {
            first.push(PART_SAVEPOINT.to_string());
        }
        let before = open.counts();
        // The keys before the changes they cover: capture reading the binlog meets them first.
        let keys = self.loop_keys_updates(open.chunks, part.next_offset, &part.keys);
        open.chunks += keys.len();
        first.extend(keys);
        let what = || {
            format!(
                "applying a part of transaction {} from {} ({} changes, {}:{})",
                part.seq, self.source_dc, part.changes, part.position.file, part.position.pos
            )
        };
        if !checks && !stats.sends_each_part(part.next_offset) {
            // Nothing to answer: it goes with the next round trip.
            let statements = first
                .into_iter()
                .chain(part.statements.iter().map(|s| s.sql.clone()));
            for sql in statements {
                open.unsent_bytes += sql.len();
                open.unsent.push(sql);
            }
            if open.unsent_bytes >= self.limits.statement_bytes {
                let statements = open.send_with([]);
                self.send(conn, statements.iter(), what).await?;
            }
            return Ok(self.applied(open, part));
        }
        let unsent = open.send_with(first);
        let statements = unsent.iter().map(|sql| (sql.as_str(), false)).chain(
            part.statements
                .iter()
                .map(|s| (s.sql.as_str(), s.finds_row)),
        );
        let all_found = run_batches(conn, statements, self.limits.statement_bytes)
            .await
            .map_err(DbError::mysql(what()))?;
        if !all_found {
            conn.query_drop(UNDO_PART)
                .await
                .map_err(DbError::mysql(what()))?;
            open.restore(before);
            if let Some(why) = self.apply_one_by_one(conn, open, part, stats).await? {
                return Ok(Outcome::WaitingAt(why));
            }
        }
        Ok(self.applied(open, part))
    }

    /// Counts `part` as applied in `open`.
    fn applied(&self, open: &mut Open, part: &Part<'_>) -> Outcome {
        open.changes += part.changes;
        open.dead_letters += part.dead_letters;
        if let Some(end) = &part.end {
            // A transaction dead-lettered is not counted as applied.
            if part.dead_letters == 0 {
                open.transactions += 1;
            }
            open.end = Some((end.clone(), part.followed.clone()));
        }
        Outcome::All
    }

    /// Applies a part's changes one at a time, each conflict recorded and resolved; its keys
    /// follow its changes, since only now is it known which changes wrote their rows. Returns
    /// why applying waits at a conflict (`relay.on_conflict = "stop"`).
    async fn apply_one_by_one(
        &self,
        conn: &mut Conn,
        open: &mut Open,
        part: &Part<'_>,
        stats: &ApplyStats,
    ) -> Result<Option<String>, RelayError> {
        let what = || format!("applying transaction {} from {}", part.seq, self.source_dc);
        let mut waiting_at = stats.waiting_at();
        let mut conflicts = Conflicts {
            context: self.context,
            source_dc: self.source_dc,
            stats,
            waiting_at: &mut waiting_at,
            loop_keys: part.keys.clone(),
            resolved: 0,
        };
        let mut finders = part.finders.iter();
        let mut waits = None;
        for statement in &part.statements {
            if !statement.finds_row {
                conn.query_drop(&statement.sql)
                    .await
                    .map_err(DbError::mysql(what()))?;
                continue;
            }
            let Some(change) = finders.next() else {
                return Err(RelayError::Refused(format!(
                    "{}: fewer changes than statements that find rows",
                    what()
                )));
            };
            waits = conflicts.apply_one(conn, change).await?;
            if waits.is_some() {
                break;
            }
        }
        let (keys, resolved) = (std::mem::take(&mut conflicts.loop_keys), conflicts.resolved);
        stats.wait_at(waiting_at);
        if waits.is_some() {
            return Ok(waits);
        }
        let keys = self.loop_keys_updates(open.chunks, part.next_offset, &keys);
        open.chunks += keys.len();
        self.send(conn, keys.iter(), what).await?;
        open.resolved += resolved;
        Ok(None)
    }

    /// Undoes the parts of a source transaction that stopped short.
    async fn undo_to_savepoint(&self, conn: &mut Conn, open: &mut Open) -> Result<(), RelayError> {
        let statements = open.send_with([UNDO_SOURCE.to_string()]);
        self.send(conn, statements.iter(), || {
            "undoing a transaction that stopped short".to_string()
        })
        .await?;
        open.restore(open.at_savepoint);
        Ok(())
    }

    /// Records the source transactions applied and commits them.
    async fn finish(
        &self,
        conn: &mut Conn,
        mut open: Open,
        stats: &ApplyStats,
    ) -> Result<(), RelayError> {
        let Some((end, followed)) = open.end.clone() else {
            // Only parts that were undone: nothing to record.
            return rollback(conn, self.source_dc).await;
        };
        let statements = open.send_with([
            applied_update(self.source_dc, &end, open.transactions, open.changes),
            gtids_update(self.source_dc, &followed),
            "COMMIT".to_string(),
        ]);
        let what = || {
            format!(
                "committing transactions up to {} from {} ({}:{})",
                end.seq, self.source_dc, end.position.file, end.position.pos
            )
        };
        self.send(conn, statements.iter(), what).await?;
        stats.stopped.store(false, Ordering::Relaxed);
        stats.conflict_stopped.store(false, Ordering::Relaxed);
        stats.wait_at(None);
        // Counted once committed: a rolled back resolution is found again on the replay.
        stats.conflicts.fetch_add(open.resolved, Ordering::Relaxed);
        stats
            .dead_letters
            .fetch_add(open.dead_letters, Ordering::Relaxed);
        stats
            .applied_transactions
            .fetch_add(open.transactions as u64, Ordering::Relaxed);
        stats
            .applied_changes
            .fetch_add(open.changes, Ordering::Relaxed);
        stats.next_offset.store(end.next_offset, Ordering::Relaxed);
        Ok(())
    }

    /// Records the keys of a part's changes for the `cache` loop filter, in rows of
    /// `relay_loop_keys` numbered on from `chunk`: capture finds them in the binlog with the
    /// changes (see [`super::loop_filter`]). `next_offset` makes every write change its row.
    fn loop_keys_updates(&self, chunk: usize, next_offset: i64, keys: &[CacheKey]) -> Vec<String> {
        keys.chunks(self.limits.keys_per_chunk)
            .zip(chunk..)
            .map(|(keys, chunk)| {
                let mut sql = format!(
                    "INSERT INTO `{LOOP_KEYS_TABLE}` (source_dc, chunk, next_offset, cache_keys) \
                     VALUES ("
                );
                push_sql_string(&mut sql, self.source_dc);
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

    /// Sends statements in round trips of at most the statement limit. The server stops at the
    /// first failing statement, so a failure never reaches COMMIT; the transaction is rolled
    /// back with the connection (dropped with a transient error) or by the caller (after a
    /// definite one).
    async fn send<'s>(
        &self,
        conn: &mut Conn,
        statements: impl Iterator<Item = &'s String>,
        what: impl Fn() -> String,
    ) -> Result<(), RelayError> {
        let statements = statements.map(|sql| (sql.as_str(), false));
        run_batches(conn, statements, self.limits.statement_bytes)
            .await
            .map_err(DbError::mysql(what()))?;
        Ok(())
    }
}

/// Sends `statements` in batches of at most `budget` bytes (a single statement may be longer);
/// whether each that must find its row changed exactly one.
async fn run_batches<'a>(
    conn: &mut Conn,
    statements: impl Iterator<Item = (&'a str, bool)>,
    budget: usize,
) -> Result<bool, mysql_async::Error> {
    let mut all_found = true;
    let mut batch = String::new();
    let mut finds = Vec::new();
    for (sql, finds_row) in statements {
        if !batch.is_empty() && batch.len() + sql.len() > budget {
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

/// Records the transactions in `relay_applied`: where a restart resumes.
fn applied_update(source_dc: &str, end: &End, transactions: usize, changes: u64) -> String {
    let mut sql = format!(
        "UPDATE `{APPLIED_TABLE}` SET next_offset = {}, source_pos = {}, \
         source_seq = {}, source_commit_ts = {}, \
         applied_transactions = applied_transactions + {transactions}, \
         applied_changes = applied_changes + {changes}, last_error = NULL, source_file = ",
        end.next_offset, end.position.pos, end.seq, end.commit_ts
    );
    push_sql_string(&mut sql, &end.position.file);
    sql.push_str(", source_gtid = ");
    push_sql_string(&mut sql, end.position.gtid.as_deref().unwrap_or_default());
    sql.push_str(" WHERE source_dc = ");
    push_sql_string(&mut sql, source_dc);
    sql
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
/// metric and readiness that show `stopped`.
async fn stop_visibly(
    conn: &mut Conn,
    stopped: &AtomicBool,
    source_dc: &str,
    why: &str,
) -> Result<(), RelayError> {
    stopped.store(true, Ordering::Relaxed);
    tracing::error!(
        source = source_dc,
        "applying from {source_dc} stopped: {why}"
    );
    record_error(conn, source_dc, why).await
}

/// Ends the local transaction a failed or cut-short apply left open.
async fn rollback(conn: &mut Conn, source_dc: &str) -> Result<(), RelayError> {
    conn.query_drop("ROLLBACK")
        .await
        .map_err(DbError::mysql(format!(
            "rolling back a transaction from {source_dc} not applied whole"
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

/// Refuses a part touching a table that is not relayed here (for good) or that differs (until
/// they agree): with the message's contract, in its primary key or any column's exact type;
/// without one (a capture from before the contract), in its columns' names and kinds.
async fn check_schemas(
    conn: &mut Conn,
    cache: &mut SchemaCache,
    context: &RelayContext,
    part: &Part<'_>,
    source_dc: &str,
) -> Result<(), RelayError> {
    for table in &part.tables {
        let name = (table.schema.clone(), table.table.clone());
        if let Some((at, checked)) = cache.checked.get(&name)
            && at.elapsed() < SCHEMA_RECHECK
            && *checked == table.definition
        {
            continue;
        }
        if !context.is_relayed(&table.schema, &table.table) {
            return Err(RelayError::Refused(format!(
                "{source_dc} sends changes of {}.{} (transaction {}, {}:{}), which relay.tables \
                 does not list here",
                table.schema, table.table, part.seq, part.position.file, part.position.pos
            )));
        }
        let local = local_columns(conn, &table.schema, &table.table).await?;
        let differences = match &table.definition.contract {
            Some(source) => {
                let key = local_key(conn, &table.schema, &table.table).await?;
                contract::differences(source, &contract::local_contract(&local, key), source_dc)
            }
            None => sql::column_differences(&table.definition.kinds, &local, source_dc),
        };
        if !differences.is_empty() {
            return Err(RelayError::SchemaMismatch(format!(
                "table {}.{} differs between {source_dc} and here: {}; applying from \
                 {source_dc} waits until the table is the same in both (DDL is not relayed)",
                table.schema,
                table.table,
                differences.join("; ")
            )));
        }
        cache
            .checked
            .insert(name, (Instant::now(), table.definition.clone()));
    }
    Ok(())
}

pub(super) async fn local_columns(
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
pub(super) async fn local_key(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, DbError> {
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
    use crate::relay::change::TxnRef;

    fn message(seq: u64, index: u32, gtid: &str) -> Change {
        let position = Position {
            file: "bin.000001".into(),
            pos: 100 + u64::from(index),
            gtid: Some(gtid.into()),
        };
        let txn = TxnRef {
            seq,
            index,
            last: false,
        };
        Change::test_delete(position, txn, Default::default())
    }

    fn reading(seq: u64, next_index: u32, gtid: &str) -> Reading {
        Reading {
            seq,
            gtid: Some(gtid.into()),
            next_index,
            apply: None,
            handed_on: true,
            gathered: Vec::new(),
            gathered_bytes: 0,
            lettered: None,
        }
    }

    #[test]
    fn a_transaction_to_dead_letter_is_known_by_epoch_sequence_and_gtid() {
        let r = reading(4, 0, "0-1-9");
        let letter = r.lettering(2, "refused".into());
        assert!(r.is(&letter, 2));
        // Another epoch (the stream started anew) or GTID is another transaction.
        assert!(!r.is(&letter, 3));
        assert!(!reading(4, 0, "0-2-9").is(&letter, 2));
        assert!(!reading(5, 0, "0-1-9").is(&letter, 2));
    }

    #[test]
    fn a_transaction_goes_on_with_its_next_message_only() {
        let r = reading(4, 2, "0-1-9");
        // Positions differ between messages: capture publishes as it reads.
        assert!(r.continued_by(&message(4, 2, "0-1-9")));
        // Published again from its start, a gap, another transaction, another GTID.
        for other in [
            message(4, 0, "0-1-9"),
            message(4, 3, "0-1-9"),
            message(5, 2, "0-1-9"),
            message(4, 2, "0-2-9"),
        ] {
            assert!(!r.continued_by(&other), "{:?}", other.txn);
        }
    }

    #[test]
    fn limits_divide_the_memory_setting() {
        let settings = crate::config::Settings::defaults().unwrap();
        let memory = settings.relay.apply_memory_bytes;
        let limits = Limits::of(memory, 16 << 20);
        assert_eq!(limits.part_bytes, memory / 64);
        assert_eq!(limits.held_bytes, memory / 2);
        assert_eq!(limits.statement_bytes, STATEMENT_BUDGET);
        // A row of recorded keys, in hex, takes at most half a statement.
        assert_eq!(limits.keys_per_chunk, STATEMENT_BUDGET / 128);
        // A small max_allowed_packet caps statements.
        let small = Limits::of(memory, 64 << 10);
        assert_eq!(small.statement_bytes, (64 << 10) - PACKET_OVERHEAD);
        assert_eq!(small.packet_bytes, (64 << 10) - PACKET_OVERHEAD);
        assert_eq!(small.keys_per_chunk, small.statement_bytes / 128);
    }
}
