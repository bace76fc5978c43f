//! Capture: reads the local server's binlog as a replica, turns the relayed tables' committed
//! changes into change messages and publishes them, in binlog order, to this data centre's
//! topic (one partition, idempotent producer, `acks=all`). A transaction's changes are published
//! as they are read, so capture holds one rows event of it, not the whole. The position is
//! checkpointed only once Kafka acknowledged everything up to it, a whole transaction (see
//! [`super::checkpoint`]); where capture resumes is the later of that and the last message of
//! the topic the appliers follow, read once its resume message is acknowledged (see
//! [`super::resume`]), which republishes a transaction cut off in the topic from its start.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mysql_async::BinlogStreamRequest;
use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use tokio::sync::{mpsc, watch};

use crate::kafka::CreateRedacted;
use crate::mysql::bound::Bound;
use crate::mysql::lock::try_lock;
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};
use crate::relay::settings::LoopFilterMode;

use super::change::{
    Change, Position, RowChange, Stream, TxnRef, binlog_file_number, value_to_json,
};
use super::checkpoint::{self, Checkpoint};
use super::context::{RelayContext, RelayError};
use super::delivery::Acks;
use super::events::{EventHandler, Rows, Step, Transaction};
use super::gtid::{Gtid, GtidState};
use super::loop_filter::RecordedKeys;
use super::resume::{self, Start};
use super::signing::{Covered, SIGNATURE_HEADER, Signer};
use super::snapshot::{self, Watermarks};
use super::stats::{CaptureStats, RelayStats, Running};
use super::table::Charsets;

