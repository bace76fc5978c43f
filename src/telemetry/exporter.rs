//! The process's Prometheus recorder. Totals a command already keeps are read at each scrape by
//! the command's [`Source`](super::server::Source); only histograms, which need every observation, are recorded as they
//! happen (through the `metrics` facade, a no-op until [`Exporter::install`]).

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// A histogram a command records, with its bucket bounds.
pub struct Histogram {
    pub name: &'static str,
    pub buckets: &'static [f64],
}

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
    /// Installs the process-wide recorder, with the buckets of the command's histograms: once
    /// per process (a second call is an error).
    pub fn install(histograms: &[Histogram]) -> Result<Exporter, TelemetryError> {
        let recorder_error =
            |e: metrics_exporter_prometheus::BuildError| TelemetryError::Recorder(e.to_string());
        let mut builder = PrometheusBuilder::new();
        for histogram in histograms {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(histogram.name.into()), histogram.buckets)
                .map_err(recorder_error)?;
        }
        let handle = builder.install_recorder().map_err(recorder_error)?;
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
pub fn label_value(text: &str) -> String {
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
