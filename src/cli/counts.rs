//! `logstamp counts rebuild` and `logstamp query --count`: the per-minute line counts every
//! log table keeps (see `logstamp::store::line_count_plan`), recomputed from a table's rows or
//! read back.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use logstamp::config::{Settings, Sources};
use logstamp::store::line_count_plan::{self, CountPlan, MINUTE};
use logstamp::store::line_counts::{self, Time};
use logstamp::store::log_table::TableSpec;
use logstamp::store::shards::ShardSet;
use logstamp::time::{format_utc, unix_seconds};

use super::db::{step, with_conn, with_steps};
use super::output::{Format, Output, aligned};
use super::{TimeRangeArgs, UsageError, load_settings, rebuild};

#[derive(Debug, Subcommand)]
pub enum CountsCommand {
    /// Recompute the line counts (per minute of ID time, service, minute of event time and
    /// level) of the lines stamped in --from..--to (default: the whole table) from the rows,
    /// one day per transaction, safely while workers write: for lines written before the
    /// counts existed, or to check them.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Only this table (store.table or one of store.tables); default: every table.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The range of stamp time (ID time) to rebuild; without --from or --since, the whole table.
    #[command(flatten)]
    time: TimeRangeArgs,
}

pub fn run(command: CountsCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        CountsCommand::Rebuild(args) => rebuild(args, sources),
    }
}

/// A table's count plan with its columns' names.
fn plans(
    settings: &Settings,
    table: Option<&str>,
) -> Result<Vec<(CountPlan, Vec<String>)>, UsageError> {
    let specs = settings.tables();
    let all: Vec<(CountPlan, Vec<String>)> = line_count_plan::plans(&settings.store)
        .into_iter()
        .zip(&specs)
        .map(|(plan, spec)| (plan, spec.columns.iter().map(|c| c.name.clone()).collect()))
        .collect();
    rebuild::named(
        all,
        table,
        |(p, _)| p.table.as_str(),
        "a table of the settings",
    )
}

fn rebuild(args: RebuildArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let plans = plans(&settings, args.table.as_deref())?;
    let asked = match args.time.parse_open()? {
        (Some(from), to) => Some((unix_seconds(from), unix_seconds(to))),
        (None, _) => None,
    };
    let layout = settings.id.layout;
    // Each shard counts its own lines.
    rebuild::on_every_shard(&settings, |url, out| {
        for (plan, columns) in &plans {
            let bound = settings.mysql.bound_on(url);
            let report = with_steps(url, async |conn| {
                let range = match asked {
                    Some(range) => range,
                    None => bound
                        .wait(step, line_counts::span(conn, &plan.table, &layout))
                        .await?
                        .unwrap_or((0, 0)),
                };
                let bar = progress_bar(range, plan);
                let report = line_counts::rebuild(
                    conn,
                    (plan, columns),
                    &layout,
                    range,
                    (settings.store.retry_policy(), &bound),
                    |done, report| {
                        bar.set_position(done.saturating_sub(range.0));
                        tracing::info!(
                            table = %report.table,
                            rows = report.rows,
                            counted = report.counted,
                            "line counts rebuilt up to {}",
                            format_utc(done)
                        );
                    },
                )
                .await;
                bar.finish_and_clear();
                report
            })?;
            out.json(&report).context("writing output")?;
        }
        Ok(())
    })
}

/// A bar for a person at a terminal; otherwise a log line per day.
fn progress_bar((from, to): (u64, u64), plan: &CountPlan) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(to.saturating_sub(from)).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {percent}% eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_message(format!(
        "rebuilding the line counts of {}",
        plan.table.as_str()
    ));
    bar
}

/// One line of `query --count`.
#[derive(Debug, Serialize)]
struct CountLine {
    start: String,
    level: String,
    n: u64,
}

/// `query --count`: the lines of `spec` per `interval` seconds and level over `[from, to)`
/// widened to whole minutes, by ID or event time, summed from the line counts of every shard.
pub fn print(
    settings: &Settings,
    spec: &TableSpec,
    time: Time,
    interval: u64,
    (from, to): (u64, u64),
    format: Format,
) -> anyhow::Result<ExitCode> {
    if interval == 0 || !interval.is_multiple_of(MINUTE) {
        return Err(UsageError::new(
            "--interval",
            "counts are kept per minute: give a multiple of 60",
        )
        .into());
    }
    if time == Time::Event && spec.event_time.is_none() {
        return Err(UsageError::new(
            "--by event",
            format!(
                "table {} has no event time: set its event_time",
                spec.table.as_str()
            ),
        )
        .into());
    }
    let range = (
        line_count_plan::minute_of(from),
        to.div_ceil(MINUTE) * MINUTE,
    );
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut total: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for (_, url) in &set.shards {
        let counts = with_conn(&settings.mysql, url, async |conn| {
            line_counts::histogram(conn, &spec.table, time, &[], interval, range).await
        })?;
        for c in counts {
            *total.entry((c.start, c.key)).or_default() += c.n;
        }
    }
    let lines: Vec<CountLine> = total
        .into_iter()
        .map(|((start, level), n)| CountLine {
            start: format_utc(start),
            level,
            n,
        })
        .collect();
    let mut out = Output::new();
    match format {
        Format::Json => {
            for line in &lines {
                out.json(line).context("writing output")?;
            }
        }
        Format::Table => {
            let rows: Vec<Vec<String>> = lines
                .iter()
                .map(|l| vec![l.start.clone(), l.level.clone(), l.n.to_string()])
                .collect();
            for line in aligned(&["start", "level", "n"], &rows) {
                out.line(&line).context("writing output")?;
            }
        }
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