/// The server sends a heartbeat when it has nothing else to send for this long...
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How often a position reached with nothing to publish (a heartbeat's) becomes a checkpoint.
/// Its GTID state is read with `BINLOG_GTID_POS`, which reads the binlog file from its start
/// (1.1 s for an 800 MB file here) while the checkpoint task, and capture behind it, waits: at
/// every heartbeat after groups the server left out (the applier's, flagged, with the
/// skip_replication filter), the source read its binlog file again. Transactions'
/// checkpoints carry their GTIDs and are saved at every `relay.checkpoint_interval` as before.
const IDLE_CHECKPOINT_EVERY: Duration = Duration::from_secs(30);
/// ...so a connection silent for this long is dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(10);
/// Transactions published but not yet acknowledged; capture waits when this many are.
const IN_FLIGHT: usize = 4096;
/// How long a producer may retry a message before it counts as failed.
const DELIVERY_TIMEOUT: &str = "120000";
/// Bytes of a produce request around its messages' own bytes.
const REQUEST_OVERHEAD: usize = 4096;
/// librdkafka's default `batch.size`, kept unless a request must be smaller.
const BATCH_BYTES: usize = 1_000_000;
/// The producer's queue holds this many of the largest messages.
const QUEUED_MESSAGES: usize = 16;

/// The server settings capture needs, read from `SHOW GLOBAL VARIABLES`.
const SOURCE_VARIABLES: &[&str] = &[
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "binlog_checksum",
    "log_bin_compress",
    "server_id",
];

/// Checks that the server's binlog can be relayed: every problem in one message, each with why.
/// Returns whether events carry CRC32 checksums.
pub fn check_source(
    vars: &HashMap<String, String>,
    reader_server_id: u32,
) -> Result<bool, RelayError> {
    let get = |name: &str| vars.get(name).map(|v| v.to_ascii_uppercase());
    let mut problems = Vec::new();
    let mut want = |name: &str, value: &str, why: &str| {
        let actual = get(name);
        if actual.as_deref() != Some(value) {
            problems.push(format!(
                "{name} is {}, needs {value} ({why})",
                actual.as_deref().unwrap_or("missing")
            ));
        }
    };
    want("log_bin", "ON", "capture reads the binary log");
    want(
        "binlog_format",
        "ROW",
        "capture decodes row images, not statements",
    );
    want("binlog_row_image", "FULL", "changes carry whole rows");
    want(
        "binlog_row_metadata",
        "FULL",
        "without it BIGINT UNSIGNED decodes signed and column names and keys are missing",
    );
    if get("log_bin_compress").is_some_and(|v| v != "OFF") {
        problems
            .push("log_bin_compress is ON, needs OFF (compressed events are not decoded)".into());
    }
    if get("server_id").as_deref() == Some(reader_server_id.to_string().as_str()) {
        problems.push(format!(
            "relay.server_id {reader_server_id} is the server's own server_id; give the relay its own"
        ));
    }
    if problems.is_empty() {
        Ok(get("binlog_checksum").is_some_and(|v| v != "NONE"))
    } else {
        Err(RelayError::Refused(format!(
            "the server's binlog cannot be relayed: {}; set these in the server's configuration \
             (or with SET GLOBAL) and restart the relay",
            problems.join("; ")
        )))
    }
}

/// A published transaction waiting for Kafka, and the checkpoint it allows once acknowledged.
struct Pending {
    /// Messages published in this step...
    messages: u64,
    /// ...the last of them being this one (see [`Acks`]).
    through: u64,
    checkpoint: Checkpoint,
    /// The last messages of a transaction (the checkpoint moves only then).
    ends_transaction: bool,
    /// When its event was read from the binlog.
    read_at: Instant,
}

/// Runs capture until `shutdown` is set; returns on the first error. A server that stops
/// answering (a statement, or the stream's heartbeats) is reported once, and once more when it
/// answers again.
pub async fn run_once(
    context: &RelayContext,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let result = capture(context, shutdown).await;
    if let Err(e) = &result
        && e.is_hang()
        && context.stats.capture.source_hung.hung()
    {
        tracing::error!(
            dc = context.dc(),
            database = %context.url().redacted(),
            "the database stopped answering capture: {e}; it starts again until the database \
             answers"
        );
    }
    result
}

/// How long capture waits on its server for one statement: those of its start, and each
/// checkpoint it saves (a server hung only for those writes leaves the stream going).
const STATEMENT_LIMIT: Duration = SILENCE_LIMIT;

async fn capture(
    context: &RelayContext,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let dc = context.dc().to_string();
    let relay = &context.relay;
    if relay.server_id == 0 {
        return Err(RelayError::Refused(
            "relay.server_id is not set: give the relay a replica server_id that no server and no \
             other binlog reader of this server uses"
                .into(),
        ));
    }
    let mut state = mysql::connect(context.url()).await?;
    let bound = Bound::new(context.url(), STATEMENT_LIMIT);
    bound
        .wait(
            || "setting up the session".into(),
            checkpoint::unlogged(&mut state),
        )
        .await?;
    // One capture per data centre and database; the lock lives as long as this connection,
    // which records the checkpoints. One this capture dropped (its server hung) may hold it
    // until the server is done with it: waited for.
    let lock = resume::capture_lock(context);
    let lock_wait = u32::try_from(STATEMENT_LIMIT.as_secs() / 2).unwrap_or(u32::MAX);
    let locked = bound
        .wait(
            || format!("taking lock {lock}"),
            try_lock(&mut state, &lock, lock_wait),
        )
        .await?;
    if !locked {
        return Err(RelayError::Busy(format!(
            "another relay captures {dc} (it holds lock {lock})"
        )));
    }
    let vars = bound
        .wait(
            || "reading the server's variables".into(),
            source_variables(&mut state),
        )
        .await?;
    let checksums = check_source(&vars, relay.server_id)?;
    let source_server_id: u32 = vars
        .get("server_id")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| RelayError::Refused("the server reports no server_id".into()))?;
    let charsets = bound
        .wait(
            || "reading the server's collations".into(),
            collations(&mut state),
        )
        .await?;
    let topic = context.topic(&dc);
    ensure_topic(context, &topic).await?;
    let producer = producer(context)?;
    let signer = Signer::of(&relay.keys, &dc);
    match &signer {
        Some(_) => tracing::info!(dc, topic, "capture signs every message it publishes"),
        None => tracing::info!(
            dc,
            topic,
            "relay.keys has no current key of {dc}: capture's messages are not signed"
        ),
    }
    let found = bound
        .wait(
            || "reading the checkpoint".into(),
            checkpoint::load(&mut state, &dc),
        )
        .await?;
    // What an earlier capture still had on its way lands before this, or is passed over.
    let run = resume::fence(context, &topic, source_server_id, signer.as_ref()).await?;
    let tail = resume::read_tail(context, &topic, run).await?;
    let start = match resume::decide(&topic, found, &tail)? {
        Start::From { checkpoint, why } => {
            tracing::info!(dc, "capture resumes after {why}");
            checkpoint
        }
        // First start: from now on. Rows already there must be copied by other means.
        Start::Here => {
            bound
                .wait(
                    || "recording the starting checkpoint".into(),
                    checkpoint::start_here(&mut state, &dc, 0, None),
                )
                .await?
        }
    };

    let mut binlog = mysql::connect(context.url()).await?;
    let mut setup = vec![
        // MARIA_SLAVE_CAPABILITY_GTID: MariaDB's own GTID events instead of substitutes.
        "SET @mariadb_slave_capability = 4".to_string(),
        format!("SET @master_heartbeat_period = {}", HEARTBEAT.as_nanos()),
    ];
    if context.loop_filter() == LoopFilterMode::SkipReplication {
        // The dump thread then leaves out the events the appliers flagged.
        setup.push("SET skip_replication = 1".into());
    }
    if !start.gtid_state.is_empty() {
        // Resume after the checkpoint's GTIDs; the server then ignores the file and position.
        setup.push(format!("SET @slave_connect_state = '{}'", start.gtid_state));
    }
    for statement in &setup {
        let what = || format!("preparing the binlog connection: {statement}");
        bound.call(what, binlog.query_drop(statement)).await?;
    }
    let request = BinlogStreamRequest::new(relay.server_id)
        .with_filename(start.file.as_bytes())
        .with_pos(start.pos);
    let what = format!(
        "starting the binlog stream from {}:{}",
        start.file, start.pos
    );
    let asked = binlog.get_binlog_stream(request);
    let mut stream = bound.call(|| what.clone(), asked).await?;
    tracing::info!(
        dc,
        file = start.file,
        pos = start.pos,
        gtid = %start.gtid_state,
        topic,
        run,
        "capture started"
    );
    let stats = &context.stats.capture;
    let _connected = Running::mark(&stats.connected);
    if stats.source_hung.answered() {
        tracing::info!(dc, "the database answers capture again");
    }
    let start_at = start.clone();

    let mut handler = EventHandler::new(
        context.clone(),
        charsets,
        checksums,
        start.file.clone(),
        start.gtid_state.clone(),
    );
    let (pending_tx, pending_rx) = mpsc::channel(IN_FLIGHT);
    let mut acker = tokio::spawn(acknowledge(
        pending_rx,
        producer.context().clone(),
        (state, bound),
        dc.clone(),
        start.clone(),
        relay.checkpoint_interval,
        context.stats.clone(),
    ));
    let mut last = start;
    let mut idle_checkpoint: Option<Instant> = None;
    // Snapshots run with this capture: a restarted one goes on from their recorded progress.
    let watermarks = Arc::new(Watermarks::default());
    let _snapshots = snapshot::spawn(context.clone(), watermarks.clone());
    let mut publisher = Publisher {
        context,
        producer: &producer,
        topic: &topic,
        signer: signer.as_ref(),
        source_server_id,
        run,
        current: None,
    };
    let outcome: Result<(), RelayError> = async {
        loop {
            let next = tokio::select! {
                _ = shutdown.changed() => return Ok(()),
                acked = &mut acker => {
                    return Err(ended_early(acked));
                }
                next = tokio::time::timeout(SILENCE_LIMIT, stream.next()) => next,
            };
            let event = match next {
                Err(_) => {
                    // A hung server: its heartbeats stopped too.
                    return Err(DbError::TimedOut {
                        context: "reading the binlog (the server sends a heartbeat every second)"
                            .into(),
                        after: SILENCE_LIMIT,
                    }
                    .into());
                }
                Ok(None) => {
                    return Err(DbError::Mysql {
                        context: "the server ended the binlog stream".into(),
                        source: mysql_async::DriverError::ConnectionClosed.into(),
                    }
                    .into());
                }
                Ok(Some(event)) => {
                    event.map_err(|e| source_error(e, relay.server_id, &start_at))?
                }
            };
            let pending = match handler.handle(&event)? {
                None => continue,
                Some(Step::Rows(mut rows)) => {
                    stats.read_lag.behind_since(rows.timestamp);
                    watermarks.observe(&mut rows);
                    Pending {
                        messages: publisher.rows(rows, &last).await?,
                        through: publisher.sent(),
                        checkpoint: last.clone(),
                        ends_transaction: false,
                        read_at: Instant::now(),
                    }
                }
                Some(Step::Transaction(txn)) => {
                    stats.read_lag.behind_since(txn.commit_ts);
                    publisher.end(txn, &mut last).await?
                }
                Some(Step::Idle(position)) => {
                    // The server has sent all it wrote.
                    stats.read_lag.caught_up();
                    let done = binlog_file_number(&last.file).map(|n| (n, last.pos));
                    if position.order().is_none() || position.order() <= done {
                        continue;
                    }
                    if idle_checkpoint.is_some_and(|at| at.elapsed() < IDLE_CHECKPOINT_EVERY) {
                        continue;
                    }
                    idle_checkpoint = Some(Instant::now());
                    // Everything up to here was read; the GTIDs of groups the server left
                    // out are looked up when the checkpoint is saved.
                    last = Checkpoint {
                        file: position.file,
                        pos: position.pos,
                        gtid_from_position: true,
                        ..last.clone()
                    };
                    Pending {
                        messages: 0,
                        through: publisher.sent(),
                        checkpoint: last.clone(),
                        ends_transaction: false,
                        read_at: Instant::now(),
                    }
                }
            };
            if pending_tx.send(pending).await.is_err() {
                return Err(ended_early((&mut acker).await));
            }
        }
    }
    .await;
    drop(pending_tx);
    tracing::info!(
        dc,
        published_transactions = stats.published_transactions.load(Ordering::Relaxed),
        ddl_skipped = stats.ddl_skipped.load(Ordering::Relaxed),
        "capture stopping"
    );
    if outcome.is_ok() {
        // Wait for what is in flight and record the last checkpoint.
        match acker.await {
            Ok(acked) => acked?,
            Err(e) => {
                return Err(RelayError::Refused(format!(
                    "the checkpoint task failed: {e}"
                )));
            }
        }
    } else {
        acker.abort();
    }
    // The stream's connection goes away with it; a failed goodbye changes nothing.
    let _ = stream.close().await;
    outcome
}

