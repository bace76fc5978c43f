//! `logstamp rollup rebuild`: recomputes a rollup over a time range from its raw table.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use logstamp::config::Sources;
use logstamp::store::rollup;
use logstamp::store::shards::ShardSet;
use logstamp::time::unix_seconds;

use super::TimeRangeArgs;
use super::db::with_steps;
use super::load_settings;
use super::output::Output;
use super::query::rollup_plan;

#[derive(Debug, Subcommand)]
pub enum RollupCommand {
    /// Recompute NAME's buckets in --from..--to (widened to whole buckets) from its source
    /// table, one day per transaction, safely while workers write; for a rollup added after its
    /// data, or to check one.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// The rollup, by name ([[rollups]] name).
    name: String,
    #[command(flatten)]
    time: TimeRangeArgs,
}

pub fn run(command: RollupCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        RollupCommand::Rebuild(args) => rebuild(args, sources),
    }
}

fn rebuild(args: RebuildArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let plan = rollup_plan(&settings, &args.name, "NAME")?;
    let (from, to) = args.time.parse()?;
    let (from, to) = rollup::widen_to_buckets(plan, unix_seconds(from), unix_seconds(to));
    // A bar for a person at a terminal; otherwise a log line per day.
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(to - from).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {percent}% eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_message(format!("rebuilding {}", plan.name));
    let layout = settings.id.layout;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    // Each shard's rollup counts the rows of that shard.
    for (name, url) in &set.shards {
        bar.set_position(0);
        let bound = settings.mysql.bound_on(url);
        let report = with_steps(url, async |conn| {
            rollup::rebuild(
                conn,
                plan,
                &layout,
                (from, to),
                (settings.store.retry_policy(), &bound),
                |done, report| {
                    bar.set_position(done - from);
                    tracing::info!(
                        rollup = %report.rollup,
                        rows = report.rows,
                        counted = report.counted,
                        "rebuilt up to {}",
                        rollup::format_time(done)
                    );
                },
            )
            .await
        })?;
        if set.sharded {
            out.database(&name, "shard").context("writing output")?;
        }
        out.json(&report).context("writing output")?;
    }
    bar.finish_and_clear();
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
