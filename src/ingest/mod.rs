//! The ingest worker: consume a consumer group's partitions, map each message, stamp each batch
//! with one block of IDs and write it to MySQL exactly once (rows, dead letters and the
//! partition's next offset in one transaction).
//!
//! Three parts: the consumer thread (`consumer`: Kafka, rebalances), the dispatcher
//! (`dispatcher`: batching, writes, backpressure, shutdown) and the pure batching decisions
//! (`batcher`).

mod batcher;
mod consumer;
mod deleted;
mod dispatcher;
pub mod kafka;
pub mod local_cluster;
pub mod metrics;
mod partition_key;
pub mod sample;
mod seeks;
pub mod settings;

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::Utc;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::id::{IdError, IdGenerator};
use crate::kafka::CreateRedacted;
use crate::mysql::retry::retrying;
use crate::mysql::{self, DbError, MysqlUrl};
use crate::store::log_table::TableSpec;
use crate::store::partitions::{self, EnsureOutcome};
use crate::store::shard_plan::ShardName;
use crate::store::shards::{ShardHealth, ShardSet};
use crate::store::{Writer, migrate, rollup};
pub use batcher::BatchLimits;
use consumer::{IngestContext, PollerSettings};
use mysql_async::Conn;
use settings::WorkerSettings;

/// Events in flight from the consumer thread to the dispatcher (a batch of messages is one).
/// Small: the memory budget is enforced by pausing, and this only smooths the hand-over.
const EVENT_QUEUE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Settings librdkafka refused: a configuration error, like a bad setting of our own.
    #[error("{0}")]
    Config(String),
    #[error("{context}: {source}")]
    Kafka {
        context: String,
        #[source]
        source: KafkaError,
    },
    #[error(transparent)]
    Store(#[from] DbError),
    #[error("stamping IDs: {0}")]
    Id(#[from] IdError),
    /// Kafka returned a partition's messages from before the offset MySQL holds for it: the topic
    /// was recreated, or the offsets table belongs to another cluster.
    #[error(
        "partition {partition}: {source}; the topic was recreated or the group's offsets in MySQL belong to another cluster: check the ingest_offsets rows of this group"
    )]
    OffsetBehind {
        partition: String,
        source: batcher::OffsetBehind,
    },
    #[error(
        "shutdown took longer than ingest.shutdown_timeout ({timeout:?}): {unfinished} batches abandoned, not committed; their messages will be read again"
    )]
    ShutdownTimedOut {
        timeout: Duration,
        unfinished: usize,
    },
    #[error("{failed} of {sent} messages to {topic} were not delivered")]
    Undelivered {
        topic: String,
        failed: u64,
        sent: u64,
    },
    #[error("the Kafka consumer thread ended unexpectedly")]
    ConsumerGone,
    #[error("starting the Kafka consumer thread: {0}")]
    Thread(std::io::Error),
}

/// Running totals of one worker, readable while it runs.
#[derive(Debug, Default)]
pub struct IngestStats {
    consumed: AtomicU64,
    stored: AtomicU64,
    dead_lettered: AtomicU64,
    tombstones: AtomicU64,
    truncated: AtomicU64,
    batches: AtomicU64,
    dead_letters_published: AtomicU64,
    dead_letters_unpublished: AtomicU64,
    partitions: AtomicU64,
    budget_reached: AtomicU64,
    partitions_paused: AtomicU64,
    deleted_unread: AtomicU64,
    decode_nanos: AtomicU64,
    write_nanos: AtomicU64,
    /// Per assigned partition, from librdkafka's statistics; replaced whole at each report, so
    /// revoked partitions drop out.
    consumer_lag: std::sync::Mutex<Vec<PartitionLag>>,
    /// Which databases answer, as the writer finds them: each of `store.shards`, or the one of
    /// `mysql.url` without shards.
    shards: std::sync::OnceLock<Arc<ShardHealth>>,
}

/// How far a worker's partition is behind: its high watermark less the offset committed to
/// Kafka (which follows the MySQL commit).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub messages: u64,
}

