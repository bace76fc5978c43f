//! `logstamp ingest`: one worker of the fleet, until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use logstamp::config::Sources;
use logstamp::id::IdGenerator;
use logstamp::ingest::{self, IngestError, IngestStats};

use super::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// This process's service ID [default: id.service_id].
    #[arg(long, value_name = "N")]
    service_id: Option<u32>,
}

pub fn run(args: IngestArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let sources = match args.service_id {
        Some(id) => sources.set("id.service_id", id),
        None => sources,
    };
    let settings = load_settings(&sources)?;
    let id = &settings.id;
    let generator = Arc::new(
        IdGenerator::new(id.layout, id.service_id)?.with_max_borrow_seconds(id.max_borrow_seconds),
    );
    let stats = Arc::new(IngestStats::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(ingest::run(
        &settings,
        generator,
        stats.clone(),
        termination(),
    ));
    tracing::info!(counts = ?stats.snapshot(), "ingest stopped");
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(IngestError::Config(reason)) => Err(UsageError(reason).into()),
        Err(e) => Err(e.into()),
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM, only SIGINT: {e}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
