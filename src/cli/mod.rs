//! Command-line edge: argument parsing, settings, output and exit codes.
//!
//! Exit codes: 0 done, 1 the work failed, 2 bad usage or configuration; `relay verify`, like
//! `diff`: 0 equal, 1 different, 2 could not compare.

mod bench;
mod counts;
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
mod rebuild;
mod relay;
mod rollup;
mod search;
mod serve;
mod shards;
mod zonemap;

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};

use logstamp::time::{Zone, parse_time_at};

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
    Relay(relay::RelayArgs),
    /// Rollup tables: rebuild a time range from the raw rows.
    #[command(subcommand)]
    Rollup(rollup::RollupCommand),
    /// The zone map of event times (store.event_time): rebuild it from the rows.
    #[command(subcommand)]
    Zonemap(zonemap::ZonemapCommand),
    /// The per-minute line counts of every table: rebuild them from the rows.
    #[command(subcommand)]
    Counts(counts::CountsCommand),
    /// The text filter that searches (`contains`, `--grep`) read: rebuild it from the rows.
    #[command(subcommand)]
    Search(search::SearchCommand),
    /// Serve the JSON query API and the log explorer page until SIGTERM or SIGINT.
    Serve(serve::ServeArgs),
    /// Several databases (store.shards): where each partition lives, and moving one.
    #[command(subcommand)]
    Shards(shards::ShardsCommand),
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

/// `--from TIME [--to TIME] [--tz ZONE]` or `--since DURATION`, shared by the commands that
/// take a time range. Times may be relative to now (`-15m`, `today`).
#[derive(Debug, clap::Args)]
pub struct TimeRangeArgs {
    /// Start, included: YYYY-MM-DD, YYYY-MM-DD HH:MM:SS, RFC 3339, or relative: now, today,
    /// yesterday, -15m, 2h ago.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    /// The last DURATION up to --to: `--since 2h` is `--from -2h`.
    #[arg(long, value_name = "DURATION", conflicts_with = "from")]
    since: Option<String>,
    /// End, excluded; same forms as --from; default now.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// Zone of times without an offset, and of today and yesterday: +08:00 or an IANA name.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    tz: String,
    /// Pins "now" for relative times (tests).
    #[arg(long = "now", hide = true, value_name = "TIME")]
    pinned_now: Option<String>,
}

impl TimeRangeArgs {
    /// The two instants, or a usage error naming the flag at fault. One of --from and --since
    /// is needed.
    pub fn parse(&self) -> Result<(DateTime<Utc>, DateTime<Utc>), UsageError> {
        let (from, to) = self.parse_open()?;
        let from = from.ok_or_else(|| {
            UsageError::new(
                "--from",
                "give the start of the range: --from TIME or --since DURATION",
            )
        })?;
        Ok((from, to))
    }

    /// The start, if --from or --since gave one, and the end (now unless --to is given).
    pub fn parse_open(&self) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>), UsageError> {
        let zone: Zone = self.tz.parse().map_err(|e| UsageError::new("--tz", e))?;
        let now = db::now_or(self.pinned_now.as_deref())?;
        let to = match &self.to {
            Some(text) => {
                parse_time_at(text, &zone, now).map_err(|e| UsageError::new("--to", e))?
            }
            None => now,
        };
        let from = match (&self.from, &self.since) {
            (Some(text), _) => {
                Some(parse_time_at(text, &zone, now).map_err(|e| UsageError::new("--from", e))?)
            }
            (None, Some(duration)) => {
                let text = format!("-{}", duration.trim().trim_start_matches('-'));
                Some(parse_time_at(&text, &zone, to).map_err(|e| UsageError::new("--since", e))?)
            }
            (None, None) => None,
        };
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
        Command::Relay(args) => relay::run(args, sources),
        Command::Rollup(cmd) => rollup::run(cmd, sources),
        Command::Zonemap(cmd) => zonemap::run(cmd, sources),
        Command::Counts(cmd) => counts::run(cmd, sources),
        Command::Search(cmd) => search::run(cmd, sources),
        Command::Serve(args) => serve::run(args, sources),
        Command::Shards(cmd) => shards::run(cmd, sources),
    }
}

/// Loads the settings and starts logging with them.
fn load_settings(sources: &Sources) -> Result<Settings, ConfigError> {
    let settings = Settings::load(sources)?;
    logstamp::telemetry::init(&settings.telemetry);
    Ok(settings)
}
