//! Logging: `tracing` to stderr, filtered by `RUST_LOG` or `telemetry.log_level`, as text or JSON
//! (stdout is left to commands' own output); Prometheus metrics and health checks over HTTP on
//! `telemetry.listen` (`exporter`, `server`). Generic: what a command serves there is its own
//! [`server::Source`] (`ingest::metrics`, `relay::metrics`).

pub mod exporter;
pub mod server;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, TelemetrySettings};

/// Installs the global subscriber. Calling it again (tests, embedded use) keeps the first one.
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, not in files and log collectors.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