/// What a finished (it should not have) or failed checkpoint task means for capture.
fn ended_early(acked: Result<Result<(), RelayError>, tokio::task::JoinError>) -> RelayError {
    match acked {
        Ok(Err(e)) => e,
        Ok(Ok(())) => RelayError::Refused("the checkpoint task ended before capture".into()),
        Err(e) => RelayError::Refused(format!("the checkpoint task failed: {e}")),
    }
}

/// The transaction being published: its changes go out as capture reads them, each message
/// held back until the next one, so that the last can say it is the last.
struct Publishing {
    seq: u64,
    gtid: Gtid,
    stream: Stream,
    /// The loop filter drops the whole transaction (marker or skip_replication flag).
    dropped: bool,
    next_index: u32,
    held: Option<RowChange>,
    /// The `cache` filter's keys recorded in the transaction, and the changes it holds.
    keys: RecordedKeys,
    read: u64,
    kept: u64,
}

/// Publishes transactions as their changes are read, in order, to the data centre's topic.
struct Publisher<'a> {
    context: &'a RelayContext,
    producer: &'a ThreadedProducer<Acks>,
    topic: &'a str,
    /// Signs each message, when this data centre has a key.
    signer: Option<&'a Signer>,
    source_server_id: u32,
    /// The offset of this capture's resume message.
    run: u64,
    current: Option<Publishing>,
}

