//! `logstamp relay run | status | reset`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use tokio::sync::watch;

use logstamp::config::{Settings, Sources};
use logstamp::relay::metrics::RelaySource;
use logstamp::relay::status::{self, ApplyStatus, CaptureStatus};
use logstamp::relay::{self, RelayContext};
use logstamp::telemetry::exporter::Exporter;
use logstamp::telemetry::server::{self, Source};

use super::load_settings;
use super::output::{Format, Output, aligned, ignore_closed_pipe};

#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Run this data centre's capture and the appliers of relay.remotes until SIGINT or SIGTERM.
    Run,
    /// Capture's position and each applier's offset, and how far behind they are.
    Status(StatusArgs),
    /// Start this data centre's stream anew: capture relays what is written from now on, in a
    /// new epoch that every applier takes up. Part of the procedure after capture lost its place
    /// (RESET MASTER, a purged binlog, a failover to a server that lacks relayed transactions);
    /// see the README. Refused while a relay captures here.
    Reset,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// json (one object per line) or table.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
}

pub fn run(command: RelayCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        RelayCommand::Run => run_relay(sources),
        RelayCommand::Status(args) => show_status(args, sources),
        RelayCommand::Reset => reset(sources),
    }
}

#[derive(Serialize)]
struct ResetLine {
    action: &'static str,
    dc: String,
    epoch: u64,
    file: String,
    pos: u64,
    gtid: String,
}

fn reset(sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let context = relay_context(&settings);
    let fresh = runtime()?.block_on(relay::resume::start_anew(&context))?;
    let mut out = Output::new();
    let written = out.json(&ResetLine {
        action: "stream_started_anew",
        dc: context.dc().to_string(),
        epoch: fresh.epoch,
        file: fresh.file,
        pos: fresh.pos,
        gtid: fresh.gtid_state.to_string(),
    });
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn run_relay(sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let context = relay_context(&settings);
    runtime()?.block_on(async {
        let (stop, shutdown) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("stopping the relay");
            let _ = stop.send(true);
        });
        // The address first: one in use is a mistake to report before anything starts.
        let listener = server::bind(settings.telemetry.listen).await?;
        let source = RelaySource::new(&context);
        let telemetry = server::serve(
            listener,
            Exporter::install(RelaySource::HISTOGRAMS)?,
            source,
        );
        let result = relay::run(context, shutdown).await;
        telemetry.abort();
        result.map_err(anyhow::Error::from)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM; if signals cannot be watched, never (the process is then stopped by
/// a kill).
async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

#[derive(Serialize)]
#[serde(tag = "part", rename_all = "snake_case")]
enum StatusLine<'a> {
    Capture(&'a CaptureStatus),
    Apply(&'a ApplyStatus),
}

fn show_status(args: StatusArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let context = relay_context(&settings);
    let now = chrono::Utc::now();
    let (capture, appliers) = runtime()?.block_on(async {
        let capture = status::capture(&context, now).await?;
        let appliers = status::appliers(&context, now).await?;
        Ok::<_, relay::RelayError>((capture, appliers))
    })?;
    let mut out = Output::new();
    let written = match args.format {
        Format::Json => std::iter::once(StatusLine::Capture(&capture))
            .chain(appliers.iter().map(StatusLine::Apply))
            .try_for_each(|line| out.json(&line)),
        Format::Table => {
            let shown = |v: Option<i64>| v.map_or("-".into(), |n| n.to_string());
            let mut rows = vec![vec![
                "capture".to_string(),
                capture.dc.clone(),
                capture
                    .checkpoint
                    .as_ref()
                    .map_or("-".into(), |c| format!("{}:{}", c.file, c.pos)),
                capture
                    .behind_transactions
                    .map_or("-".into(), |n| format!("{n} transactions")),
                shown(capture.lag_seconds),
                String::new(),
                String::new(),
            ]];
            for a in &appliers {
                rows.push(vec![
                    "apply".to_string(),
                    a.source_dc.clone(),
                    format!("offset {}", a.next_offset),
                    a.behind_messages
                        .map_or("-".into(), |n| format!("{n} messages")),
                    shown(a.lag_seconds),
                    a.conflicts.to_string(),
                    a.last_error.clone().unwrap_or_default(),
                ]);
            }
            aligned(
                &[
                    "part",
                    "dc",
                    "position",
                    "behind",
                    "lag_seconds",
                    "conflicts",
                    "error",
                ],
                &rows,
            )
            .iter()
            .try_for_each(|line| out.line(line))
        }
    };
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// The relay of these settings: the sections it reads.
pub(crate) fn relay_context(settings: &Settings) -> RelayContext {
    RelayContext::new(
        settings.mysql.clone(),
        settings.kafka.clone(),
        settings.relay.clone(),
    )
}
