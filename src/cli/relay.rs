//! `logstamp relay run | status | reset | verify | snapshot`.

use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::watch;

use logstamp::config::{Settings, Sources};
use logstamp::mysql::MysqlUrl;
use logstamp::relay::metrics::RelaySource;
use logstamp::relay::settings::TablePattern;
use logstamp::relay::snapshot::SnapshotStatus;
use logstamp::relay::status::{self, ApplyStatus, CaptureStatus};
use logstamp::relay::text_filter::RelayedTextFilters;
use logstamp::relay::verify::{self, Diverged, Event, Shown, ShownRow, Summary, VerifyOptions};
use logstamp::relay::{self, RelayContext, RelayError};
use logstamp::store::shards::ShardSet;
use logstamp::store::text_search;
use logstamp::telemetry::exporter::Exporter;
use logstamp::telemetry::server::{self, Source};

use super::UsageError;
use super::load_settings;
use super::output::{Format, Output, aligned, ignore_closed_pipe};

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// With store.shards: the shard whose relay this is, by its position in store.shards
    /// (from 0) or its name. Each shard runs a relay of its own; status and verify take every
    /// shard in turn without it.
    #[arg(long, global = true, value_name = "SHARD")]
    shard: Option<String>,
    #[command(subcommand)]
    command: RelayCommand,
}

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
    /// Compare the relayed tables here with each remote data centre's (relay.remotes entries
    /// with a url), chunk by chunk, while both keep writing: one JSON line per row that differs,
    /// per chunk that differed only while changes were in flight, and a summary per remote.
    /// Exit code 0 when equal, 1 when a row diverged, 2 when it could not compare.
    Verify(VerifyArgs),
    /// Copy a relayed table's existing rows to the other data centres, online: the running
    /// relay's capture reads it in primary-key chunks, without locks, while it is written, and
    /// publishes them in order with the live changes (see the README). Waits until it is done,
    /// with a progress bar at a terminal, then prints the snapshot's status as JSON.
    Snapshot(SnapshotArgs),
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The relayed table: schema.table.
    #[arg(long, value_name = "SCHEMA.TABLE")]
    table: String,
    /// Rows per chunk: each is one short SELECT on the source.
    #[arg(long, value_name = "N", default_value_t = relay::snapshot::DEFAULT_CHUNK_ROWS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    chunk_rows: u64,
    /// Return once the request is recorded, without waiting for the copy.
    #[arg(long)]
    no_wait: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Only this relayed table: schema.table, or schema.* for a schema's.
    #[arg(long, value_name = "T")]
    table: Option<String>,
    /// Rows per chunk: each is hashed by each server in one statement.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    chunk_rows: u64,
    /// Longest wait for the relay's lag to drain before a differing chunk is read again.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    lag_wait_seconds: u64,
    /// json (one object per line, as they are found) or table (at the end).
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
}

/// `relay verify` could not compare (exit code 2, as opposed to 1 for tables that differ).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CannotVerify(#[from] RelayError);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// json (one object per line) or table.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
}

pub fn run(args: RelayArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let shard = args.shard.as_deref();
    match args.command {
        RelayCommand::Run => run_relay(&settings, one_relay(&settings, shard)?),
        RelayCommand::Status(status) => show_status(status, every_relay(&settings, shard)?),
        RelayCommand::Reset => reset(one_relay(&settings, shard)?),
        RelayCommand::Verify(verify) => verify_tables(verify, every_relay(&settings, shard)?),
        RelayCommand::Snapshot(snapshot) => take_snapshot(snapshot, one_relay(&settings, shard)?),
    }
}

/// How often `relay snapshot` looks at the copy's progress.
const SNAPSHOT_POLL: Duration = Duration::from_millis(500);

