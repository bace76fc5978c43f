//! The Kafka side of a worker: one thread owns the consumer, polls it, answers rebalances and
//! carries out the dispatcher's requests (pause, resume, seek, commit).
//!
//! A thread of its own, not a task, because librdkafka runs the rebalance callback inside
//! `poll`, and the callback must block: on assignment it reads the partitions' next offsets from
//! MySQL before assigning them, and on revocation it waits until the dispatcher has finished or
//! abandoned the partitions' batches. Both go through the runtime's handle.
//!
//! Everything the thread hands over travels in one ordered channel, so the dispatcher sees an
//! assignment before the partition's first message and every message of a partition before its
//! revocation. Messages travel in batches of what one round of polling found (one wake-up of
//! the dispatcher for many messages); any other event first sends the messages gathered so far.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Message, Offset, Statistics};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::deleted::{FirstReads, deleted_unread};
use super::partition_key::PartitionKey;
use super::seeks::{Assignments, PendingSeeks, Seek};
use super::{IngestError, IngestStats, PartitionLag};
use crate::store::Writer;

/// How long one `poll` waits for a message; also how soon a request is carried out.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// How long a revocation waits for the partitions' batches being written. Past it the
/// partitions are given up anyway: a late batch cannot commit, because the new owner's first
/// commit moves the offset its claim is conditional on.
const REVOKE_WAIT: Duration = Duration::from_secs(30);

/// How long a seek is waited for, so its failure is seen (a seek not waited for reports none).
const SEEK_WAIT: Duration = Duration::from_secs(1);

/// How long the thread stops taking messages when the dispatcher reaches its memory budget
/// before it pauses the partitions in librdkafka. Holding off leaves librdkafka's prefetch in
/// place (bounded by `queued.max.messages.kbytes`), so messages flow again the moment the
/// writers have caught up. A pause drops the prefetch, and after a resume librdkafka's broker
/// thread fetches again only when it next wakes up, up to a second later (0.76 to 0.78 s
/// against nisshi, `examples/resume_delay.rs`): pausing at every turn of the budget held one
/// worker to about 120,000 rows/s. Pausing once the hold has lasted this long keeps rebalances
/// served (they arrive through `poll`) while the writers wait for a database that is away.
const HOLD_BEFORE_PAUSE: Duration = Duration::from_secs(1);

/// Messages handed over at once at most, and their bytes: small enough that the channel's
/// few batches stay a small part of the memory budget.
/// How long the consumer thread waits for a partition's log start offset, asked once per
/// assignment that began past where it was to start.
const WATERMARKS_WAIT: Duration = Duration::from_secs(10);

const HANDOVER_MESSAGES: usize = 512;
const HANDOVER_BYTES: usize = 256 * 1024;

/// A message taken off Kafka.
#[derive(Debug)]
pub struct Incoming {
    pub key: PartitionKey,
    pub offset: i64,
    /// `None` for a tombstone. At most `ingest.max_message_bytes`: the rest of a larger
    /// message is not copied.
    pub payload: Option<Vec<u8>>,
    /// The payload's full size.
    pub size: usize,
}

/// A partition now ours.
#[derive(Debug)]
pub struct Assigned {
    pub key: PartitionKey,
    /// This assignment of the partition: seeks asked for it carry it, and are dropped once it is
    /// over.
    pub epoch: u64,
    /// The next offset stored in MySQL (`None`: never written; reading starts at Kafka's
    /// committed offset, else `auto.offset.reset`).
    pub stored: Option<i64>,
}

/// What the consumer thread tells the dispatcher, in order.
#[derive(Debug)]
pub enum Event {
    Assigned(Vec<Assigned>),
    /// Partitions being taken away; answer once none of their batches is being written.
    Revoked {
        partitions: Vec<PartitionKey>,
        done: oneshot::Sender<()>,
    },
    /// Messages in the order they were read.
    Messages(Vec<Incoming>),
    /// A seek asked for with this generation is done: the partition's next messages follow it.
    Seeked {
        key: PartitionKey,
        generation: u64,
    },
    /// The consumer cannot go on.
    Failed(IngestError),
}

/// What the dispatcher asks of the consumer thread.
#[derive(Debug)]
pub enum Request {
    /// Take no more messages for now (memory budget reached); past [`HOLD_BEFORE_PAUSE`],
    /// stop fetching every partition.
    Pause,
    Resume,
    /// Read the partition again from `offset`, then send [`Event::Seeked`]; unless its
    /// assignment `epoch` is over by then.
    Seek {
        key: PartitionKey,
        offset: i64,
        epoch: u64,
        generation: u64,
    },
    /// Commit these next offsets to Kafka, for lag monitoring only.
    Commit(Vec<(PartitionKey, i64)>),
    /// Shutting down: hand over no more messages.
    Stop,
    /// Leave the group and end the thread.
    Close,
}

