//! `logstamp zonemap rebuild`: recomputes the zone map of tables with an event time from their
//! rows, for rows written before `event_time` was set, or to check it.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use logstamp::config::{Settings, Sources};
use logstamp::id::IdRange;
use logstamp::mysql::MysqlUrl;
use logstamp::store::zone_map;
use logstamp::store::zone_plan::ZonePlan;

use super::db::{step, with_steps};
use super::output::Output;
use super::{TimeRangeArgs, UsageError, load_settings, rebuild};

#[derive(Debug, Subcommand)]
pub enum ZonemapCommand {
    /// Recompute the zone map (per minute of ID time, the least and greatest event time) of
    /// the rows stamped in --from..--to (default: the whole table), one day per transaction,
    /// safely while workers write.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Only this table (store.table or one of store.tables); default: every table with an
    /// event time.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The range of stamp time (ID time) to rebuild; without --from or --since, the whole table.
    #[command(flatten)]
    time: TimeRangeArgs,
}

pub fn run(command: ZonemapCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        ZonemapCommand::Rebuild(args) => rebuild(args, sources),
    }
}

/// The zone plans named by --table, or all of them.
fn plans(settings: &Settings, table: Option<&str>) -> Result<Vec<ZonePlan>, UsageError> {
    let all = settings.store.zone_plans();
    if all.is_empty() {
        return Err(UsageError::new(
            "store.event_time",
            "no table has an event time: set store.event_time (or event_time of a \
             [[store.tables]])",
        ));
    }
    rebuild::named(
        all,
        table,
        |p| p.table.as_str(),
        "a table with an event time",
    )
}

fn rebuild(args: RebuildArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let plans = plans(&settings, args.table.as_deref())?;
    let asked = rebuild::asked_ids(&args.time, &settings.id.layout)?;
    rebuild::on_every_shard(&settings, |url, out| {
        for plan in &plans {
            rebuild_plan(&settings, plan, asked, url, out)?;
        }
        Ok(())
    })
}

/// Rebuilds one table's zone map in the database at `url` over `asked` (default: its rows).
fn rebuild_plan(
    settings: &Settings,
    plan: &ZonePlan,
    asked: Option<IdRange>,
    url: &MysqlUrl,
    out: &mut Output,
) -> anyhow::Result<()> {
    let layout = settings.id.layout;
    let bound = settings.mysql.bound_on(url);
    let report = with_steps(url, async |conn| {
        let ids = match asked {
            Some(ids) => ids,
            None => bound
                .wait(step, zone_map::id_span(conn, &plan.table))
                .await?
                .unwrap_or(IdRange { start: 0, end: 0 }),
        };
        let bar = progress_bar(ids, plan);
        let report = zone_map::rebuild(
            conn,
            plan,
            &layout,
            ids,
            (settings.store.retry_policy(), &bound),
            |done, report| {
                bar.set_position(((done.saturating_sub(ids.start)) >> 32).min(bar_len(ids)));
                tracing::info!(
                    table = %report.table,
                    zones = report.zones,
                    counted = report.counted,
                    "zone map rebuilt up to {}",
                    logstamp::time::format_utc(layout.decode(done).unix_seconds)
                );
            },
        )
        .await;
        bar.finish_and_clear();
        report
    })?;
    out.json(&report).context("writing output")?;
    Ok(())
}

/// Seconds of ID time in the range: the bar's length.
fn bar_len(ids: IdRange) -> u64 {
    ids.end.saturating_sub(ids.start) >> 32
}

/// A bar for a person at a terminal; otherwise a log line per day.
fn progress_bar(ids: IdRange, plan: &ZonePlan) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(bar_len(ids)).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {percent}% eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_message(format!(
        "rebuilding the zone map of {}",
        plan.table.as_str()
    ));
    bar
}
