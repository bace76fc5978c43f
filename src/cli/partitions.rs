//! `logstamp partitions plan`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use logstamp::config::Sources;
use logstamp::store::schema::create_log_table_sql;
use logstamp::store::{Ident, PartitionPlan, Period};
use logstamp::time::{Zone, parse_month_or_day};

use super::output::{Output, ignore_closed_pipe};
use super::{UsageError, load_settings};

#[derive(Debug, Subcommand)]
pub enum PartitionsCommand {
    /// Print the partitioned CREATE TABLE for a span of periods.
    Plan(PlanArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// First period: YYYY-MM or YYYY-MM-DD.
    #[arg(long, value_name = "DATE")]
    from: String,
    /// Last period (included): YYYY-MM or YYYY-MM-DD.
    #[arg(long, value_name = "DATE")]
    to: String,
    /// day, week or month [default: partitions.period].
    #[arg(long)]
    period: Option<String>,
    /// Zone periods start in [default: partitions.time_zone].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Table name [default: store.table].
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// Print the partitions as JSON ({name, less_than, ...} per line) instead of DDL.
    #[arg(long)]
    json: bool,
}

pub fn run(command: PartitionsCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        PartitionsCommand::Plan(args) => plan(args, sources),
    }
}

fn plan(args: PlanArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let period: Period = match &args.period {
        Some(p) => p.parse().map_err(|e| UsageError::new("--period", e))?,
        None => settings.partitions.period,
    };
    let zone: Zone = match &args.tz {
        Some(z) => z.parse().map_err(|e| UsageError::new("--tz", e))?,
        None => settings.partitions.time_zone,
    };
    let table = match &args.table {
        Some(t) => Ident::new(t).map_err(|e| UsageError::new("--table", e))?,
        None => settings.store.table.clone(),
    };
    let from = parse_month_or_day(&args.from).map_err(|e| UsageError::new("--from", e))?;
    let to = parse_month_or_day(&args.to).map_err(|e| UsageError::new("--to", e))?;
    let plan = PartitionPlan::new(from, to, period, &zone, &settings.id.layout)
        .map_err(|e| UsageError::new("--from/--to", e))?;
    let mut out = Output::new();
    if args.json {
        for partition in &plan.partitions {
            if let Err(e) = out.json(partition) {
                ignore_closed_pipe(Err(e)).context("writing output")?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    } else {
        ignore_closed_pipe(out.line(&create_log_table_sql(
            &table,
            &settings.store.columns,
            settings.store.payload,
            &plan,
        )))
        .context("writing output")?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