/// The consumer's callbacks: rebalances, commit results.
pub struct IngestContext {
    handle: Handle,
    events: mpsc::Sender<Event>,
    writer: Writer,
    group: String,
    /// Set while the partitions are paused in librdkafka: newly assigned ones start paused.
    paused: AtomicBool,
    /// Set once the consumer is closing: revocations no longer wait for the dispatcher.
    closing: AtomicBool,
    /// The partitions' assignment epochs, kept by the rebalance callbacks.
    assignments: Mutex<Assignments>,
    /// Where assignments started reading, until their first message tells whether Kafka
    /// deleted what lay between.
    first_reads: FirstReads,
    /// Where the consumer lag from librdkafka's statistics goes.
    stats: Arc<IngestStats>,
    /// Messages read and not handed over yet, and their bytes. Only the consumer thread takes
    /// it (the callbacks run inside its `poll`).
    gathered: Mutex<(Vec<Incoming>, usize)>,
}

impl IngestContext {
    pub fn new(
        handle: Handle,
        events: mpsc::Sender<Event>,
        writer: Writer,
        group: String,
        stats: Arc<IngestStats>,
    ) -> Self {
        IngestContext {
            handle,
            events,
            writer,
            group,
            stats,
            paused: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            assignments: Mutex::default(),
            first_reads: FirstReads::default(),
            gathered: Mutex::default(),
        }
    }

    fn assignments(&self) -> MutexGuard<'_, Assignments> {
        // Only the consumer thread takes it, and the bookkeeping stays whole if it panicked.
        self.assignments
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn send(&self, event: Event) {
        self.hand_over();
        self.send_now(event);
    }

    fn send_now(&self, event: Event) -> bool {
        // Fails only once the dispatcher is gone, when nothing is listening anyway.
        self.handle.block_on(self.events.send(event)).is_ok()
    }

    fn gathered(&self) -> MutexGuard<'_, (Vec<Incoming>, usize)> {
        self.gathered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a message to those gathered; hands them over once there are enough. False once the
    /// dispatcher is gone.
    fn gather(&self, message: Incoming) -> bool {
        let full = {
            let mut gathered = self.gathered();
            gathered.1 += message.size;
            gathered.0.push(message);
            gathered.0.len() >= HANDOVER_MESSAGES || gathered.1 >= HANDOVER_BYTES
        };
        !full || self.hand_over()
    }

    /// Sends the messages gathered, if any. False once the dispatcher is gone.
    fn hand_over(&self) -> bool {
        let messages = {
            let mut gathered = self.gathered();
            if gathered.0.is_empty() {
                return true;
            }
            // The next list is made at its full size: no copying as it grows.
            let next = (Vec::with_capacity(HANDOVER_MESSAGES), 0);
            std::mem::replace(&mut *gathered, next).0
        };
        self.send_now(Event::Messages(messages))
    }

    fn assign(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let keys = keys(tpl);
        let epochs: Vec<u64> = {
            let mut assignments = self.assignments();
            keys.iter().map(|key| assignments.assign(key)).collect()
        };
        let stored = self.handle.block_on(
            self.writer
                .stored_offsets(&self.group, &partition_refs(&keys)),
        );
        match stored {
            Ok(stored) => {
                for (key, offset) in keys.iter().zip(&stored) {
                    if let Some(offset) = offset {
                        self.first_reads.expect(key.clone(), *offset);
                    }
                    let start = offset.map_or(Offset::Stored, Offset::Offset);
                    if let Err(e) = tpl.set_partition_offset(&key.topic, key.partition, start) {
                        tracing::error!(partition = %key, "setting the start offset: {e}");
                    }
                }
                tracing::info!(
                    partitions = %list(&keys),
                    "assigned; reading from the offsets stored in MySQL"
                );
                let assigned = keys
                    .into_iter()
                    .zip(epochs)
                    .zip(stored)
                    .map(|((key, epoch), stored)| Assigned { key, epoch, stored })
                    .collect();
                self.send(Event::Assigned(assigned));
            }
            Err(e) => {
                // The dispatcher stops on this event, before writing anything of these
                // partitions, so they may be assigned without a known start.
                self.send(Event::Failed(IngestError::Store(e)));
            }
        }
        let assigned = match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => consumer.incremental_assign(tpl),
            _ => consumer.assign(tpl),
        };
        if let Err(e) = assigned {
            self.send(Event::Failed(IngestError::kafka("assigning partitions", e)));
        } else if self.paused.load(Ordering::Relaxed)
            && let Err(e) = consumer.pause(tpl)
        {
            tracing::warn!("pausing newly assigned partitions: {e}");
        }
    }

    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let keys = keys(tpl);
        tracing::info!(partitions = %list(&keys), "revoked");
        {
            let mut assignments = self.assignments();
            for key in &keys {
                assignments.revoke(key);
                self.first_reads.forget(key);
            }
        }
        if !self.closing.load(Ordering::Relaxed) {
            let (done, finished) = oneshot::channel();
            self.send(Event::Revoked {
                partitions: keys,
                done,
            });
            let waited = self
                .handle
                .block_on(async { tokio::time::timeout(REVOKE_WAIT, finished).await });
            if waited.is_err() {
                tracing::warn!(
                    "batches of revoked partitions still being written after {REVOKE_WAIT:?}; giving the partitions up (their writes cannot commit once the new owner does)"
                );
            }
        }
        let unassigned = match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => consumer.incremental_unassign(tpl),
            _ => consumer.unassign(),
        };
        if let Err(e) = unassigned {
            tracing::warn!("giving up revoked partitions: {e}");
        }
    }
}

