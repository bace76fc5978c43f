//! What `logstamp ingest` serves: the worker's totals, and ready while the service-ID lease is
//! held and MySQL and Kafka answer.

use std::sync::Arc;

use tokio::sync::watch;

use super::{IngestStats, kafka};
use crate::id::IdGenerator;
use crate::kafka::KafkaSettings;
use crate::mysql::MysqlUrl;
use crate::store::lease::LeaseStatus;
use crate::telemetry::exporter::{Exporter, Histogram, label_value};
use crate::telemetry::server::{KafkaProbe, Source, mysql_answers};

/// Histogram: seconds each committed batch took to stamp and write.
pub const BATCH_SECONDS: &str = "logstamp_ingest_batch_seconds";
/// Histogram: rows per committed batch (one insert transaction).
pub const BATCH_ROWS: &str = "logstamp_ingest_batch_rows";

/// What a scrape reads from one running worker.
#[derive(Debug, Clone)]
pub struct WorkerView {
    pub stats: Arc<IngestStats>,
    pub generator: Arc<IdGenerator>,
    pub lease: watch::Receiver<LeaseStatus>,
}

/// The worker's endpoints.
pub struct IngestSource {
    worker: WorkerView,
    mysql: MysqlUrl,
    kafka: KafkaProbe,
}

impl IngestSource {
    /// What `worker` shows, with probes of MySQL at `mysql` and of the brokers of `kafka`.
    pub fn new(worker: WorkerView, mysql: &MysqlUrl, kafka: &KafkaSettings) -> IngestSource {
        IngestSource {
            worker,
            mysql: mysql.clone(),
            kafka: KafkaProbe::new(&kafka::producer_config(kafka)),
        }
    }
}