fn take_snapshot(args: SnapshotArgs, context: RelayContext) -> anyhow::Result<ExitCode> {
    let (schema, table) = args
        .table
        .split_once('.')
        .filter(|(s, t)| !s.is_empty() && !t.is_empty() && !t.contains(['.', '*']))
        .ok_or_else(|| UsageError::new("--table", "give it as schema.table"))?;
    let done = runtime()?.block_on(async {
        relay::snapshot::request(&context, schema, table, args.chunk_rows).await?;
        let bar = if io::stderr().is_terminal() && !args.no_wait {
            ProgressBar::new(0).with_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/~{len} rows, {per_sec}, {eta} left",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            )
        } else {
            ProgressBar::hidden()
        };
        loop {
            let found = relay::snapshot::status(&context, Some((schema, table))).await?;
            let Some(now) = found.into_iter().next() else {
                return Err(RelayError::Refused(format!(
                    "the request for {schema}.{table} went away"
                )));
            };
            bar.set_length(now.estimated_rows.max(now.copied_rows + now.dropped_rows));
            bar.set_position(now.copied_rows + now.dropped_rows);
            bar.set_message(format!("{}: {}", now.table, now.state));
            if args.no_wait || now.state == "done" || now.state == "failed" {
                bar.finish_and_clear();
                return Ok(now);
            }
            tokio::time::sleep(SNAPSHOT_POLL).await;
        }
    })?;
    let mut out = Output::new();
    let written = out.json(&done);
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(if done.state == "failed" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(Serialize)]
struct ResetLine {
    action: &'static str,
    dc: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<usize>,
    epoch: u64,
    file: String,
    pos: u64,
    gtid: String,
}

fn reset(context: RelayContext) -> anyhow::Result<ExitCode> {
    let fresh = runtime()?.block_on(relay::resume::start_anew(&context))?;
    let mut out = Output::new();
    let written = out.json(&ResetLine {
        action: "stream_started_anew",
        dc: context.dc().to_string(),
        shard: context.shard,
        epoch: fresh.epoch,
        file: fresh.file,
        pos: fresh.pos,
        gtid: fresh.gtid_state.to_string(),
    });
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// Has jemalloc (the binary's allocator) give freed pages back to the kernel at once rather
/// than after its default 10 s: the applier frees each part's memory once it is applied, and
/// kept for 10 s those pages took the relay's peak to more than twice
/// `relay.apply_memory_bytes` in 3 of 5 runs of `tests/relay_sizes.rs` (up to 38 MB over
/// 16 MiB), against 20 to 26 MB at once in 5 of 5. The ingest worker keeps the default: it is
/// measured by its CPU per row, and it was measured with that default.
fn return_freed_memory_at_once() {
    const DECAYS: [&str; 2] = ["dirty_decay_ms", "muzzy_decay_ms"];
    // SAFETY (both writes): the decay times are ssize_t in jemalloc's mallctl namespace, and
    // each name ends in a NUL.
    let set = |name: String| unsafe { tikv_jemalloc_ctl::raw::write::<isize>(name.as_bytes(), 0) };
    // The default of arenas made from now on...
    for decay in DECAYS {
        if let Err(e) = set(format!("arenas.{decay}\0")) {
            tracing::warn!(setting = decay, error = %e, "the allocator kept its own setting");
        }
    }
    // ...and of those made already. One not made yet (jemalloc makes them as threads first
    // allocate) refuses, and takes the default above when it is made.
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for arena in 0..arenas {
        for decay in DECAYS {
            let _ = set(format!("arena.{arena}.{decay}\0"));
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn run_relay(settings: &Settings, context: RelayContext) -> anyhow::Result<ExitCode> {
    return_freed_memory_at_once();
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
pub(super) async fn wait_for_signal() {
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
    Snapshot(&'a SnapshotStatus),
}

/// An output line with the shard it is of, when the store is sharded.
#[derive(Serialize)]
struct OfShard<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<usize>,
    #[serde(flatten)]
    line: T,
}

/// What `relay status` shows of one relay.
struct RelayStatus {
    shard: Option<usize>,
    capture: CaptureStatus,
    appliers: Vec<ApplyStatus>,
    snapshots: Vec<SnapshotStatus>,
}

fn show_status(args: StatusArgs, relays: Vec<RelayContext>) -> anyhow::Result<ExitCode> {
    let now = chrono::Utc::now();
    let shown: Vec<RelayStatus> = runtime()?.block_on(async {
        let mut shown = Vec::with_capacity(relays.len());
        for context in &relays {
            shown.push(RelayStatus {
                shard: context.shard,
                capture: status::capture(context, now).await?,
                appliers: status::appliers(context, now).await?,
                snapshots: relay::snapshot::status(context, None).await?,
            });
        }
        Ok::<_, relay::RelayError>(shown)
    })?;
    let mut out = Output::new();
    let written = match args.format {
        Format::Json => shown.iter().try_for_each(|relay| {
            std::iter::once(StatusLine::Capture(&relay.capture))
                .chain(relay.appliers.iter().map(StatusLine::Apply))
                .chain(relay.snapshots.iter().map(StatusLine::Snapshot))
                .try_for_each(|line| {
                    out.json(&OfShard {
                        shard: relay.shard,
                        line,
                    })
                })
        }),
        Format::Table => {
            let sharded = shown.iter().any(|r| r.shard.is_some());
            let mut header = vec![
                "part",
                "dc",
                "position",
                "behind",
                "lag_seconds",
                "conflicts",
                "error",
            ];
            if sharded {
                header.insert(0, "shard");
            }
            let rows: Vec<Vec<String>> = shown
                .iter()
                .flat_map(|relay| {
                    status_rows(relay).into_iter().map(move |mut row| {
                        if let Some(shard) = relay.shard {
                            row.insert(0, shard.to_string());
                        }
                        row
                    })
                })
                .collect();
            aligned(&header, &rows)
                .iter()
                .try_for_each(|line| out.line(line))
        }
    };
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// One relay's rows of `relay status --format table`.
fn status_rows(relay: &RelayStatus) -> Vec<Vec<String>> {
    let shown = |v: Option<i64>| v.map_or("-".into(), |n| n.to_string());
    let capture = &relay.capture;
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
    for a in &relay.appliers {
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
    for s in &relay.snapshots {
        rows.push(vec![
            "snapshot".to_string(),
            s.table.clone(),
            format!("{} {} chunks", s.state, s.chunks),
            format!(
                "~{} rows",
                s.estimated_rows
                    .saturating_sub(s.copied_rows + s.dropped_rows)
            ),
            "-".into(),
            String::new(),
            s.last_error.clone().unwrap_or_default(),
        ]);
    }
    rows
}

fn verify_tables(args: VerifyArgs, relays: Vec<RelayContext>) -> anyhow::Result<ExitCode> {
    let only = args
        .table
        .as_deref()
        .map(TablePattern::parse)
        .transpose()
        .map_err(|e| UsageError::new("--table", e))?;
    let sharded = relays.iter().any(|r| r.shard.is_some());
    let Some(first) = relays.first() else {
        return Err(UsageError("store.shards: no shard to compare".into()).into());
    };
    let (remotes, unreachable): (Vec<_>, Vec<_>) = first
        .relay
        .remotes
        .iter()
        .partition(|r| relays.iter().all(|c| r.url_for(c.shard).is_some()));
    for remote in unreachable {
        let missing = if sharded {
            "a url in its shards for every shard here"
        } else {
            "no url"
        };
        tracing::warn!(
            dc = remote.dc,
            "relay.remotes {} has {missing}: not compared",
            remote.dc
        );
    }
    if remotes.is_empty() {
        return Err(UsageError(
            "relay.remotes: no entry has a url (with shards: shards), so there is nothing to \
             compare with"
                .into(),
        )
        .into());
    }
    let options = VerifyOptions {
        chunk_rows: args.chunk_rows,
        lag_wait: Duration::from_secs(args.lag_wait_seconds),
        only,
    };
    let mut report = Report::new(args.format, sharded);
    let diverged = runtime()?.block_on(async {
        let mut diverged = 0;
        for context in &relays {
            report.shard = context.shard;
            for remote in &remotes {
                let summary = verify::verify(context, remote, &options, |e| report.event(e))
                    .await
                    .map_err(CannotVerify)?;
                diverged += summary.diverged_rows;
                report.summary(&summary);
            }
        }
        Ok::<_, CannotVerify>(diverged)
    })?;
    report.finish().context("writing output")?;
    Ok(if diverged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `relay verify`'s output on stdout: JSON lines as they come, or a table at the end; progress
/// on stderr (a spinner at a terminal, log lines otherwise).
struct Report {
    format: Format,
    /// Whether lines name their shard (`shard`, set before each shard's comparison).
    sharded: bool,
    shard: Option<usize>,
    out: Output,
    bar: ProgressBar,
    /// The table's rows, for `--format table`.
    rows: Vec<Vec<String>>,
    written: io::Result<()>,
}

impl Report {
    /// Chunks between two progress log lines.
    const LOG_EVERY: u64 = 100;

    fn new(format: Format, sharded: bool) -> Report {
        let bar = if io::stderr().is_terminal() {
            ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            )
        } else {
            ProgressBar::hidden()
        };
        Report {
            format,
            sharded,
            shard: None,
            out: Output::new(),
            bar,
            rows: Vec::new(),
            written: Ok(()),
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Diverged(row) => self.emit(row, || {
                vec![
                    row.status.to_string(),
                    row.remote_dc.clone(),
                    row.table.clone(),
                    cells(&row.key),
                    row.missing_in.clone().unwrap_or_else(|| "-".into()),
                    differing_columns(row),
                ]
            }),
            Event::InFlight(chunk) => self.emit(chunk, || {
                vec![
                    chunk.status.to_string(),
                    chunk.remote_dc.clone(),
                    chunk.table.clone(),
                    format!("chunk {}", chunk.chunk),
                    "-".into(),
                    format!("{} rows differed", chunk.rows),
                ]
            }),
            Event::Checked {
                table,
                chunks,
                rows,
            } => {
                self.bar
                    .set_message(format!("{table}: {chunks} chunks, {rows} rows compared"));
                self.bar.tick();
                if chunks % Self::LOG_EVERY == 0 {
                    tracing::info!(table, chunks, rows, "verifying");
                }
            }
            Event::TableDone {
                table,
                chunks,
                rows,
            } => tracing::info!(table, chunks, rows, "verified"),
        }
    }

    fn summary(&mut self, summary: &Summary) {
        self.emit(summary, || {
            vec![
                summary.status.to_string(),
                summary.remote_dc.clone(),
                format!("{} tables", summary.tables),
                "-".into(),
                "-".into(),
                format!(
                    "{} chunks, {} rows, {} chunks in flight, {} rows diverged",
                    summary.chunks, summary.rows, summary.in_flight_chunks, summary.diverged_rows
                ),
            ]
        });
    }

    /// `value` as a JSON line, or its table row; after a failed write, nothing (the first
    /// failure is kept).
    fn emit(&mut self, value: &impl Serialize, row: impl FnOnce() -> Vec<String>) {
        match self.format {
            Format::Table => {
                let mut row = row();
                if let Some(shard) = self.shard {
                    row.insert(0, shard.to_string());
                }
                self.rows.push(row);
            }
            Format::Json if self.written.is_ok() => {
                let line = OfShard {
                    shard: self.shard,
                    line: value,
                };
                self.written = ignore_closed_pipe(self.out.json(&line));
            }
            Format::Json => {}
        }
    }

    fn finish(mut self) -> io::Result<()> {
        self.bar.finish_and_clear();
        self.written?;
        if self.format == Format::Table {
            let mut header = vec![
                "status",
                "remote_dc",
                "table",
                "key",
                "missing_in",
                "detail",
            ];
            if self.sharded {
                header.insert(0, "shard");
            }
            let lines = aligned(&header, &self.rows);
            ignore_closed_pipe(lines.iter().try_for_each(|line| self.out.line(line)))?;
        }
        self.out.finish()
    }
}

/// `column=value` pairs, NULL as NULL and bytes that are not UTF-8 as 0x hex.
fn cells(row: &ShownRow) -> String {
    let shown: Vec<String> = row
        .iter()
        .map(|(column, value)| match value {
            None => format!("{column}=NULL"),
            Some(Shown::Text(text)) => format!("{column}={text}"),
            Some(Shown::Hex { hex }) => format!("{column}=0x{hex}"),
        })
        .collect();
    shown.join(" ")
}

/// The columns whose values differ between the two images, or `-` when one side lacks the row.
fn differing_columns(row: &Diverged) -> String {
    match (&row.local, &row.remote) {
        (Some(here), Some(there)) => {
            let columns: Vec<&str> = here
                .iter()
                .filter(|(column, value)| there.get(*column) != Some(value))
                .map(|(column, _)| column.as_str())
                .collect();
            format!("columns {}", columns.join(", "))
        }
        _ => "-".into(),
    }
}

/// The relay a command works on: this data centre's, or with shards the one of `--shard`,
/// which each shard's relay must be given.
fn one_relay(settings: &Settings, shard: Option<&str>) -> Result<RelayContext, UsageError> {
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    match (set.sharded, shard) {
        (false, None) => Ok(relay_of(settings, None)),
        (true, None) => Err(UsageError::new(
            "--shard",
            format!(
                "store.shards lists {} shards, and each runs a relay of its own: give the \
                 shard's position (0 to {}) or name",
                set.shards.len(),
                set.shards.len() - 1
            ),
        )),
        (_, Some(text)) => {
            let index = shard_position(&set, text)?;
            Ok(relay_of(settings, Some((index, &set.shards[index].1))))
        }
    }
}

/// The relays `status` and `verify` look at: the one of `--shard`, else every shard's.
fn every_relay(settings: &Settings, shard: Option<&str>) -> Result<Vec<RelayContext>, UsageError> {
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    if shard.is_some() || !set.sharded {
        return one_relay(settings, shard).map(|context| vec![context]);
    }
    Ok(set
        .shards
        .iter()
        .enumerate()
        .map(|(index, (_, url))| relay_of(settings, Some((index, url))))
        .collect())
}

/// `--shard`'s position in `store.shards`.
fn shard_position(set: &ShardSet, text: &str) -> Result<usize, UsageError> {
    if !set.sharded {
        return Err(UsageError::new(
            "--shard",
            "store.shards is empty: this data centre has one database and one relay",
        ));
    }
    set.find(text).map_err(|e| UsageError::new("--shard", e))
}

/// The relay of these settings, or of shard `(position, database)` of them; its appliers keep
/// the text filters of the log tables they write into.
fn relay_of(settings: &Settings, shard: Option<(usize, &MysqlUrl)>) -> RelayContext {
    let (mysql, kafka, relay) = (
        settings.mysql.clone(),
        settings.kafka.clone(),
        settings.relay.clone(),
    );
    match shard {
        None => RelayContext::new(mysql, kafka, relay),
        Some((index, url)) => RelayContext::for_shard(mysql, kafka, relay, index, url.clone()),
    }
    .with_text_filters(RelayedTextFilters {
        plans: text_search::plans(&settings.store),
        layout: settings.id.layout,
    })
}