/// A snapshot of [`IngestStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IngestCounts {
    /// Messages taken off Kafka and mapped.
    pub consumed: u64,
    /// Rows committed to the log table.
    pub stored: u64,
    /// Messages committed to the dead letters (unmappable, oversized, or refused by MySQL).
    pub dead_lettered: u64,
    /// Messages without payload, skipped.
    pub tombstones: u64,
    /// Values cut to their column's length (columns with `truncate`), in committed rows.
    pub truncated: u64,
    /// Batches committed.
    pub batches: u64,
    /// Dead letters also produced to `ingest.dead_letter_topic`.
    pub dead_letters_published: u64,
    /// Dead letters the topic did not take (they are in the table all the same).
    pub dead_letters_unpublished: u64,
    /// Partitions assigned to the worker now.
    pub partitions: u64,
    /// Times the messages held reached `ingest.max_buffered_bytes`, so the worker stopped
    /// taking messages until the writers had caught up.
    pub budget_reached: u64,
    /// Times that lasted long enough (a second) for the worker to pause its partitions in
    /// Kafka.
    pub partitions_paused: u64,
    /// Offsets Kafka deleted (its retention, or a deletion of records) before this worker
    /// read them: messages lost to logstamp.
    pub deleted_unread: u64,
    /// Time spent parsing and mapping messages (and adding them to their batches), in
    /// milliseconds.
    pub decode_ms: u64,
    /// Time batches spent being stamped and written (summed over concurrent writes), in
    /// milliseconds.
    pub write_ms: u64,
}

impl IngestStats {
    pub fn snapshot(&self) -> IngestCounts {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        IngestCounts {
            consumed: get(&self.consumed),
            stored: get(&self.stored),
            dead_lettered: get(&self.dead_lettered),
            tombstones: get(&self.tombstones),
            truncated: get(&self.truncated),
            batches: get(&self.batches),
            dead_letters_published: get(&self.dead_letters_published),
            dead_letters_unpublished: get(&self.dead_letters_unpublished),
            partitions: get(&self.partitions),
            budget_reached: get(&self.budget_reached),
            partitions_paused: get(&self.partitions_paused),
            deleted_unread: get(&self.deleted_unread),
            decode_ms: get(&self.decode_nanos) / 1_000_000,
            write_ms: get(&self.write_nanos) / 1_000_000,
        }
    }

