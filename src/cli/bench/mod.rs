//! `logstamp bench`: throughput measurements against a scratch database beside `mysql.url`'s,
//! created and dropped by the command.

mod ingest;
mod otlp;
mod relay;
mod relay_peer;
mod serve;
mod shards;
mod snapshot;
mod storage;
mod store;

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use mysql_async::prelude::Queryable;

use chrono::Utc;

use logstamp::config::{Settings, Sources};
use logstamp::ingest::sample;
use logstamp::mysql;
use logstamp::mysql::MysqlUrl;
use logstamp::store::{Writer, migrate};

use super::db::with_database;
use super::load_settings;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Rows per second through the store writer for each insert method, and the ceiling.
    Store(store::StoreArgs),
    /// Records per second from Kafka to MySQL through ingest workers, against the LOAD DATA
    /// ceiling of the same rows, with the workers' peak memory.
    Ingest(ingest::IngestArgs),
    /// Records per second and worker CPU per record of the same log records as `otlp_proto`
    /// (many per message) and as `json` (one per message), in alternating runs.
    Otlp(otlp::OtlpArgs),
    /// Changes per second through the relay's capture and apply, and its lag at a fixed rate,
    /// beside MariaDB's own replication, or beside Debezium (`--peer debezium`).
    Relay(relay::RelayArgs),
    /// Rows per second of the relay's online snapshot of a table beside `mysqldump | mysql` of
    /// it, and the source's commit latency with and without a snapshot running.
    Snapshot(snapshot::SnapshotArgs),
    /// Rows per second through the store writer into 1, 2, ... N shards (store.shards), side
    /// by side.
    Shards(shards::ShardsArgs),
    /// What each table layout (payload kept, page compression) costs, side by side on the same
    /// rows: bytes per line on disk, rows per second, worker and database CPU per row, and the
    /// time of a 24-hour histogram and a one-day query --where.
    Storage(storage::StorageArgs),
    /// How long `logstamp serve` takes to answer over a day of many rows: histograms and pages
    /// of lines, with the CPU spent per request.
    Serve(serve::ServeArgs),
}

pub fn run(command: BenchCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Store(args) => store::store(args, sources),
        BenchCommand::Ingest(args) => ingest::ingest(args, sources),
        BenchCommand::Otlp(args) => otlp::otlp(args, sources),
        BenchCommand::Serve(args) => serve::serve(args, sources),
        BenchCommand::Storage(args) => storage::storage(args, sources),
        BenchCommand::Shards(args) => shards::shards(args, sources),
        BenchCommand::Relay(args) => {
            relay::run(args, load_settings(&sources)?)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Snapshot(args) => {
            snapshot::run(args, load_settings(&sources)?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The benchmarks' message `n`, timed a fixed instant plus `n` milliseconds.
pub fn log_message(n: u64) -> String {
    let at =
        chrono::DateTime::from_timestamp_millis(1_714_566_896_000 + n as i64).unwrap_or_default();
    sample::log_message(n, at)
}

/// A writer of the settings' tables.
pub fn writer(settings: &Settings) -> anyhow::Result<Writer> {
    Ok(Writer::new(
        &settings.mysql.url,
        &settings.store,
        &settings.rollup_plans,
        settings.id.layout,
    )?)
}

/// The median of `values` (0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Runs `bench` in a scratch database beside `mysql.url`'s, with the schema production has
/// (migrations, the log table, fan-out tables and rollups), and drops the database afterwards whatever happened.
pub async fn in_scratch_database<T>(
    mut settings: Settings,
    bench: impl AsyncFnOnce(&Settings) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let scratch = with_database(
        &settings.mysql.url,
        &format!("logstamp_bench_{}", std::process::id()),
    )?;
    settings.mysql.url = scratch.clone();
    let result = async {
        migrated(&settings, &scratch).await?.disconnect().await?;
        bench(&settings).await
    }
    .await;
    let dropped = drop_database(&scratch).await;
    let value = result?;
    dropped?;
    Ok(value)
}

/// A connection to the database at `url`, created if missing and given the schema production
/// has (migrations, the log table, fan-out tables and rollups).
async fn migrated(settings: &Settings, url: &MysqlUrl) -> anyhow::Result<mysql_async::Conn> {
    mysql::create_database(url).await?;
    let mut conn = mysql::connect(url).await?;
    migrate::run_all(
        &mut conn,
        &migrate::builtin()?,
        &settings.log_table(),
        &settings.fanout_tables(),
        &settings.rollup_plans,
        Utc::now(),
        false,
    )
    .await?;
    Ok(conn)
}

async fn drop_database(url: &MysqlUrl) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(url.expose())
        .await
        .context("connecting to drop the scratch database")?;
    conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", url.database()))
        .await
        .context("dropping the scratch database")?;
    conn.disconnect().await?;
    Ok(())
}
