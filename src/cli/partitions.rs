//! `logstamp partitions plan | ensure | list`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use serde::Serialize;

use logstamp::config::Sources;
use logstamp::mysql::lock::{release, table_lock, try_lock};
use logstamp::mysql::{self, DbError, Ident};
use logstamp::store::log_table::TableSpec;
use logstamp::store::partition_plan::ExistingPartition;
use logstamp::store::partitions::{self, EnsureOutcome};
use logstamp::store::recompress;
use logstamp::store::schema::create_log_table_sql;
use logstamp::store::shards::ShardSet;
use logstamp::store::{PartitionBound, PartitionPlan, Period};
use logstamp::time::{Zone, parse_month_or_day};

use super::db::{now_or, step, with_conn, with_steps};
use super::output::{Format, Output, aligned, ignore_closed_pipe};
use super::{UsageError, load_settings};

#[derive(Debug, Subcommand)]
pub enum PartitionsCommand {
    /// Print the partitioned CREATE TABLE for a span of periods.
    Plan(PlanArgs),
    /// Add the partitions ahead and drop those past retention, if no other process is at it.
    Ensure(EnsureArgs),
    /// Show the log table's partitions: time range, bound and estimated rows.
    List(ListArgs),
    /// Rebuild, one at a time, the partitions not compressed as store.compression says.
    Compress(CompressArgs),
}

#[derive(Debug, Args)]
pub struct CompressArgs {
    /// Only say which partitions would be rebuilt.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Args)]
pub struct EnsureArgs {
    /// Only say what would be added and dropped.
    #[arg(long)]
    dry_run: bool,
    /// Act as if the time were TIME (for tests).
    #[arg(long, hide = true, value_name = "TIME")]
    now: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The table: store.table (the default) or one of store.tables.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// json (one object per line) or table.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
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
        PartitionsCommand::Ensure(args) => ensure(args, sources),
        PartitionsCommand::List(args) => list(args, sources),
        PartitionsCommand::Compress(args) => compress(args, sources),
    }
}

