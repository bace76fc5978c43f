//! Prometheus metrics of a worker. Totals the worker already keeps (`IngestStats`, the ID
//! generator's stats, the lease) are read at each scrape; only the histograms, which need every
//! observation, are recorded as they happen (through the `metrics` facade, a no-op until
//! [`Exporter::install`]).

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

use crate::id::IdGenerator;
use crate::ingest::IngestStats;
use crate::store::lease::LeaseStatus;

/// Histogram: seconds each committed batch took to stamp and write.
pub const BATCH_SECONDS: &str = "logstamp_ingest_batch_seconds";
/// Histogram: rows per committed batch (one insert transaction).
pub const BATCH_ROWS: &str = "logstamp_ingest_batch_rows";

const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const ROWS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 50000.0,
];

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("installing the metrics recorder: {0}")]
    Recorder(String),
    #[error(
        "telemetry.listen {address}: {reason}; choose another address with telemetry.listen (LOGSTAMP__TELEMETRY__LISTEN)"
    )]
    Listen { address: String, reason: String },
}

/// What a scrape reads from one running worker.
#[derive(Debug, Clone)]
pub struct WorkerView {
    pub stats: Arc<IngestStats>,
    pub generator: Arc<IdGenerator>,
    pub lease: watch::Receiver<LeaseStatus>,
}

/// The process's Prometheus recorder.
#[derive(Clone)]
pub struct Exporter {
    handle: PrometheusHandle,
}

impl Exporter {
    /// Installs the process-wide recorder: once per process (a second call is an error).
    pub fn install() -> Result<Exporter, TelemetryError> {
        let recorder_error =
            |e: metrics_exporter_prometheus::BuildError| TelemetryError::Recorder(e.to_string());
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(BATCH_SECONDS.into()), SECONDS_BUCKETS)
            .map_err(recorder_error)?
            .set_buckets_for_metric(Matcher::Full(BATCH_ROWS.into()), ROWS_BUCKETS)
            .map_err(recorder_error)?
            .install_recorder()
            .map_err(recorder_error)?;
        describe();
        // Histogram observations wait in buffers until drained; drain them even if nobody
        // scrapes, so memory stays flat.
        let upkeep = handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        Ok(Exporter { handle })
    }

    /// The Prometheus text exposition of everything, `worker`'s totals read now.
    pub fn render(&self, worker: &WorkerView) -> String {
        let counts = worker.stats.snapshot();
        let counter = |name: &'static str, value: u64| metrics::counter!(name).absolute(value);
        counter("logstamp_ingest_records_consumed_total", counts.consumed);
        counter("logstamp_ingest_records_stored_total", counts.stored);
        counter(
            "logstamp_ingest_records_dead_lettered_total",
            counts.dead_lettered,
        );
        counter("logstamp_ingest_tombstones_total", counts.tombstones);
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
        let ids = worker.generator.stats();
        counter("logstamp_id_borrowed_seconds_total", ids.borrowed_seconds);
        counter("logstamp_id_clock_back_events_total", ids.clock_back_events);
        counter("logstamp_id_clock_waits_total", ids.clock_waits);
        let held = *worker.lease.borrow() == LeaseStatus::Held;
        metrics::gauge!("logstamp_lease_held").set(if held { 1.0 } else { 0.0 });
        metrics::gauge!("logstamp_service_id").set(f64::from(worker.generator.service_id()));
        let mut text = self.handle.render();
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
}

/// A Prometheus label value, escaped.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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

#[cfg(test)]
mod tests {
    use super::label_value;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("logs.eu-1"), "logs.eu-1");
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
