//! The dispatcher: turns the consumer thread's events into batches, writes up to
//! `store.concurrency` of them at once (one per partition at a time), commits the offsets to
//! Kafka after MySQL, keeps the memory held under `ingest.max_buffered_bytes` by pausing the
//! consumer, and shuts down cleanly.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::batcher::{BatchLimits, PartitionBatcher, PendingBatch, Record};
use super::consumer::{Assigned, Event, Incoming, Request};
use super::kafka::DeadLetterTopic;
use super::metrics::{BATCH_ROWS, BATCH_SECONDS};
use super::partition_key::PartitionKey;
use super::settings::WorkerSettings;
use super::{IngestError, IngestStats};
use crate::id::{IdError, IdGenerator};
use crate::mysql::DbError;
use crate::store::{Batch, DeadLetter, Row, WriteOutcome, Writer};
use crate::transform::Pipeline;

/// Events handled in one round of the dispatcher's loop at most,
const EVENTS_PER_ROUND: usize = 256;
/// and records: an OTLP message of thousands is a round of its own, so writes start (and the
/// memory budget is checked) between such messages, not after hundreds of them.
const RECORDS_PER_ROUND: usize = 256;

/// How often a waiting revocation looks again at whether the shards of its writes fail.
const REVOCATION_CHECK: Duration = Duration::from_millis(500);

/// An owned partition.
struct Partition {
    batcher: PartitionBatcher,
    /// The consumer thread's epoch of this assignment, for its seeks.
    epoch: u64,
    /// Changes on every assignment and restart, so late news of an earlier one is ignored.
    generation: u64,
    /// Messages are dropped until the seek of this generation is done.
    awaiting_seek: bool,
}

/// A write's result, with what is needed to act on it.
struct Written {
    key: PartitionKey,
    generation: u64,
    start_offset: i64,
    next_offset: i64,
    rows: usize,
    /// Values cut to their column's length in the batch's rows.
    truncated: usize,
    tombstones: usize,
    dead_letters: Vec<DeadLetter>,
    outcome: Result<WriteOutcome, IngestError>,
    /// Time spent stamping and writing.
    nanos: usize,
}

pub struct Dispatcher {
    group: String,
    limits: BatchLimits,
    concurrency: usize,
    max_buffered_bytes: usize,
    max_message_bytes: usize,
    pipeline: Pipeline,
    writer: Writer,
    generator: Arc<IdGenerator>,
    stats: Arc<IngestStats>,
    dead_letter_topic: Option<DeadLetterTopic>,
    requests: std_mpsc::Sender<Request>,
    partitions: HashMap<PartitionKey, Partition>,
    /// The records of the message being decoded: one list reused for every message.
    records: Vec<Record>,
    writes: JoinSet<Written>,
    /// Partitions with a batch being written, by generation (a revoked partition's write still
    /// counts until it ends).
    writing: HashMap<PartitionKey, u64>,
    revocations: Vec<(Vec<PartitionKey>, oneshot::Sender<()>)>,
    next_generation: u64,
    /// Set from reaching `ingest.max_buffered_bytes` until down to half of it: the consumer
    /// thread takes no messages meanwhile.
    over_budget: bool,
    stopping: Option<Instant>,
    shutdown_timeout: Duration,
}

