//! `logstamp ingest`: one worker of the fleet, until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Args;

use logstamp::config::Sources;
use logstamp::ingest::metrics::{IngestSource, WorkerView};
use logstamp::ingest::{self, IngestError, IngestStats};
use logstamp::store::lease::HeldLease;
use logstamp::telemetry::exporter::Exporter;
use logstamp::telemetry::server::{self, Source};

use super::output::Output;
use super::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// This process's service ID, or auto [default: id.service_id].
    #[arg(long, value_name = "N|auto")]
    service_id: Option<String>,
}

pub fn run(args: IngestArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let sources = match args.service_id {
        Some(id) => sources.set("id.service_id", id),
        None => sources,
    };
    let settings = load_settings(&sources)?;
    tracing::info!(
        settings = %serde_json::to_string(&settings).unwrap_or_default(),
        "settings loaded"
    );
    let stats = Arc::new(IngestStats::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let stop = termination()?;
        // The worker stamps only under a lease of its service ID; losing it stops the worker
        // at once, without flushing (stamping is refused from then on).
        // The address first: one in use is a mistake to report before anything starts.
        let listener = server::bind(settings.telemetry.listen).await?;
        let lease = HeldLease::acquire(&settings.mysql.url, &settings.id).await?;
        let address = server::advertised(listener.local_addr()?, &lease.holder().host);
        if let Err(e) = lease.advertise(&address).await {
            tracing::warn!("recording the telemetry address {address} in the lease (leases list will not show it): {e}");
        }
        let view = WorkerView {
            stats: stats.clone(),
            generator: lease.generator().clone(),
            lease: lease.watch(),
        };
        let source = IngestSource::new(view, &settings.mysql.url, &settings.kafka);
        let telemetry = server::serve(listener, Exporter::install(IngestSource::HISTOGRAMS)?, source);
        let worker_settings = settings.worker();
        let worker = ingest::run(
            &worker_settings,
            lease.generator().clone(),
            stats.clone(),
            stop,
        );
        let result = tokio::select! {
            result = worker => result,
            reason = lease.lost() => {
                return Err(anyhow!(
                    "the lease of service ID {} was lost ({reason}); stopped without stamping further",
                    lease.service_id()
                ));
            }
        };
        telemetry.abort();
        if let Err(e) = lease.release().await {
            tracing::warn!("releasing the service-ID lease (it expires by itself): {e}");
        }
        Ok(result)
    });
    // The totals on stdout, one JSON line, for scripts and the ingest benchmark.
    let mut out = Output::new();
    out.json(&serde_json::json!({ "stopped": stats.snapshot() }))?;
    out.finish()?;
    match result? {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(IngestError::Config(reason)) => Err(UsageError(reason).into()),
        Err(e) => Err(e.into()),
    }
}

/// Watches SIGTERM and SIGINT (Ctrl-C) from now on and resolves on the first. Registering at
/// once, before the slow start-up work, means a signal during start-up is a clean stop too,
/// not the default action (death).
pub(super) fn termination() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
