//! `logstamp search rebuild`: recomputes the text filter of tables from their rows, for rows
//! written before the filter existed (a search reads those whole until then), or to check it.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use logstamp::config::{Settings, Sources};
use logstamp::id::IdRange;
use logstamp::mysql::MysqlUrl;
use logstamp::store::text_filter::TextFilterPlan;
use logstamp::store::text_search;

use super::db::{step, with_steps};
use super::output::Output;
use super::{TimeRangeArgs, UsageError, load_settings, rebuild};

#[derive(Debug, Subcommand)]
pub enum SearchCommand {
    /// Recompute the text filter (per minute of ID time, the n-grams of the text columns) of
    /// the rows stamped in --from..--to (default: the whole table, after which searches use
    /// the filter for every row), an hour per transaction, safely while workers write.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Only this table (store.table or one of store.tables); default: every table with a
    /// string or text column.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The range of stamp time (ID time) to rebuild; without --from or --since, the whole table.
    #[command(flatten)]
    time: TimeRangeArgs,
}

pub fn run(command: SearchCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        SearchCommand::Rebuild(args) => rebuild(args, sources),
    }
}

/// The filters named by --table, or all of them.
fn plans(settings: &Settings, table: Option<&str>) -> Result<Vec<TextFilterPlan>, UsageError> {
    let all = text_search::plans(&settings.store);
    rebuild::named(
        all,
        table,
        |p| p.table.as_str(),
        "a table with a string or text column",
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

/// Rebuilds one table's filter in the database at `url` over `asked` (default: its rows, and
/// then the filter covers the whole table).
fn rebuild_plan(
    settings: &Settings,
    plan: &TextFilterPlan,
    asked: Option<IdRange>,
    url: &MysqlUrl,
    out: &mut Output,
) -> anyhow::Result<()> {
    let layout = settings.id.layout;
    let bound = settings.mysql.bound_on(url);
    let report = with_steps(url, async |conn| {
        let (ids, whole) = match asked {
            Some(ids) => (ids, false),
            None => (
                bound
                    .wait(step, text_search::id_span(conn, &plan.table))
                    .await?
                    .unwrap_or(IdRange { start: 0, end: 0 }),
                true,
            ),
        };
        text_search::rebuild(
            conn,
            plan,
            &layout,
            (ids, whole),
            (settings.store.retry_policy(), &bound),
            |done, report| {
                tracing::info!(
                    table = %report.table,
                    blocks = report.blocks,
                    rows = report.rows,
                    "text filter rebuilt up to {}",
                    logstamp::time::format_utc(layout.decode(done).unix_seconds)
                );
            },
        )
        .await
    })?;
    out.json(&report).context("writing output")?;
    Ok(())
}