impl Publisher<'_> {
    /// The number of the latest message queued.
    fn sent(&self) -> u64 {
        self.producer.context().sent()
    }

    /// Applies the loop filter to changes of the open transaction and sends what is left,
    /// holding back the latest.
    async fn rows(&mut self, rows: Rows, last: &Checkpoint) -> Result<u64, RelayError> {
        let (context, run) = (self.context, self.run);
        // The applier writes its marker before its changes, so it is known from the first ones.
        let current = self.current.get_or_insert_with(|| Publishing {
            seq: last.next_seq,
            gtid: rows.gtid,
            stream: Stream {
                epoch: last.epoch,
                published: last.published.clone(),
                binlog: rows.gtid_before.clone(),
                run: Some(run),
            },
            dropped: match context.loop_filter() {
                LoopFilterMode::Marker => rows.has_marker,
                LoopFilterMode::SkipReplication => rows.skip_flagged,
                LoopFilterMode::Cache => false,
            },
            next_index: 0,
            held: None,
            keys: RecordedKeys::default(),
            read: 0,
            kept: 0,
        });
        current.read += rows.changes.len() as u64;
        if current.dropped {
            return Ok(0);
        }
        let changes = if context.loop_filter() == LoopFilterMode::Cache {
            current.keys.record(rows.loop_keys);
            // The applier writes its marker first: what follows it is the applier's.
            current.keys.pass(rows.changes, rows.has_marker)
        } else {
            rows.changes
        };
        self.send_held(changes, &rows.at, rows.timestamp).await
    }

    /// Sends the change held back and all of `changes` but the last, which is held back.
    /// Returns how many were sent.
    async fn send_held(
        &mut self,
        changes: Vec<RowChange>,
        at: &Position,
        commit_ts: u32,
    ) -> Result<u64, RelayError> {
        let mut sent = 0;
        for row in changes {
            if let Some(held) = self.current.as_mut().and_then(|c| c.held.replace(row)) {
                self.send_change(held, at, commit_ts, false).await?;
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// Ends the open transaction: sends its last message and returns the checkpoint after it.
    async fn end(
        &mut self,
        txn: Transaction,
        last: &mut Checkpoint,
    ) -> Result<Pending, RelayError> {
        let mut checkpoint = Checkpoint {
            file: txn.end.file.clone(),
            pos: txn.end.pos,
            gtid_state: txn.gtid_state,
            gtid_from_position: false,
            commit_ts: txn.commit_ts,
            ..last.clone()
        };
        // What the cache filter held that no key recorded in the transaction dropped.
        let unrecorded = self
            .current
            .as_mut()
            .map(|c| std::mem::take(&mut c.keys).unrecorded())
            .unwrap_or_default();
        let mut messages = self.send_held(unrecorded, &txn.end, txn.commit_ts).await?;
        if let Some(held) = self.current.as_mut().and_then(|c| c.held.take()) {
            self.send_change(held, &txn.end, txn.commit_ts, true)
                .await?;
            messages += 1;
        }
        if let Some(done) = self.current.take() {
            self.count_dropped(&done);
            if done.kept > 0 {
                checkpoint.published.update(done.gtid);
                checkpoint.next_seq += 1;
                checkpoint.published_transactions += 1;
                checkpoint.published_changes += done.kept;
            }
        }
        *last = checkpoint.clone();
        Ok(Pending {
            messages,
            through: self.sent(),
            checkpoint,
            ends_transaction: true,
            read_at: Instant::now(),
        })
    }

    fn count_dropped(&self, done: &Publishing) {
        if done.kept < done.read {
            let stats = &self.context.stats.capture;
            stats
                .loop_dropped_changes
                .fetch_add(done.read - done.kept, Ordering::Relaxed);
            if done.kept == 0 {
                stats
                    .loop_dropped_transactions
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends one change of the open transaction, refusing one larger than
    /// `relay.max_message_bytes`.
    async fn send_change(
        &mut self,
        row: RowChange,
        at: &Position,
        commit_ts: u32,
        last: bool,
    ) -> Result<(), RelayError> {
        let context = self.context;
        let Some(current) = self.current.as_mut() else {
            return Err(RelayError::Refused(
                "a change outside a transaction: capture lost its place".into(),
            ));
        };
        if current.next_index == 0 {
            goes_forward(&current.stream.published, current.gtid)?;
        }
        let change = Change {
            dc: context.dc().to_string(),
            server_id: self.source_server_id,
            row,
            position: at.clone(),
            commit_ts,
            txn: TxnRef {
                seq: current.seq,
                index: current.next_index,
                last,
            },
            stream: current.stream.clone(),
        };
        let payload = change.to_json();
        let most = context.relay.max_message_bytes;
        if payload.len() > most {
            return Err(too_large(&change, payload.len(), most));
        }
        current.next_index = current.next_index.checked_add(1).ok_or_else(|| {
            RelayError::Refused(format!(
                "transaction {} has more than {} relayed changes",
                current.gtid,
                u32::MAX
            ))
        })?;
        current.kept += 1;
        send(self.producer, self.topic, &payload, self.signer).await
    }
}

/// Why a change cannot be published: skipping it would lose it, so capture stops.
fn too_large(change: &Change, size: usize, most: usize) -> RelayError {
    let row = &change.row;
    let key: serde_json::Map<String, serde_json::Value> = row
        .key
        .iter()
        .map(|(name, value)| (name.clone(), value_to_json(value.as_ref())))
        .collect();
    RelayError::Refused(format!(
        "the {} of {}.{} key {} in transaction {} makes a message of {size} bytes, more than \
         relay.max_message_bytes ({most}): capture stops rather than lose it; raise \
         relay.max_message_bytes above {size} here, the brokers' message.max.bytes (or the \
         topic's max.message.bytes) and the remote appliers' relay.apply_memory_bytes with it, \
         and start the relay again",
        row.kind,
        row.schema,
        row.table,
        serde_json::Value::Object(key),
        change.position.gtid.as_deref().unwrap_or("without GTID"),
    ))
}

/// Refuses to publish `gtid` unless its sequence number is above the last one published in its
/// domain: the appliers would take it for one they applied already.
fn goes_forward(published: &GtidState, gtid: Gtid) -> Result<(), RelayError> {
    match published.get(gtid.domain) {
        Some(before) if gtid.seq <= before.seq => Err(RelayError::Refused(format!(
            "transaction {gtid} comes after {before} was published, in the same replication \
             domain: the domain's sequence numbers went back (RESET MASTER, or several servers \
             writing one domain without gtid_strict_mode); {}",
            resume::reset_advice()
        ))),
        _ => Ok(()),
    }
}

/// Queues one message for partition 0, signed by `signer` if any, waiting while the producer's
/// queue is full.
async fn send(
    producer: &ThreadedProducer<Acks>,
    topic: &str,
    payload: &[u8],
    signer: Option<&Signer>,
) -> Result<(), RelayError> {
    let signature = signer.map(|s| s.sign(&Covered::value(topic, payload)));
    let acks = producer.context();
    // Its number comes back with its delivery report. A usize holds it: a u64 on the 64-bit
    // targets logstamp builds for.
    let number = usize::try_from(acks.next())
        .map_err(|_| RelayError::Refused("capture sent more messages than it can count".into()))?;
    loop {
        let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(topic, number)
            .partition(0)
            .payload(payload);
        if let Some(signature) = &signature {
            record = record.headers(OwnedHeaders::new().insert(Header {
                key: SIGNATURE_HEADER,
                value: Some(signature.as_bytes()),
            }));
        }
        match producer.send(record) {
            Ok(()) => {
                acks.queued();
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                // librdkafka has no way to wait for room; its queue drains in the background.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err((e, _)) => return Err(RelayError::kafka(format!("publishing to {topic}"))(e)),
        }
    }
}

/// Waits for Kafka to acknowledge each transaction in order, and records the position of the
/// latest fully acknowledged one every `interval` (and at the end) on the connection of the
/// pair, each save within its bound.
async fn acknowledge(
    mut pending: mpsc::Receiver<Pending>,
    acks: Arc<Acks>,
    (mut conn, bound): (mysql_async::Conn, Bound),
    dc: String,
    mut acked: Checkpoint,
    interval: Duration,
    stats: Arc<RelayStats>,
) -> Result<(), RelayError> {
    let stats = &stats.capture;
    record_checkpoint(stats, &acked);
    let mut saved = acked.clone();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            next = pending.recv() => {
                let Some(next) = next else { break };
                // A transaction published part by part counts once, at its end.
                let published = next.ends_transaction
                    && next.checkpoint.published_transactions > acked.published_transactions;
                if published {
                    stats.publish_lag.behind_since(next.checkpoint.commit_ts);
                }
                acks.acknowledged(next.through)
                    .await
                    .map_err(RelayError::kafka("a change was not delivered"))?;
                stats.published_changes.fetch_add(next.messages, Ordering::Relaxed);
                if published {
                    stats.published_transactions.fetch_add(1, Ordering::Relaxed);
                    stats.publish_lag.caught_up();
                    stats.publish_time.record(next.read_at.elapsed());
                }
                acked = next.checkpoint;
            }
            _ = ticker.tick() => {
                if acked != saved {
                    save(&mut conn, &bound, &dc, &mut acked, stats).await?;
                    saved = acked.clone();
                }
            }
        }
    }
    if acked != saved {
        save(&mut conn, &bound, &dc, &mut acked, stats).await?;
    }
    let _ = conn.disconnect().await;
    Ok(())
}

/// Shows where capture's recorded position is (where a restart resumes).
fn record_checkpoint(stats: &CaptureStats, c: &Checkpoint) {
    if let Some(file) = binlog_file_number(&c.file) {
        stats.checkpoint_file.store(file, Ordering::Relaxed);
    }
    stats.checkpoint_pos.store(c.pos, Ordering::Relaxed);
}

/// Saves a checkpoint, first reading the GTID state at its position if a heartbeat moved it;
/// each within `bound`, past which capture fails as on a silent stream.
async fn save(
    conn: &mut mysql_async::Conn,
    bound: &Bound,
    dc: &str,
    c: &mut Checkpoint,
    stats: &CaptureStats,
) -> Result<(), RelayError> {
    let at = format!("{}:{}", c.file, c.pos);
    if c.gtid_from_position {
        let read = checkpoint::gtid_at(conn, &c.file, c.pos);
        if let Some(state) = bound
            .wait(|| format!("reading the GTID state of {at}"), read)
            .await?
        {
            c.gtid_state = state;
        }
        c.gtid_from_position = false;
    }
    bound
        .wait(
            || format!("saving the checkpoint {at}"),
            checkpoint::save(conn, dc, c),
        )
        .await?;
    record_checkpoint(stats, c);
    Ok(())
}

/// The producer: idempotent, `acks=all`, so retries neither duplicate nor reorder.
fn producer(context: &RelayContext) -> Result<ThreadedProducer<Acks>, RelayError> {
    let most = context.relay.max_message_bytes;
    // A request carries a message with the record batch's framing around it.
    let request_bytes = most + REQUEST_OVERHEAD;
    let queued_kbytes = most.saturating_mul(QUEUED_MESSAGES) / 1024;
    context
        .kafka_config(&context.kafka.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set(
            "linger.ms",
            context.relay.publish_linger.as_millis().to_string(),
        )
        // Change messages repeat their column names and kinds: they shrink several times, which
        // matters for topics read across data centres.
        .set("compression.type", "lz4")
        .set("message.timeout.ms", DELIVERY_TIMEOUT)
        .set("message.max.bytes", request_bytes.to_string())
        .set("batch.size", request_bytes.min(BATCH_BYTES).to_string())
        // What waits for Kafka is bounded too, not only what capture holds of a transaction.
        .set("queue.buffering.max.kbytes", queued_kbytes.to_string())
        .create_redacted_with_context(Acks::default())
        .map_err(RelayError::kafka("creating the Kafka producer"))
}

/// Makes sure the topic exists with exactly one partition (order holds only within one):
/// creates it if missing, and refuses another partition count.
///
/// Capture creates its topic itself rather than leave it to the broker's automatic creation,
/// which gives a topic the broker's default count (`num.partitions`; 4 on librdkafka's mock
/// cluster, so on `logstamp dev-broker`), which the relay would then refuse. So looking must
/// not create it, and a cluster that lets the relay create topics needs no preparation.
async fn ensure_topic(context: &RelayContext, topic: &str) -> Result<(), RelayError> {
    let admin: Arc<AdminClient<DefaultClientContext>> = Arc::new(
        context
            .kafka_config(&context.kafka.brokers)
            .set("allow.auto.create.topics", "false")
            .create_redacted()
            .map_err(RelayError::kafka("creating the Kafka admin client"))?,
    );
    if partitions(&admin, topic).await?.is_none() {
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics([&new], &options)
            .await
            .map_err(RelayError::kafka(format!("creating topic {topic}")))?;
        for result in results {
            match result {
                Ok(_) => tracing::info!(topic, "created the topic with one partition"),
                // Created meanwhile, by someone else: checked below like any other.
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                // Transient or not as any other Kafka error (a missing permission is not).
                Err((_, code)) => {
                    return Err(RelayError::Kafka {
                        context: format!(
                            "topic {topic} does not exist and could not be created (create it \
                             with one partition)"
                        ),
                        source: KafkaError::AdminOp(code),
                    });
                }
            }
        }
    }
    // A topic just created may take a moment to show in the metadata.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match partitions(&admin, topic).await? {
            Some(1) => return Ok(()),
            Some(n) => {
                return Err(RelayError::Refused(format!(
                    "topic {topic} has {n} partitions; the relay needs exactly one to keep the \
                     binlog order"
                )));
            }
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => {
                return Err(RelayError::Refused(format!(
                    "topic {topic} was created but its metadata does not show it"
                )));
            }
        }
    }
}

/// The partition count of `topic`, or `None` where the metadata does not show it.
async fn partitions(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    topic: &str,
) -> Result<Option<usize>, RelayError> {
    let client = admin.clone();
    let name = topic.to_string();
    let metadata = tokio::task::spawn_blocking(move || {
        client
            .inner()
            .fetch_metadata(Some(&name), Duration::from_secs(10))
    })
    .await
    .map_err(|e| RelayError::Refused(format!("reading topic metadata: {e}")))?
    .map_err(RelayError::kafka(format!(
        "reading the metadata of topic {topic}"
    )))?;
    Ok(metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len()))
}

async fn source_variables(
    conn: &mut mysql_async::Conn,
) -> Result<HashMap<String, String>, DbError> {
    let names: Vec<String> = SOURCE_VARIABLES.iter().map(|n| format!("'{n}'")).collect();
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ({})",
            names.join(", ")
        ))
        .await
        .map_err(DbError::mysql("reading the server's binlog settings"))?;
    rows.into_iter()
        .map(|mut row| {
            let name: String = take(&mut row, 0, "SHOW GLOBAL VARIABLES Variable_name")?;
            let value = take(&mut row, 1, "SHOW GLOBAL VARIABLES Value")?;
            Ok((name.to_ascii_lowercase(), value))
        })
        .collect()
}

