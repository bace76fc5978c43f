//! Command-line edge: argument parsing, settings, output and exit codes.
//!
//! Exit codes: 0 done, 1 the work failed, 2 bad usage or configuration; `relay verify`, like
//! `diff`: 0 equal, 1 different, 2 could not compare.

mod bench;
mod db;
mod demo;
mod dev_broker;
mod id;
mod ingest;
mod leases;
mod migrate;
mod output;
mod partitions;
mod plan;
mod query;
mod relay;
mod rollup;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};

use logstamp::time::{Zone, parse_time};

use logstamp::config::{ConfigError, Settings, Sources};
use logstamp::mysql::DbError;

#[derive(Debug, Parser)]
#[command(
    name = "logstamp",
    version,
    about = "Kafka logs into MySQL with time-ordered 64-bit IDs"
)]
struct Cli {
    /// Settings file (TOML) layered over the built-in defaults.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// See it work: an in-process Kafka, log lines, several workers, into MySQL, checked.
    Demo(demo::DemoArgs),
    /// Serve an in-process Kafka-protocol broker over TCP until SIGINT or SIGTERM.
    DevBroker(dev_broker::DevBrokerArgs),
    /// Make, decode and range IDs.
    #[command(subcommand)]
    Id(id::IdCommand),
    /// Plan the log table's partitions.
    #[command(subcommand)]
    Partitions(partitions::PartitionsCommand),
    /// Choose the number of service bits for a fleet.
    Plan(plan::PlanArgs),
    /// Measure throughput against a scratch database.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run one ingest worker: Kafka to MySQL, exactly once, until SIGTERM or SIGINT.
    Ingest(ingest::IngestArgs),
    /// Create the database, apply migrations, create or check the log table.
    Migrate(migrate::MigrateArgs),
    /// The log rows of a time range, read only from the partitions that hold it.
    Query(query::QueryArgs),
    /// Service-ID leases: who holds which ID, and freeing the ID of a holder that died.
    #[command(subcommand)]
    Leases(leases::LeasesCommand),
    /// Keep the relayed tables in sync with other data centres through the binlog.
    #[command(subcommand)]
    Relay(relay::RelayCommand),
    /// Rollup tables: rebuild a time range from the raw rows.
    #[command(subcommand)]
    Rollup(rollup::RollupCommand),
    /// Serve the JSON query API and the log explorer page until SIGTERM or SIGINT.
    Serve(serve::ServeArgs),
}

/// A mistake in how the command was called (exit code 2), as opposed to a failure of the work.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(flag: &str, error: impl std::fmt::Display) -> UsageError {
        UsageError(format!("{flag}: {error}"))
    }
}

/// `--from TIME --to TIME [--tz ZONE]`, shared by the commands that take a time range.
#[derive(Debug, clap::Args)]
pub struct TimeRangeArgs {
    /// Start, included: YYYY-MM-DD, YYYY-MM-DD HH:MM:SS, or RFC 3339.
    #[arg(long, value_name = "TIME")]
    from: String,
    /// End, excluded; same forms as --from.
    #[arg(long, value_name = "TIME")]
    to: String,
    /// Zone of times without an offset: +08:00 or an IANA name.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    tz: String,
}

impl TimeRangeArgs {
    /// The two instants, or a usage error naming the flag at fault.
    pub fn parse(&self) -> Result<(DateTime<Utc>, DateTime<Utc>), UsageError> {
        let zone: Zone = self.tz.parse().map_err(|e| UsageError::new("--tz", e))?;
        let from = parse_time(&self.from, &zone).map_err(|e| UsageError::new("--from", e))?;
        let to = parse_time(&self.to, &zone).map_err(|e| UsageError::new("--to", e))?;
        Ok((from, to))
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let sources = Sources::with_file(cli.config.clone());
    match run(cli.command, sources) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            // A setting the database cannot work with is a configuration error too.
            let bad_setting = error
                .chain()
                .any(|e| matches!(e.downcast_ref(), Some(DbError::Config { .. })));
            if error.is::<ConfigError>()
                || error.is::<UsageError>()
                || error.is::<relay::CannotVerify>()
                || bad_setting
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(command: Command, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        Command::Demo(args) => demo::run(args, sources),
        Command::DevBroker(args) => dev_broker::run(args, sources),
        Command::Id(cmd) => id::run(cmd, sources),
        Command::Partitions(cmd) => partitions::run(cmd, sources),
        Command::Plan(args) => plan::run(args),
        Command::Bench(cmd) => bench::run(cmd, sources),
        Command::Ingest(args) => ingest::run(args, sources),
        Command::Migrate(args) => migrate::run(args, sources),
        Command::Query(args) => query::run(args, sources),
        Command::Leases(cmd) => leases::run(cmd, sources),
        Command::Relay(cmd) => relay::run(cmd, sources),
        Command::Rollup(cmd) => rollup::run(cmd, sources),
        Command::Serve(args) => serve::run(args, sources),
    }
}

/// Loads the settings and starts logging with them.
fn load_settings(sources: &Sources) -> Result<Settings, ConfigError> {
    let settings = Settings::load(sources)?;
    logstamp::telemetry::init(&settings.telemetry);
    Ok(settings)
}