impl Dispatcher {
    pub fn new(
        settings: &WorkerSettings,
        writer: Writer,
        generator: Arc<IdGenerator>,
        stats: Arc<IngestStats>,
        dead_letter_topic: Option<DeadLetterTopic>,
        requests: std_mpsc::Sender<Request>,
    ) -> Dispatcher {
        Dispatcher {
            group: settings.kafka.group_id.clone(),
            limits: BatchLimits {
                max_rows: settings.batch.max_rows,
                max_bytes: settings.batch.max_bytes,
                linger: settings.batch.linger(),
            },
            concurrency: settings.store.concurrency,
            max_buffered_bytes: settings.ingest.max_buffered_bytes,
            max_message_bytes: settings.ingest.max_message_bytes,
            pipeline: Pipeline::from_settings(
                settings.ingest.format,
                &settings.normalize,
                &settings.store,
            ),
            writer,
            generator,
            stats,
            dead_letter_topic,
            requests,
            partitions: HashMap::new(),
            records: Vec::new(),
            writes: JoinSet::new(),
            writing: HashMap::new(),
            revocations: Vec::new(),
            next_generation: 0,
            over_budget: false,
            stopping: None,
            shutdown_timeout: settings.ingest.shutdown_timeout,
        }
    }

    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), IngestError> {
        let shutdown_timeout = self.shutdown_timeout;
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let linger = self.next_deadline();
            let give_up = self
                .stopping
                .and_then(|at| at.checked_add(shutdown_timeout));
            tokio::select! {
                biased;
                Some(written) = self.writes.join_next(), if !self.writes.is_empty() => {
                    match written {
                        Ok(written) => self.on_written(written)?,
                        Err(e) => return Err(IngestError::Store(DbError::TaskPanicked(format!(
                            "a batch write ended abnormally: {e}"
                        )))),
                    }
                }
                () = &mut shutdown, if self.stopping.is_none() => self.stop(),
                event = events.recv() => match event {
                    Some(event) => {
                        let mut records = self.on_event(event)?;
                        // Take what else is waiting before the bookkeeping below, which looks
                        // at every partition: once per round, not once per message.
                        for _ in 1..EVENTS_PER_ROUND {
                            if records >= RECORDS_PER_ROUND {
                                break;
                            }
                            match events.try_recv() {
                                Ok(event) => records += self.on_event(event)?,
                                Err(_) => break,
                            }
                        }
                    }
                    None => return Err(IngestError::ConsumerGone),
                },
                () = sleep_until(linger), if linger.is_some() => {
                    let now = Instant::now();
                    for partition in self.partitions.values_mut() {
                        partition.batcher.close_if_lingered(now);
                    }
                }
                // A shard may start failing while a revocation waits on its write.
                () = tokio::time::sleep(REVOCATION_CHECK), if !self.revocations.is_empty() => {}
                () = sleep_until(give_up), if give_up.is_some() => {
                    let unfinished = self.writes.len()
                        + self.partitions.values().filter(|p| !p.batcher.is_idle()).count();
                    self.writes.abort_all();
                    return Err(IngestError::ShutdownTimedOut { timeout: shutdown_timeout, unfinished });
                }
            }
            self.start_writes();
            self.apply_backpressure();
            self.answer_revocations();
            if self.stopping.is_some()
                && self.writes.is_empty()
                && self.partitions.values().all(|p| p.batcher.is_idle())
            {
                tracing::info!(counts = ?self.stats.snapshot(), "everything read is committed");
                return Ok(());
            }
        }
    }

    /// Stops taking messages and flushes every open batch.
    fn stop(&mut self) {
        tracing::info!("shutting down: flushing and committing what was read");
        self.stopping = Some(Instant::now());
        self.request(Request::Stop);
        for partition in self.partitions.values_mut() {
            partition.batcher.close();
        }
    }

    fn request(&self, request: Request) {
        // Fails only once the consumer thread is gone, which the event channel reports.
        let _ = self.requests.send(request);
    }

    /// Handles one event; the records a message became, 0 for other events.
    fn on_event(&mut self, event: Event) -> Result<usize, IngestError> {
        match event {
            Event::Assigned(assigned) => {
                for Assigned { key, epoch, stored } in assigned {
                    let generation = self.new_generation();
                    self.partitions.insert(
                        key,
                        Partition {
                            batcher: PartitionBatcher::new(self.limits, stored),
                            epoch,
                            generation,
                            awaiting_seek: false,
                        },
                    );
                }
                self.count_partitions();
            }
            Event::Revoked { partitions, done } => {
                // What was read but not written is dropped: the next owner reads it again from
                // the offset in MySQL.
                for key in &partitions {
                    self.partitions.remove(key);
                }
                self.count_partitions();
                self.revocations.push((partitions, done));
            }
            Event::Messages(messages) => {
                if self.stopping.is_some() {
                    return Ok(0);
                }
                // One clock reading for the whole hand-over, not two a message.
                let now = Instant::now();
                let mut records = 0;
                for message in messages {
                    records += self.on_message(message, now)?;
                }
                IngestStats::add(&self.stats.decode_nanos, elapsed_nanos(now));
                return Ok(records);
            }
            Event::Seeked { key, generation } => {
                if let Some(partition) = self.partitions.get_mut(&key)
                    && partition.generation == generation
                {
                    partition.awaiting_seek = false;
                }
            }
            Event::Failed(e) => return Err(e),
        }
        Ok(0)
    }

    /// The partitions gauge, set where the set of partitions changes (not per message).
    fn count_partitions(&self) {
        self.stats.partitions.store(
            self.partitions.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Decodes a message into its partition's open batch, received `now`; the records it became.
    fn on_message(&mut self, message: Incoming, now: Instant) -> Result<usize, IngestError> {
        let Some(partition) = self.partitions.get_mut(&message.key) else {
            // Read before the partition was revoked; its next owner reads it again.
            return Ok(0);
        };
        if partition.awaiting_seek {
            return Ok(0);
        }
        IngestStats::add(&self.stats.consumed, 1);
        let records = &mut self.records;
        decode(
            &self.pipeline,
            self.max_message_bytes,
            &message.key.topic,
            message.offset,
            message.payload,
            message.size,
            records,
        );
        let count = records.len();
        // An OTLP message's documents outweigh its protobuf: the memory budget and the batch's
        // byte limit count whichever is larger.
        let bytes = message.size.max(held_bytes(records));
        partition
            .batcher
            .push(message.offset, records.drain(..), bytes, now)
            .map_err(|source| IngestError::OffsetBehind {
                partition: message.key.to_string(),
                source,
            })?;
        Ok(count)
    }

    /// Starts writing closed batches while there is room, one per partition at a time.
    ///
    /// A write to a shard that is failing waits in its retries while the shard is away (up to
    /// `store.give_up_after`). Such writes hold none of the `store.concurrency` slots, so the
    /// other shards' partitions keep flowing, and each failing shard has one write in flight
    /// at most: it finds out when the shard is back.
    fn start_writes(&mut self) {
        let writer = &self.writer;
        let group = &self.group;
        let failing_shard =
            |key: &PartitionKey| writer.failing_shard(group, &key.topic, key.partition);
        let mut probed = Vec::new();
        let mut healthy = 0;
        for key in self.writing.keys() {
            match failing_shard(key) {
                Some(shard) => probed.push(shard),
                None => healthy += 1,
            }
        }
        for (key, partition) in &mut self.partitions {
            if self.writing.contains_key(key) {
                continue;
            }
            let failing = failing_shard(key);
            let room = match failing {
                Some(shard) => !probed.contains(&shard),
                None => healthy < self.concurrency,
            };
            if !room {
                continue;
            }
            let Some(pending) = partition.batcher.take_next() else {
                continue;
            };
            match failing {
                Some(shard) => probed.push(shard),
                None => healthy += 1,
            }
            self.writing.insert(key.clone(), partition.generation);
            let writer = self.writer.clone();
            let generator = self.generator.clone();
            let group = self.group.clone();
            let key = key.clone();
            let generation = partition.generation;
            self.writes.spawn(async move {
                write(writer, generator, group, key, generation, pending).await
            });
        }
    }

    fn on_written(&mut self, written: Written) -> Result<(), IngestError> {
        let Written {
            key,
            generation,
            start_offset,
            next_offset,
            rows,
            truncated,
            tombstones,
            dead_letters,
            outcome,
            nanos,
        } = written;
        IngestStats::add(&self.stats.write_nanos, nanos);
        self.writing.remove(&key);
        let outcome = outcome?;
        let owned = self
            .partitions
            .get(&key)
            .is_some_and(|p| p.generation == generation);
        if owned && let Some(partition) = self.partitions.get_mut(&key) {
            partition.batcher.written();
        }
        match outcome {
            WriteOutcome::Committed(committed) => {
                IngestStats::add(&self.stats.stored, committed.rows);
                IngestStats::add(&self.stats.truncated, truncated);
                IngestStats::add(&self.stats.tombstones, tombstones);
                IngestStats::add(&self.stats.dead_lettered, committed.dead_letters);
                IngestStats::add(&self.stats.batches, 1);
                metrics::histogram!(BATCH_SECONDS).record(nanos as f64 / 1e9);
                metrics::histogram!(BATCH_ROWS).record(committed.rows as f64);
                if owned {
                    self.request(Request::Commit(vec![(key.clone(), next_offset)]));
                }
                let mut letters = dead_letters;
                letters.extend(committed.refused);
                self.publish_dead_letters(&key, letters);
            }
            WriteOutcome::OffsetMoved { stored } if stored == Some(next_offset) => {
                // This batch's own earlier commit, whose acknowledgement was lost.
                IngestStats::add(&self.stats.stored, rows);
                IngestStats::add(&self.stats.truncated, truncated);
                IngestStats::add(&self.stats.tombstones, tombstones);
                IngestStats::add(&self.stats.dead_lettered, dead_letters.len());
                IngestStats::add(&self.stats.batches, 1);
            }
            WriteOutcome::OffsetMoved { stored } => {
                tracing::warn!(
                    partition = %key,
                    start_offset,
                    ?stored,
                    "another writer moved the partition's offset; reading again from there"
                );
                let generation = self.new_generation();
                if owned && let Some(partition) = self.partitions.get_mut(&key) {
                    partition.batcher.restart_at(stored);
                    partition.generation = generation;
                    partition.awaiting_seek = true;
                    let epoch = partition.epoch;
                    self.request(Request::Seek {
                        key,
                        offset: stored.unwrap_or(start_offset),
                        epoch,
                        generation,
                    });
                }
            }
        }
        Ok(())
    }

    fn publish_dead_letters(&self, key: &PartitionKey, letters: Vec<DeadLetter>) {
        let Some(topic) = self.dead_letter_topic.clone() else {
            return;
        };
        if letters.is_empty() {
            return;
        }
        let stats = self.stats.clone();
        let key = key.clone();
        tokio::spawn(async move {
            for letter in &letters {
                let counter = if topic.send(&key.topic, key.partition, letter).await {
                    &stats.dead_letters_published
                } else {
                    &stats.dead_letters_unpublished
                };
                IngestStats::add(counter, 1);
            }
        });
    }

    /// Stops the consumer taking messages while more than `ingest.max_buffered_bytes` are held,
    /// and lets it go on once below half of that.
    fn apply_backpressure(&mut self) {
        let held: usize = self.partitions.values().map(|p| p.batcher.bytes()).sum();
        if !self.over_budget && held > self.max_buffered_bytes {
            tracing::debug!(
                held,
                "memory budget reached: taking no more messages for now"
            );
            self.over_budget = true;
            IngestStats::add(&self.stats.budget_reached, 1);
            self.request(Request::Pause);
        } else if self.over_budget && held <= self.max_buffered_bytes / 2 && self.stopping.is_none()
        {
            tracing::debug!(held, "taking messages again");
            self.over_budget = false;
            self.request(Request::Resume);
        }
    }

    /// Lets revocations go once none of their partitions is being written, but for writes to
    /// a failing shard: those wait in their retries as long as the shard is away, and holding
    /// the rebalance that long would stop every partition of the worker. Such a write may
    /// still commit later; the conditional offset claim then fails the new owner's batch or
    /// this one's, so nothing is stored twice.
    fn answer_revocations(&mut self) {
        let (writing, writer, group) = (&self.writing, &self.writer, &self.group);
        let held = |k: &PartitionKey| {
            writing.contains_key(k) && writer.failing_shard(group, &k.topic, k.partition).is_none()
        };
        let (done, waiting): (Vec<_>, Vec<_>) = self
            .revocations
            .drain(..)
            .partition(|(keys, _)| !keys.iter().any(held));
        self.revocations = waiting;
        for (_, answer) in done {
            let _ = answer.send(());
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.partitions
            .values()
            .filter_map(|p| p.batcher.deadline())
            .min()
    }

    fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// What a message becomes, added to `records`: its rows (one, or one per OTLP log record), dead
/// letters with the reason (the whole message, or a record of it), or a skipped tombstone.
fn decode(
    pipeline: &Pipeline,
    max_message_bytes: usize,
    topic: &str,
    offset: i64,
    payload: Option<Vec<u8>>,
    size: usize,
    records: &mut Vec<Record>,
) {
    let Some(payload) = payload else {
        records.push(Record::Tombstone);
        return;
    };
    if size > max_message_bytes {
        let mut raw = payload;
        raw.truncate(max_message_bytes);
        records.push(Record::Dead(DeadLetter {
            offset,
            record: None,
            reason: format!(
                "message is {size} bytes, over ingest.max_message_bytes ({max_message_bytes}); its first {max_message_bytes} bytes are kept"
            ),
            raw,
        }));
        return;
    }
    let mapped = pipeline.map_records(topic, payload, |record| {
        records.push(match record {
            Ok(mapped) => Record::Row(mapped),
            Err(e) => Record::Dead(DeadLetter {
                offset,
                record: Some(e.record),
                reason: e.error.to_string(),
                raw: e.document.into_bytes(),
            }),
        })
    });
    if let Err((e, payload)) = mapped {
        records.push(Record::Dead(DeadLetter {
            offset,
            record: None,
            reason: e.to_string(),
            raw: payload,
        }));
    }
}

/// The bytes of text the records hold: their documents, or the dead letters' raw bytes.
fn held_bytes(records: &[Record]) -> usize {
    records
        .iter()
        .map(|record| match record {
            Record::Row(row) => row.document.len(),
            Record::Dead(letter) => letter.raw.len(),
            Record::Tombstone => 0,
        })
        .sum()
}

/// Stamps a batch with IDs and writes it.
async fn write(
    writer: Writer,
    generator: Arc<IdGenerator>,
    consumer_group: String,
    key: PartitionKey,
    generation: u64,
    pending: PendingBatch,
) -> Written {
    let PendingBatch {
        start_offset,
        next_offset,
        rows,
        dead_letters,
        tombstones,
        ..
    } = pending;
    let started = Instant::now();
    let row_count = rows.len();
    let truncated = rows.iter().map(|r| r.mapped.truncated as usize).sum();
    let mut batch = Batch {
        consumer_group,
        topic: key.topic.to_string(),
        partition: key.partition,
        start_offset,
        next_offset,
        rows: Vec::new(),
        dead_letters,
    };
    let outcome = match stamp(&generator, rows).await {
        Ok(rows) => {
            batch.rows = rows;
            writer.write(&batch).await.map_err(IngestError::from)
        }
        Err(e) => Err(e.into()),
    };
    Written {
        key,
        generation,
        start_offset,
        next_offset,
        rows: row_count,
        truncated,
        tombstones,
        dead_letters: batch.dead_letters,
        outcome,
        nanos: elapsed_nanos(started),
    }
}

fn elapsed_nanos(since: Instant) -> usize {
    usize::try_from(since.elapsed().as_nanos()).unwrap_or(usize::MAX)
}

/// How long stamping waits before asking again after a transient refusal (the lease raises its
/// high-water mark within about a second).
const STAMP_RETRY: Duration = Duration::from_millis(50);

/// Gives each row its ID, in offset order, taking blocks of consecutive IDs (a block ends at
/// the end of a second, so a batch may take more than one).
async fn stamp(
    generator: &IdGenerator,
    rows: Vec<super::batcher::PendingRow>,
) -> Result<Vec<Row>, IdError> {
    let total = rows.len();
    let mut stamped = Vec::with_capacity(total);
    let mut rows = rows.into_iter();
    while stamped.len() < total {
        let wanted = u32::try_from(total - stamped.len()).unwrap_or(u32::MAX);
        let block = match generator.next_block(wanted) {
            Ok(block) => block,
            Err(e) if e.is_transient() => {
                tracing::debug!("stamping waits: {e}");
                tokio::time::sleep(STAMP_RETRY).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        for id in block {
            let Some(row) = rows.next() else { break };
            stamped.push(Row {
                id,
                offset: row.offset,
                mapped: row.mapped,
            });
        }
    }
    Ok(stamped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{ColumnSpec, ColumnType};
    use crate::transform::{Mapper, MessageFormat, Normalizer};

    fn pipeline(format: MessageFormat) -> Pipeline {
        pipeline_reading(format, "/n")
    }

    /// A pipeline of one `uint` column `n` read at `pointer`.
    fn pipeline_reading(format: MessageFormat, pointer: &str) -> Pipeline {
        let mapper = Mapper::new(&[ColumnSpec {
            name: "n".into(),
            pointer: pointer.into(),
            column_type: ColumnType::Uint,
            length: None,
            truncate: false,
        }]);
        Pipeline::new(format, Normalizer::default(), mapper, Vec::new())
    }

    /// What `decode` adds for a message.
    fn decoded(
        pipeline: &Pipeline,
        max_message_bytes: usize,
        offset: i64,
        payload: Option<Vec<u8>>,
        size: usize,
    ) -> Vec<Record> {
        let mut records = Vec::new();
        decode(
            pipeline,
            max_message_bytes,
            "t",
            offset,
            payload,
            size,
            &mut records,
        );
        records
    }

    /// The one record of a message that is one record.
    fn one(mut records: Vec<Record>) -> Record {
        assert_eq!(records.len(), 1, "{records:?}");
        records.remove(0)
    }

    fn dead_reason(records: Vec<Record>) -> (String, Vec<u8>) {
        match one(records) {
            Record::Dead(letter) => (letter.reason, letter.raw),
            other => panic!("not a dead letter: {other:?}"),
        }
    }

    #[test]
    fn a_message_becomes_a_row_a_dead_letter_or_a_tombstone() {
        let m = pipeline(MessageFormat::Json);
        let row = one(decoded(&m, 100, 7, Some(br#"{"n":3}"#.to_vec()), 7));
        assert!(matches!(row, Record::Row(ref r) if r.document == r#"{"n":3}"#));
        assert!(matches!(
            one(decoded(&m, 100, 7, None, 0)),
            Record::Tombstone
        ));
        let (reason, raw) = dead_reason(decoded(&m, 100, 7, Some(br#"{"n":"x"}"#.to_vec()), 9));
        assert!(reason.starts_with("column n:"), "{reason}");
        assert_eq!(raw, br#"{"n":"x"}"#);
        let raw_row = decoded(
            &pipeline(MessageFormat::Raw),
            100,
            7,
            Some(b"plain text".to_vec()),
            10,
        );
        assert!(matches!(one(raw_row), Record::Row(_)));
    }

    #[test]
    fn an_otlp_message_becomes_a_row_per_record_and_a_dead_letter_per_bad_record() {
        let m = pipeline_reading(MessageFormat::OtlpJson, "/attributes/n");
        let message = serde_json::json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
            {"attributes": [{"key": "n", "value": {"intValue": "1"}}]},
            {"attributes": [{"key": "n", "value": {"stringValue": "x"}}]},
            {"attributes": [{"key": "n", "value": {"intValue": "3"}}]},
        ]}]}]})
        .to_string()
        .into_bytes();
        let size = message.len();
        let records = decoded(&m, size, 9, Some(message), size);
        assert_eq!(records.len(), 3);
        let Record::Dead(letter) = &records[1] else {
            panic!("record 1 is not a dead letter: {records:?}");
        };
        assert_eq!((letter.offset, letter.record), (9, Some(1)));
        assert!(letter.reason.starts_with("column n:"), "{}", letter.reason);
        let document: serde_json::Value = serde_json::from_slice(&letter.raw).unwrap();
        assert_eq!(document["attributes"]["n"], "x");
        for (index, n) in [(0, 1u64), (2, 3)] {
            let Record::Row(row) = &records[index] else {
                panic!("record {index} is not a row: {records:?}");
            };
            assert_eq!(row.record, Some(index as u32));
            assert_eq!(row.values, [crate::mysql::SqlValue::Uint(n)]);
        }
        let (reason, raw) = dead_reason(decoded(
            &m,
            100,
            9,
            Some(b"{\"resourceLogs\": 1}".to_vec()),
            20,
        ));
        assert!(
            reason.starts_with("message is not an OTLP logs request (OTLP/JSON: "),
            "{reason}"
        );
        assert_eq!(raw, b"{\"resourceLogs\": 1}");
    }

    #[test]
    fn an_oversized_message_keeps_its_first_bytes_and_says_how_large_it_was() {
        // The consumer thread copies at most max_message_bytes + 1 bytes of a large message.
        let (reason, raw) = dead_reason(decoded(
            &pipeline(MessageFormat::Json),
            4,
            0,
            Some(b"{\"n\":".to_vec()),
            5000,
        ));
        assert_eq!(raw, b"{\"n\"");
        assert!(reason.contains("5000 bytes"), "{reason}");
        assert!(reason.contains("ingest.max_message_bytes (4)"), "{reason}");
    }
}