impl Source for IngestSource {
    const HISTOGRAMS: &'static [Histogram] = &[
        Histogram {
            name: BATCH_SECONDS,
            buckets: &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        },
        Histogram {
            name: BATCH_ROWS,
            buckets: &[
                1.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 50000.0,
            ],
        },
    ];

    fn describe() {
        describe();
    }

    fn render(&self, exporter: &Exporter) -> String {
        let worker = &self.worker;
        let counts = worker.stats.snapshot();
        let counter = |name: &'static str, value: u64| metrics::counter!(name).absolute(value);
        counter("logstamp_ingest_records_consumed_total", counts.consumed);
        counter("logstamp_ingest_records_stored_total", counts.stored);
        counter(
            "logstamp_ingest_records_dead_lettered_total",
            counts.dead_lettered,
        );
        counter("logstamp_ingest_tombstones_total", counts.tombstones);
        counter("logstamp_ingest_values_truncated_total", counts.truncated);
        counter("logstamp_ingest_batches_total", counts.batches);
        counter(
            "logstamp_ingest_dead_letters_published_total",
            counts.dead_letters_published,
        );
        counter(
            "logstamp_ingest_dead_letters_unpublished_total",
            counts.dead_letters_unpublished,
        );
        metrics::gauge!("logstamp_ingest_partitions").set(counts.partitions as f64);
        counter(
            "logstamp_ingest_budget_reached_total",
            counts.budget_reached,
        );
        counter(
            "logstamp_ingest_partitions_paused_total",
            counts.partitions_paused,
        );
        counter(
            "logstamp_ingest_deleted_unread_total",
            counts.deleted_unread,
        );
        let ids = worker.generator.stats();
        counter("logstamp_id_borrowed_seconds_total", ids.borrowed_seconds);
        counter("logstamp_id_clock_back_events_total", ids.clock_back_events);
        counter("logstamp_id_clock_waits_total", ids.clock_waits);
        let held = *worker.lease.borrow() == LeaseStatus::Held;
        metrics::gauge!("logstamp_lease_held").set(if held { 1.0 } else { 0.0 });
        metrics::gauge!("logstamp_service_id").set(f64::from(worker.generator.service_id()));
        let mut text = exporter.render();
        // Rendered, like the lag below, so each series is the worker's current view.
        let shards = worker.stats.shard_health();
        if !shards.is_empty() {
            text.push_str(
                "# HELP logstamp_store_shard_up 1 while the database (each of store.shards, or mysql.url without shards) takes this worker's writes, 0 while they fail and its partitions wait.\n\
                 # TYPE logstamp_store_shard_up gauge\n",
            );
        }
        for (shard, failing) in &shards {
            text.push_str(&format!(
                "logstamp_store_shard_up{{shard=\"{}\"}} {}\n",
                label_value(&shard.0),
                u8::from(failing.is_none())
            ));
        }
        // Rendered here rather than recorded: a revoked partition's series must disappear, and
        // the recorder keeps every series it was given.
        text.push_str(
            "# HELP logstamp_ingest_consumer_lag Messages between a partition's high watermark and the offset committed to Kafka, per partition assigned to this worker (librdkafka statistics).\n\
             # TYPE logstamp_ingest_consumer_lag gauge\n",
        );
        for lag in worker.stats.consumer_lag() {
            text.push_str(&format!(
                "logstamp_ingest_consumer_lag{{topic=\"{}\",partition=\"{}\"}} {}\n",
                label_value(&lag.topic),
                lag.partition,
                lag.messages
            ));
        }
        text
    }

    async fn ready(&self) -> Result<(), String> {
        let lease = self.worker.lease.borrow().clone();
        if let LeaseStatus::Lost(reason) = lease {
            return Err(format!("the service-ID lease is lost: {reason}"));
        }
        mysql_answers(&self.mysql).await?;
        if let Some((shard, Some(reason))) = self
            .worker
            .stats
            .shard_health()
            .into_iter()
            .find(|(_, failing)| failing.is_some())
        {
            return Err(format!(
                "the database {shard} does not take writes (its partitions wait): {reason}"
            ));
        }
        self.kafka
            .answers()
            .await
            .map_err(|reason| format!("Kafka does not answer: {reason}"))
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "logstamp_ingest_records_consumed_total",
        "Messages taken off Kafka and mapped."
    );
    describe_counter!(
        "logstamp_ingest_records_stored_total",
        "Rows committed to the log table."
    );
    describe_counter!(
        "logstamp_ingest_records_dead_lettered_total",
        "Messages committed to the dead letters."
    );
    describe_counter!(
        "logstamp_ingest_tombstones_total",
        "Messages without payload, skipped."
    );
    describe_counter!(
        "logstamp_ingest_values_truncated_total",
        "Values cut to their column's length (columns with truncate), in committed rows."
    );
    describe_counter!("logstamp_ingest_batches_total", "Batches committed.");
    describe_counter!(
        "logstamp_ingest_dead_letters_published_total",
        "Dead letters also produced to ingest.dead_letter_topic."
    );
    describe_counter!(
        "logstamp_ingest_dead_letters_unpublished_total",
        "Dead letters the dead-letter topic did not take (they are in the table)."
    );
    describe_gauge!(
        "logstamp_ingest_partitions",
        "Partitions assigned to this worker."
    );
    describe_counter!(
        "logstamp_ingest_deleted_unread_total",
        "Offsets Kafka deleted (retention, or a deletion of records) before this worker read them: messages lost."
    );
    describe_counter!(
        "logstamp_ingest_budget_reached_total",
        "Times the messages held reached ingest.max_buffered_bytes and the worker stopped taking messages until the writers caught up."
    );
    describe_counter!(
        "logstamp_ingest_partitions_paused_total",
        "Times the worker stayed over ingest.max_buffered_bytes for a second and paused its partitions in Kafka (the writers wait, for a database away or too slow)."
    );
    describe_histogram!(
        BATCH_SECONDS,
        metrics::Unit::Seconds,
        "Time a committed batch took to stamp and write."
    );
    describe_histogram!(BATCH_ROWS, "Rows per committed batch (one transaction).");
    describe_counter!(
        "logstamp_id_borrowed_seconds_total",
        "Seconds IDs moved ahead of the clock because a second's counter ran out."
    );
    describe_counter!(
        "logstamp_id_clock_back_events_total",
        "Times the clock was seen to step backwards."
    );
    describe_counter!(
        "logstamp_id_clock_waits_total",
        "Times stamping waited for the clock because borrowing reached its bound."
    );
    describe_gauge!(
        "logstamp_lease_held",
        "1 while this process holds its service-ID lease."
    );
    describe_gauge!("logstamp_service_id", "This process's service ID.");
}