impl ClientContext for IngestContext {
    fn stats(&self, statistics: Statistics) {
        let mut lag = Vec::new();
        for (topic, t) in &statistics.topics {
            for p in t.partitions.values() {
                // Partition -1 is librdkafka's own; a negative lag is not known yet (nothing
                // committed to Kafka); partitions not desired are not assigned to this worker.
                let Ok(messages) = u64::try_from(p.consumer_lag) else {
                    continue;
                };
                if p.partition >= 0 && p.desired {
                    lag.push(PartitionLag {
                        topic: topic.clone(),
                        partition: p.partition,
                        messages,
                    });
                }
            }
        }
        lag.sort();
        self.stats.set_consumer_lag(lag);
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        // A commit refused during a rebalance (COMMITFAIL) is expected: Kafka's offsets only
        // feed lag tools, and the next batch's commit supersedes it.
        if facility == "COMMITFAIL" {
            tracing::debug!(target: "librdkafka", "{facility} {message}");
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "{facility} {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "{facility} {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "{facility} {message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{facility} {message}"),
        }
    }
}

impl ConsumerContext for IngestContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => self.revoke(consumer, tpl),
            other => {
                // librdkafka retries the join itself; the group carries on without us meanwhile.
                tracing::warn!("rebalance error: {other:?}");
                self.assignments().clear();
                if let Err(e) = consumer.unassign() {
                    tracing::warn!("unassigning after a rebalance error: {e}");
                }
            }
        }
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        // Kafka's copy of the offsets only feeds lag tools; MySQL's is the one that counts. The
        // group answers commits during a rebalance with RebalanceInProgress, and the next
        // batch's commit supersedes this one.
        if let Err(e) = result {
            tracing::debug!("committing offsets to Kafka: {e}");
        }
    }
}

fn keys(tpl: &TopicPartitionList) -> Vec<PartitionKey> {
    tpl.elements()
        .iter()
        .map(|e| PartitionKey {
            topic: Arc::from(e.topic()),
            partition: e.partition(),
        })
        .collect()
}

fn partition_refs(keys: &[PartitionKey]) -> Vec<(&str, i32)> {
    keys.iter().map(|k| (&*k.topic, k.partition)).collect()
}