/// One JSON line per partition as it is rebuilt (`partition_compressed`, or with `--dry-run`
/// `partition_to_compress`), then one per table; a table whose lock another process holds is
/// left (`busy`).
fn compress(args: CompressArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let specs = settings.tables();
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    for (name, url) in &set.shards {
        if set.sharded {
            out.database(name, "shard").context("writing output")?;
        }
        // Long work: each partition's rebuild is a step of its own.
        let bound = settings.mysql.bound_on(url);
        with_steps(url, async |conn| {
            let database = bound.wait(step, mysql::current_database(conn)).await?;
            for spec in &specs {
                let lock = table_lock(&database, spec.table.as_str());
                let mut failed = None;
                let taken = bound.wait(step, try_lock(conn, &lock, 0)).await?;
                let rebuilt = if taken {
                    let rebuilt =
                        recompress::recompress(conn, spec, args.dry_run, &bound, |line| {
                            let action = if args.dry_run {
                                "partition_to_compress"
                            } else {
                                "partition_compressed"
                            };
                            if let Err(e) = out.progress(&Tagged {
                                action,
                                line: &line,
                            }) {
                                failed.get_or_insert(e);
                            }
                        })
                        .await?;
                    bound.wait(step, release(conn, &lock)).await?;
                    Some(rebuilt)
                } else {
                    None
                };
                if let Some(e) = failed {
                    return Err(anyhow::Error::from(e).context("writing output"));
                }
                let table = spec.table.as_str();
                let line = match rebuilt {
                    Some(partitions) => serde_json::json!({"action": "table_compressed",
                        "table": table, "compression": spec.compression.to_string(),
                        "partitions": partitions, "dry_run": args.dry_run}),
                    None => serde_json::json!({"action": "busy", "table": table, "lock": lock}),
                };
                out.progress(&line).context("writing output")?;
            }
            Ok::<_, anyhow::Error>(())
        })?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// A line with its `action` first.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    action: &'a str,
    #[serde(flatten)]
    line: &'a T,
}

#[derive(Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
enum EnsureLine<'a> {
    Busy {
        table: &'a str,
        lock: &'a str,
    },
    PartitionAdded(&'a PartitionBound),
    PartitionToAdd(&'a PartitionBound),
    PartitionDropped(&'a ExistingPartition),
    PartitionToDrop(&'a ExistingPartition),
    /// `pmin` emptied with the partitions dropped and ending where the oldest one kept starts.
    PminRaised {
        table: &'a str,
        less_than: u64,
    },
    PminToRaise {
        table: &'a str,
        less_than: u64,
    },
    PartitionsEnsured {
        table: &'a str,
        added: usize,
        dropped: usize,
        dry_run: bool,
    },
}

/// Exits 0 when another process holds the lock, saying so: it is doing the same work.
fn ensure(args: EnsureArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let now = now_or(args.now.as_deref())?;
    let specs = settings.tables();
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    for (name, url) in &set.shards {
        let outcomes = with_conn(&settings.mysql, url, async |conn| {
            let mut outcomes = Vec::with_capacity(specs.len());
            for spec in &specs {
                outcomes.push(partitions::ensure(conn, spec, now, args.dry_run).await?);
            }
            Ok::<_, DbError>(outcomes)
        })?;
        if set.sharded {
            out.database(&name, "shard").context("writing output")?;
        }
        for line in &ensure_lines(&specs, &outcomes, args.dry_run) {
            out.json(line).context("writing output")?;
        }
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// What `partitions ensure` did (or, `dry_run`, would do) to each table of a database.
fn ensure_lines<'a>(
    specs: &'a [TableSpec],
    outcomes: &'a [EnsureOutcome],
    dry_run: bool,
) -> Vec<EnsureLine<'a>> {
    let mut lines = Vec::new();
    for (spec, outcome) in specs.iter().zip(outcomes) {
        let table = spec.table.as_str();
        match outcome {
            EnsureOutcome::Busy { lock } => lines.push(EnsureLine::Busy { table, lock }),
            EnsureOutcome::Done(plan) => {
                for p in &plan.add {
                    lines.push(if dry_run {
                        EnsureLine::PartitionToAdd(p)
                    } else {
                        EnsureLine::PartitionAdded(p)
                    });
                }
                for p in &plan.drop {
                    lines.push(if dry_run {
                        EnsureLine::PartitionToDrop(p)
                    } else {
                        EnsureLine::PartitionDropped(p)
                    });
                }
                if let Some(less_than) = plan.pmin_to {
                    lines.push(if dry_run {
                        EnsureLine::PminToRaise { table, less_than }
                    } else {
                        EnsureLine::PminRaised { table, less_than }
                    });
                }
                lines.push(EnsureLine::PartitionsEnsured {
                    table,
                    added: plan.add.len(),
                    dropped: plan.drop.len(),
                    dry_run,
                });
            }
        }
    }
    lines
}

fn list(args: ListArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let spec = super::query::table_spec(&settings, args.table.as_deref())?;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    for (name, url) in &set.shards {
        let shown = with_conn(&settings.mysql, url, async |conn| {
            partitions::list(conn, &spec).await
        })?;
        let written = match args.format {
            Format::Json => {
                let header = if set.sharded {
                    out.database(name, "shard")
                } else {
                    Ok(())
                };
                header.and_then(|()| shown.iter().try_for_each(|p| out.json(p)))
            }
            Format::Table => {
                let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                let rows: Vec<Vec<String>> = shown
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            text(&p.from),
                            text(&p.to),
                            p.less_than.map_or("MAXVALUE".into(), |b| b.to_string()),
                            p.rows.to_string(),
                        ]
                    })
                    .collect();
                let header = if set.sharded {
                    out.line(&format!("shard {name}"))
                } else {
                    Ok(())
                };
                header.and_then(|()| {
                    aligned(&["name", "from", "to", "less_than", "rows"], &rows)
                        .iter()
                        .try_for_each(|line| out.line(line))
                })
            }
        };
        ignore_closed_pipe(written).context("writing output")?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
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
            settings.store.payload.kept(),
            &plan,
        )))
        .context("writing output")?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