async fn collations(conn: &mut mysql_async::Conn) -> Result<Charsets, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .query(
            "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS \
             WHERE ID IS NOT NULL AND CHARACTER_SET_NAME IS NOT NULL",
        )
        .await
        .map_err(DbError::mysql("reading the server's collations"))?;
    let collations = rows
        .into_iter()
        .map(|mut row| {
            Ok((
                take(&mut row, 0, "COLLATIONS.ID")?,
                take(&mut row, 1, "COLLATIONS.CHARACTER_SET_NAME")?,
            ))
        })
        .collect::<Result<Vec<(u16, String)>, DbError>>()?;
    Ok(Charsets::new(collations))
}

/// Binlog errors whose cause is known get their explanation; the rest stay as they are.
fn source_error(error: mysql_async::Error, server_id: u32, start: &Checkpoint) -> RelayError {
    if let mysql_async::Error::Server(e) = &error {
        match e.code {
            // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, reset, or a GTID or position the
            // server does not have. Retrying cannot help.
            1236 => {
                let at = if start.gtid_state.is_empty() {
                    format!("{}:{}", start.file, start.pos)
                } else {
                    format!("GTID state {}", start.gtid_state)
                };
                return RelayError::Refused(format!(
                    "the server cannot send its binlog from where capture resumes ({at}): {}. \
                     If it no longer has (or never had) the transactions from there on \
                     (PURGE BINARY LOGS, RESET MASTER, a promoted replica that lacks them), they \
                     are lost to the relay: {}",
                    e.message.trim_end_matches('.'),
                    resume::reset_advice()
                ));
            }
            // ER_SLAVE_SAME_ID: another reader connected with our replica server_id.
            4052 => {
                return RelayError::Refused(format!(
                    "another binlog reader connected with relay.server_id {server_id}: each \
                     relay needs its own"
                ));
            }
            _ => {}
        }
    }
    DbError::Mysql {
        context: "reading the binlog".into(),
        source: error,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        let mut good: HashMap<String, String> = [
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("binlog_row_metadata", "FULL"),
            ("binlog_checksum", "CRC32"),
            ("log_bin_compress", "OFF"),
            ("server_id", "11"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in pairs {
            good.insert(k.to_string(), v.to_string());
        }
        good
    }

    #[test]
    fn a_domain_going_back_is_not_published() {
        let published: GtidState = "0-1-500,1-1-7".parse().unwrap();
        assert!(goes_forward(&published, "0-2-501".parse().unwrap()).is_ok());
        assert!(goes_forward(&published, "2-1-1".parse().unwrap()).is_ok());
        for back in ["0-1-3", "0-2-500", "1-1-7"] {
            let e = goes_forward(&published, back.parse().unwrap()).unwrap_err();
            assert!(e.to_string().contains("went back"), "{e}");
        }
    }

    #[test]
    fn a_well_set_server_is_accepted() {
        assert!(check_source(&vars(&[]), 4001).unwrap());
        assert!(!check_source(&vars(&[("binlog_checksum", "NONE")]), 4001).unwrap());
        // MySQL has no log_bin_compress.
        let mut mysql = vars(&[]);
        mysql.remove("log_bin_compress");
        assert!(check_source(&mysql, 4001).is_ok());
    }

    #[test]
    fn each_missing_setting_is_named_with_why() {
        let message = check_source(&vars(&[("binlog_row_metadata", "MINIMAL")]), 4001)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("binlog_row_metadata is MINIMAL, needs FULL"),
            "{message}"
        );
        assert!(message.contains("BIGINT UNSIGNED"), "{message}");
        let message = check_source(
            &vars(&[
                ("binlog_format", "MIXED"),
                ("log_bin", "OFF"),
                ("binlog_row_image", "MINIMAL"),
            ]),
            4001,
        )
        .unwrap_err()
        .to_string();
        for part in [
            "log_bin is OFF",
            "binlog_format is MIXED",
            "binlog_row_image is MINIMAL",
        ] {
            assert!(message.contains(part), "{part} not in {message}");
        }
        assert!(check_source(&vars(&[("log_bin_compress", "ON")]), 4001).is_err());
        let same = check_source(&vars(&[]), 11).unwrap_err().to_string();
        assert!(same.contains("relay.server_id 11"), "{same}");
    }
}