fn list(keys: &[PartitionKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The consumer thread's settings.
pub struct PollerSettings {
    pub max_message_bytes: usize,
    /// Messages per second at most; `None` for no limit.
    pub max_records_per_second: Option<std::num::NonZeroU32>,
}

/// Starts the thread that owns `consumer` until [`Request::Close`] (or until the dispatcher
/// is gone), then closes it, leaving the group.
pub fn spawn_poller(
    consumer: BaseConsumer<IngestContext>,
    requests: std_mpsc::Receiver<Request>,
    settings: PollerSettings,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || Poller::new(consumer, settings).run(requests))
}

struct Poller {
    consumer: BaseConsumer<IngestContext>,
    max_message_bytes: usize,
    limiter: Option<DefaultDirectRateLimiter>,
    stopped: bool,
    /// Since when no message is taken at the dispatcher's request, while the partitions are not
    /// paused in librdkafka yet.
    holding: Option<Instant>,
    seeks: PendingSeeks,
    /// The latest offset committed to Kafka per partition.
    committed: HashMap<PartitionKey, i64>,
}

impl Poller {
    fn new(consumer: BaseConsumer<IngestContext>, settings: PollerSettings) -> Poller {
        Poller {
            consumer,
            max_message_bytes: settings.max_message_bytes,
            limiter: settings
                .max_records_per_second
                .map(|n| RateLimiter::direct(Quota::per_second(n))),
            stopped: false,
            holding: None,
            seeks: PendingSeeks::default(),
            committed: HashMap::new(),
        }
    }

    fn run(mut self, requests: std_mpsc::Receiver<Request>) {
        // The topic of the last message, shared by the next ones (not an allocation each).
        let mut topic = None;
        'polling: loop {
            // Holding off or paused, no message is taken: the thread waits for the
            // dispatcher's next request instead, so a resume is carried out at once.
            if let Some(wait) = self.idle_wait() {
                match requests.recv_timeout(wait) {
                    Ok(Request::Close) | Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                        break 'polling;
                    }
                    Ok(request) => self.carry_out(request),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                }
                self.pause_after_holding();
            }
            loop {
                match requests.try_recv() {
                    Ok(Request::Close) | Err(std_mpsc::TryRecvError::Disconnected) => {
                        break 'polling;
                    }
                    Ok(request) => self.carry_out(request),
                    Err(std_mpsc::TryRecvError::Empty) => break,
                }
            }
            self.seek_pending();
            if self.holding.is_some() {
                continue;
            }
            // Waits for the first message, then takes what else is ready at once; paused, it
            // only serves what librdkafka has besides messages (rebalances, for one).
            let paused = self.consumer.context().paused.load(Ordering::Relaxed);
            let mut wait = if paused { Duration::ZERO } else { POLL_WAIT };
            for _ in 0..HANDOVER_MESSAGES {
                match self.consumer.poll(wait) {
                    None => break,
                    Some(Err(e)) => tracing::warn!("consuming: {e}"),
                    Some(Ok(message)) => {
                        if !self.stopped && !self.take(&message, &mut topic) {
                            break 'polling;
                        }
                    }
                }
                wait = Duration::ZERO;
            }
            if !self.consumer.context().hand_over() {
                break 'polling;
            }
        }
        self.commit_final();
        self.consumer
            .context()
            .closing
            .store(true, Ordering::Relaxed);
        // Dropping the consumer closes it: it leaves the group (unless it is a static member)
        // and serves the final revocation on this thread.
    }

    /// Copies a message off librdkafka into those gathered. False once the dispatcher is gone.
    fn take(&self, message: &BorrowedMessage<'_>, last_topic: &mut Option<Arc<str>>) -> bool {
        let context = self.consumer.context();
        if let Some(limiter) = &self.limiter {
            context.handle.block_on(limiter.until_ready());
        }
        let topic = match last_topic {
            Some(topic) if **topic == *message.topic() => topic.clone(),
            _ => last_topic.insert(Arc::from(message.topic())).clone(),
        };
        let key = PartitionKey {
            topic,
            partition: message.partition(),
        };
        if let Some(start) = context.first_reads.gap_before(&key, message.offset()) {
            self.report_deleted(&key, start, message.offset());
        }
        let payload = message.payload();
        context.gather(Incoming {
            key,
            offset: message.offset(),
            size: payload.map_or(0, <[u8]>::len),
            payload: payload
                .map(|p| p[..p.len().min(self.max_message_bytes.saturating_add(1))].to_vec()),
        })
    }

    /// The first message of `key`'s assignment came at `offset`, past `start` where reading
    /// was to begin: if Kafka's log now starts past `start`, what lay between was deleted
    /// unread. Said at error level, once per gap, and counted.
    fn report_deleted(&self, key: &PartitionKey, start: i64, offset: i64) {
        let stats = &self.consumer.context().stats;
        match self
            .consumer
            .fetch_watermarks(&key.topic, key.partition, WATERMARKS_WAIT)
        {
            Ok((log_start, _)) => {
                if let Some(deleted) = deleted_unread(start, log_start) {
                    let count = deleted.end - deleted.start;
                    tracing::error!(
                        partition = %key,
                        "messages deleted before they were read: Kafka no longer has offsets {}..{} ({count} offsets; the topic's retention or a deletion of records removed them), reading on from offset {offset}",
                        deleted.start,
                        deleted.end
                    );
                    IngestStats::add(&stats.deleted_unread, count as usize);
                }
            }
            Err(e) => tracing::error!(
                partition = %key,
                "reading was to start at offset {start} but began at {offset}, and the partition's log start offset, which tells whether Kafka deleted what lies between, could not be read: {e}"
            ),
        }
    }

    /// Tries the pending seeks; one whose assignment is over is dropped (the dispatcher
    /// forgets that assignment when it hears of the revocation, before any later one).
    fn seek_pending(&mut self) {
        if self.seeks.is_empty() {
            return;
        }
        let consumer = &self.consumer;
        let context = consumer.context();
        self.seeks.run(
            |key, epoch| context.assignments().is_current(key, epoch),
            |seek| {
                let Seek {
                    key,
                    offset,
                    generation,
                    ..
                } = seek;
                match consumer.seek(
                    &key.topic,
                    key.partition,
                    Offset::Offset(*offset),
                    SEEK_WAIT,
                ) {
                    Ok(()) => {
                        context.send(Event::Seeked {
                            key: key.clone(),
                            generation: *generation,
                        });
                        true
                    }
                    Err(e) => {
                        tracing::debug!(partition = %key, offset, "seek not done yet: {e}");
                        false
                    }
                }
            },
        );
    }

    fn commit(&self, offsets: &[(PartitionKey, i64)], mode: CommitMode) {
        let mut tpl = TopicPartitionList::new();
        for (key, next) in offsets {
            if let Err(e) =
                tpl.add_partition_offset(&key.topic, key.partition, Offset::Offset(*next))
            {
                tracing::debug!(partition = %key, "committing offset {next}: {e}");
            }
        }
        if let Err(e) = self.consumer.commit(&tpl, mode) {
            tracing::debug!("committing offsets to Kafka: {e}");
        }
    }

    /// Commits the latest offsets of the partitions still assigned and waits for Kafka, so
    /// lag tools see where this worker stopped (the asynchronous commits may still be on
    /// their way when the consumer closes).
    fn commit_final(&self) {
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let owned: Vec<(PartitionKey, i64)> = self
            .committed
            .iter()
            .filter(|(key, _)| {
                assignment
                    .find_partition(&key.topic, key.partition)
                    .is_some()
            })
            .map(|(key, next)| (key.clone(), *next))
            .collect();
        if !owned.is_empty() {
            self.commit(&owned, CommitMode::Sync);
        }
    }

    /// How long to wait for a request instead of polling: `None` while messages are taken.
    fn idle_wait(&self) -> Option<Duration> {
        if let Some(since) = self.holding {
            return Some(
                HOLD_BEFORE_PAUSE
                    .saturating_sub(since.elapsed())
                    .min(POLL_WAIT),
            );
        }
        self.consumer
            .context()
            .paused
            .load(Ordering::Relaxed)
            .then_some(POLL_WAIT)
    }

    /// Pauses the partitions once the dispatcher has been over its budget for
    /// [`HOLD_BEFORE_PAUSE`].
    fn pause_after_holding(&mut self) {
        if self
            .holding
            .is_some_and(|since| since.elapsed() >= HOLD_BEFORE_PAUSE)
        {
            tracing::debug!("still over the memory budget: pausing the partitions");
            IngestStats::add(&self.consumer.context().stats.partitions_paused, 1);
            self.pause();
        }
    }

    fn pause(&mut self) {
        self.holding = None;
        let consumer = &self.consumer;
        consumer.context().paused.store(true, Ordering::Relaxed);
        if let Err(e) = consumer.assignment().and_then(|a| consumer.pause(&a)) {
            tracing::warn!("pausing the partitions: {e}");
        }
    }

    fn carry_out(&mut self, request: Request) {
        let consumer = &self.consumer;
        match request {
            Request::Pause => {
                let paused = consumer.context().paused.load(Ordering::Relaxed);
                if !paused && self.holding.is_none() {
                    self.holding = Some(Instant::now());
                }
            }
            Request::Stop => {
                self.stopped = true;
                self.pause();
            }
            Request::Resume => {
                self.holding = None;
                if consumer.context().paused.swap(false, Ordering::Relaxed)
                    && let Err(e) = consumer.assignment().and_then(|a| consumer.resume(&a))
                {
                    tracing::warn!("resuming the partitions: {e}");
                }
            }
            Request::Seek {
                key,
                offset,
                epoch,
                generation,
            } => {
                self.seeks.push(Seek {
                    key,
                    offset,
                    epoch,
                    generation,
                });
                self.seek_pending();
            }
            Request::Commit(offsets) => {
                self.commit(&offsets, CommitMode::Async);
                self.committed.extend(offsets);
            }
            Request::Close => {}
        }
    }
}

impl IngestError {
    pub(super) fn kafka(context: impl Into<String>, source: KafkaError) -> IngestError {
        IngestError::Kafka {
            context: context.into(),
            source,
        }
    }
}
