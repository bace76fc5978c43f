//! `logstamp plan`: the capacity planner.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use logstamp::id::{CapacityInput, plan_capacity};

use super::UsageError;
use super::output::Output;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Consumer processes in the fleet (a).
    #[arg(long, value_name = "A")]
    processes: u64,
    /// Peak messages per second, whole fleet (m).
    #[arg(long, value_name = "M")]
    peak: f64,
    /// Mean messages per second, whole fleet (q).
    #[arg(long, value_name = "Q")]
    mean: f64,
    /// Mean insert time per message, in seconds (t).
    #[arg(long, value_name = "T")]
    insert_seconds: f64,
    /// Insert concurrency per process (k).
    #[arg(long, value_name = "K")]
    concurrency: u64,
    /// A sentence instead of JSON.
    #[arg(long)]
    human: bool,
}

/// Exits 1 when no number of service bits fits the figures.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let input = CapacityInput {
        processes: args.processes,
        peak_per_second: args.peak,
        mean_per_second: args.mean,
        insert_seconds: args.insert_seconds,
        concurrency: args.concurrency,
    };
    let plan = plan_capacity(&input).map_err(|e| UsageError::new("plan", e))?;
    let mut out = Output::new();
    if args.human {
        let verdict = if plan.feasible {
            format!(
                "Feasible service bits: {} to {}. Recommended: {}",
                plan.min_service_bits, plan.max_service_bits, plan.reason
            )
        } else {
            format!("No service-bit count fits: {}", plan.reason)
        };
        out.line(&verdict)
    } else {
        out.json(&plan)
    }
    .context("writing output")?;
    out.finish().context("writing output")?;
    Ok(if plan.feasible {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
