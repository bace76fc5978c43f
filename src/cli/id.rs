//! `logstamp id gen | decode | range`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::id::IdGenerator;
use logstamp::time::{ceil_seconds, floor_seconds, format_utc};

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

fn gen_ids(args: GenArgs, mut sources: Sources) -> anyhow::Result<ExitCode> {
    if let Some(service_id) = args.service_id {
        sources = sources.set("id.service_id", service_id);
    }
    let settings = load_settings(&sources)?;
    let generator = IdGenerator::new(settings.id.layout, settings.id.service_id)?
        .with_max_borrow_seconds(settings.id.max_borrow_seconds);
    let mut out = Output::new();
    let mut remaining = args.count;
    while remaining > 0 {
        let block = generator.next_block(u32::try_from(remaining).unwrap_or(u32::MAX))?;
        for id in block {
            if let Err(e) = out.json(&Generated { id }) {
                ignore_closed_pipe(Err(e)).context("writing IDs")?;
                return Ok(ExitCode::SUCCESS);
            }
        }
        remaining -= u64::from(block.len());
    }
    out.finish().context("writing IDs")?;
    Ok(ExitCode::SUCCESS)
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