    /// The consumer lag of each assigned partition at the last statistics report (every
    /// [`kafka::STATISTICS_INTERVAL_MS`]); partitions whose lag is not known yet are left out.
    pub fn consumer_lag(&self) -> Vec<PartitionLag> {
        self.consumer_lag
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Once the worker writes: each database written to (each shard, or the single database)
    /// with why it is failing (`None`: it answers). Empty before.
    pub fn shard_health(&self) -> Vec<(ShardName, Option<String>)> {
        self.shards.get().map(|h| h.snapshot()).unwrap_or_default()
    }

    fn set_consumer_lag(&self, lag: Vec<PartitionLag>) {
        *self
            .consumer_lag
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = lag;
    }

    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Checks the schema and brings the log table's partitions up to date, in the coordination
/// database and every shard, retrying a database that is not reachable yet for
/// `store.give_up_after`.
pub async fn prepare_database(settings: &WorkerSettings) -> Result<(), DbError> {
    let known = migrate::builtin()?;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    retrying(
        settings.store.retry_policy(),
        || "preparing the database".to_string(),
        async || {
            if set.sharded {
                on_database(settings, &set.coordination, "checking the schema", async |conn| {
                    migrate::check_up_to_date(conn, &known).await
                })
                .await?;
            }
            for (shard, url) in &set.shards {
                let what = "checking the schema and the partitions";
                let prepared = on_database(settings, url, what, async |conn| {
                    migrate::check_up_to_date(conn, &known).await?;
                    for plan in &settings.rollups {
                        rollup::ensure_table(conn, plan, false).await?;
                    }
                    ensure_partitions(conn, &settings.tables).await
                })
                .await;
                match prepared {
                    // One shard down pauses only its partitions: the worker starts, and their
                    // batches wait for it.
                    Err(e) if set.sharded && e.is_transient() => {
                        tracing::warn!(%shard, "the shard does not answer; starting without it: {e}")
                    }
                    other => other?,
                }
            }
            Ok(())
        },
    )
    .await
}

/// `work` on a connection of its own to `url`, all of it within `mysql.statement_timeout`:
/// past it the connection is dropped, and the error names `what` and the server.
async fn on_database<T>(
    settings: &WorkerSettings,
    url: &MysqlUrl,
    what: &str,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, DbError>,
) -> Result<T, DbError> {
    let bound = settings.mysql.bound_on(url);
    bound
        .wait(|| what.to_string(), mysql::with_conn(url, work))
        .await
}

/// `partitions ensure` for the log table and every fan-out table.
async fn ensure_partitions(conn: &mut Conn, specs: &[TableSpec]) -> Result<(), DbError> {
    for spec in specs {
        let outcome = partitions::ensure(conn, spec, Utc::now(), false).await?;
        log_maintenance(spec, &outcome);
    }
    Ok(())
}

fn log_maintenance(spec: &TableSpec, outcome: &EnsureOutcome) {
    let table = spec.table.as_str();
    match outcome {
        EnsureOutcome::Busy { lock } => {
            tracing::debug!(table, %lock, "partitions are being maintained by another process")
        }
        EnsureOutcome::Done(plan) if !plan.is_empty() => tracing::info!(
            table,
            added = plan.add.len(),
            dropped = plan.drop.len(),
            "partitions maintained"
        ),
        EnsureOutcome::Done(_) => {}
    }
}

/// Runs `partitions ensure` every `ingest.maintenance_interval`, each database's round within
/// `mysql.statement_timeout`; failures are logged and tried again next time (the table keeps
/// `ingest.ahead` partitions of slack), and ingestion goes on meanwhile.
async fn maintain_partitions(settings: WorkerSettings) {
    let mut every = tokio::time::interval(settings.ingest.maintenance_interval);
    every.tick().await;
    loop {
        every.tick().await;
        for (shard, url) in &ShardSet::new(&settings.mysql.url, &settings.store).shards {
            let outcome = on_database(&settings, url, "maintaining partitions", async |conn| {
                ensure_partitions(conn, &settings.tables).await
            })
            .await;
            if let Err(e) = outcome {
                tracing::warn!(%shard, "maintaining partitions (tried again later): {e}");
            }
        }
    }
}

/// `logstamp ingest`: runs one worker until `shutdown` resolves (then flushes and commits what
/// was read, within `ingest.shutdown_timeout`) or until it fails for good.
pub async fn run(
    settings: &WorkerSettings,
    generator: Arc<IdGenerator>,
    stats: Arc<IngestStats>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), IngestError> {
    tracing::info!(
        service_id = generator.service_id(),
        service_bits = generator.layout().service_bits(),
        "starting ingest"
    );
    prepare_database(settings).await?;
    let writer = Writer::new(
        &settings.mysql.url,
        &settings.store,
        &settings.rollups,
        generator.layout(),
    )?;
    // Set once, by the one run of this worker.
    let _ = stats.shards.set(writer.health());
    let dead_letter_topic =
        kafka::DeadLetterTopic::new(&settings.kafka, &settings.ingest.dead_letter_topic)?;

    let (events_in, events) = mpsc::channel(EVENT_QUEUE);
    let (requests, requests_out) = std::sync::mpsc::channel();
    let context = IngestContext::new(
        tokio::runtime::Handle::current(),
        events_in,
        writer.clone(),
        settings.kafka.group_id.clone(),
        stats.clone(),
    );
    let consumer: BaseConsumer<IngestContext> = kafka::consumer_config(&settings.kafka)
        .create_redacted_with_context(context)
        .map_err(kafka::client_error)?;
    let topics: Vec<&str> = settings.kafka.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|e| IngestError::kafka(format!("subscribing to {}", topics.join(",")), e))?;
    let poller = consumer::spawn_poller(
        consumer,
        requests_out,
        PollerSettings {
            max_message_bytes: settings.ingest.max_message_bytes,
            max_records_per_second: NonZeroU32::new(settings.ingest.max_records_per_second),
        },
    )
    .map_err(IngestError::Thread)?;
    let maintenance = tokio::spawn(maintain_partitions(settings.clone()));

    let result = dispatcher::Dispatcher::new(
        settings,
        writer.clone(),
        generator,
        stats,
        dead_letter_topic,
        requests.clone(),
    )
    .run(events, shutdown)
    .await;

    maintenance.abort();
    // The consumer thread leaves the group; it may wait on a last revocation, so off the
    // runtime's threads.
    let _ = requests.send(consumer::Request::Close);
    let _ = tokio::task::spawn_blocking(move || poller.join()).await;
    if let Err(e) = writer.close().await {
        tracing::debug!("closing the writer: {e}");
    }
    result
}
