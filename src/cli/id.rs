//! `logstamp id gen | decode | range`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::id::{Clock, IdGenerator};
use logstamp::store::lease::HeldLease;
use logstamp::time::{ceil_seconds, floor_seconds, format_utc};

use super::db::block_on;
use super::output::{Output, ignore_closed_pipe};
use super::{TimeRangeArgs, UsageError, load_settings};

#[derive(Debug, Subcommand)]
pub enum IdCommand {
    /// Print new IDs, one JSON object per line.
    Gen(GenArgs),
    /// Show the time, service ID and counter inside IDs.
    Decode(DecodeArgs),
    /// The half-open ID range of a time range, and its SQL predicate.
    Range(RangeArgs),
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// How many IDs.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Service ID to stamp with (overrides id.service_id).
    #[arg(long, value_name = "S")]
    service_id: Option<u32>,
    /// Stamp without leasing the service ID in MySQL (offline use). Nothing then stops a live
    /// process with the same service ID, or an earlier run with a clock ahead, from issuing the
    /// same IDs.
    #[arg(long)]
    no_lease: bool,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// IDs, as unsigned 64-bit decimal numbers.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<u64>,
}

#[derive(Debug, Args)]
pub struct RangeArgs {
    #[command(flatten)]
    time: TimeRangeArgs,
    /// Print only the SQL predicate.
    #[arg(long)]
    sql: bool,
}

pub fn run(command: IdCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        IdCommand::Gen(args) => gen_ids(args, sources),
        IdCommand::Decode(args) => decode(args, sources),
        IdCommand::Range(args) => range(args, sources),
    }
}

#[derive(Serialize)]
struct Generated {
    id: u64,
}

/// Leases the service ID (unless `--no-lease`) and prints the IDs. Printing runs on a thread of
/// its own so the lease's renewal keeps running on the runtime meanwhile.
fn gen_ids(args: GenArgs, mut sources: Sources) -> anyhow::Result<ExitCode> {
    if let Some(service_id) = args.service_id {
        sources = sources.set("id.service_id", service_id);
    }
    let settings = load_settings(&sources)?;
    if args.no_lease {
        let service_id = settings.id.service_id.fixed().ok_or_else(|| {
            UsageError::new(
                "--no-lease",
                "id.service_id is \"auto\": give a service ID with --service-id",
            )
        })?;
        let generator = IdGenerator::new(settings.id.layout, service_id)?
            .with_max_borrow_seconds(settings.id.max_borrow_seconds);
        print_ids(&generator, args.count)?;
        return Ok(ExitCode::SUCCESS);
    }
    block_on(async {
        let lease = HeldLease::acquire(&settings.mysql.url, &settings.id).await?;
        let generator = std::sync::Arc::clone(lease.generator());
        let printed = tokio::task::spawn_blocking(move || print_ids(&generator, args.count)).await;
        // Released whatever happened, so the mark is left at the last second printed.
        lease.release().await?;
        printed.context("printing IDs")?
    })??;
    Ok(ExitCode::SUCCESS)
}

fn print_ids<C: Clock>(generator: &IdGenerator<C>, count: u64) -> anyhow::Result<()> {
    let mut out = Output::new();
    let mut remaining = count;
    while remaining > 0 {
        let block = generator.next_block(u32::try_from(remaining).unwrap_or(u32::MAX))?;
        for id in block {
            if let Err(e) = out.json(&Generated { id }) {
                return ignore_closed_pipe(Err(e)).context("writing IDs");
            }
        }
        remaining -= u64::from(block.len());
    }
    out.finish().context("writing IDs")
}

#[derive(Serialize)]
struct DecodedId {
    id: u64,
    unix_seconds: u64,
    time: String,
    service_id: u32,
    counter: u32,
}

fn decode(args: DecodeArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let layout = load_settings(&sources)?.id.layout;
    let mut out = Output::new();
    for id in args.ids {
        let d = layout.decode(id);
        let written = out.json(&DecodedId {
            id,
            unix_seconds: d.unix_seconds,
            time: format_utc(d.unix_seconds),
            service_id: d.service_id,
            counter: d.counter,
        });
        if let Err(e) = written {
            ignore_closed_pipe(Err(e)).context("writing output")?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct RangeOutput {
    from: String,
    to: String,
    start_id: u64,
    end_id: u64,
    sql: String,
}

fn range(args: RangeArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let layout = load_settings(&sources)?.id.layout;
    let (from, to) = args.time.parse()?;
    let range = layout
        .id_range(floor_seconds(from), ceil_seconds(to))
        .map_err(|e| UsageError::new("--from/--to", e))?;
    let sql = range.sql_predicate("id");
    let mut out = Output::new();
    if args.sql {
        out.line(&sql)
    } else {
        out.json(&RangeOutput {
            from: from.to_rfc3339(),
            to: to.to_rfc3339(),
            start_id: range.start,
            end_id: range.end,
            sql,
        })
    }
    .context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
