//! The process's Prometheus recorder. Totals a command already keeps (`IngestStats`,
//! `RelayStats`, the ID generator's stats, the lease) are read at each scrape by the command's
//! [`Source`](super::server::Source); only histograms, which need every observation, are
//! recorded as they happen (through the `metrics` facade, a no-op until [`Exporter::install`]).

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::{ingest, relay};

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
        // Only metrics that have a value are rendered, so describing every command's is
        // harmless.
        ingest::describe();
        relay::describe();
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

    /// The Prometheus text of everything recorded.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// A Prometheus label value, escaped.
pub(super) fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
