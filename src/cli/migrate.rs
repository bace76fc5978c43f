//! `logstamp migrate`: create the database, apply migrations, create or check the log table.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::mysql;
use logstamp::store::migrate;
use logstamp::store::shard_plan::ShardName;
use logstamp::store::shards::ShardSet;

use super::db::{block_on, now_or, with_conn};
use super::load_settings;
use super::output::Output;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Accept a change of id.service_bits for a table created with another number (stop every
    /// writer first: IDs of both layouts would share the table).
    #[arg(long)]
    force: bool,
    /// Act as if the time were TIME (for tests).
    #[arg(long, hide = true, value_name = "TIME")]
    now: Option<String>,
}

#[derive(Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
enum Line<'a> {
    MigrationApplied { version: u32, name: &'a str },
    MigrationsUpToDate { schema_version: u32 },
}

pub fn run(args: MigrateArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let now = now_or(args.now.as_deref())?;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let known = migrate::builtin()?;
    let mut out = Output::new();
    if set.sharded {
        // The coordination database keeps leases and assignments: the migrations alone.
        let url = &set.coordination;
        block_on(mysql::create_database(url))??;
        let applied = with_conn(&settings.mysql, url, async |conn| {
            migrate::apply_locked(conn, &known).await
        })?;
        out.database(&ShardName::of(url), "coordination")
            .context("writing output")?;
        print_applied(&mut out, &applied, &known)?;
    }
    for (name, url) in &set.shards {
        block_on(mysql::create_database(url))??;
        let full = with_conn(&settings.mysql, url, async |conn| {
            migrate::run_all(
                conn,
                &known,
                &settings.log_table(),
                &settings.fanout_tables(),
                &settings.rollup_plans,
                now,
                args.force,
            )
            .await
        })?;
        let migrate::FullReport {
            report,
            tables,
            rollups,
        } = full;
        if set.sharded {
            out.database(&name, "shard").context("writing output")?;
        }
        print_applied(&mut out, &report.applied, &known)?;
        out.json(&report.table).context("writing output")?;
        for table in &tables {
            out.json(table).context("writing output")?;
        }
        for rollup in &rollups {
            out.json(rollup).context("writing output")?;
        }
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// The migrations a database got, or that it was up to date.
fn print_applied(
    out: &mut Output,
    applied: &[migrate::Applied],
    known: &[migrate::Migration],
) -> anyhow::Result<()> {
    for m in applied {
        out.json(&Line::MigrationApplied {
            version: m.version,
            name: &m.name,
        })
        .context("writing output")?;
    }
    if applied.is_empty() {
        out.json(&Line::MigrationsUpToDate {
            schema_version: known.last().map_or(0, |m| m.version),
        })
        .context("writing output")?;
    }
    Ok(())
}
