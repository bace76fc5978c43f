//! `logstamp bench`: throughput measurements against a scratch database beside `mysql.url`'s,
//! created and dropped by the command.

mod ingest;
mod store;

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use mysql_async::prelude::Queryable;
use serde_json::json;

use chrono::Utc;

use logstamp::config::{MysqlUrl, Settings, Sources};
use logstamp::store::log_table::TableSpec;
use logstamp::store::{db, migrate};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Rows per second through the store writer for each insert method, and the ceiling.
    Store(store::StoreArgs),
    /// Records per second from Kafka to MySQL through ingest workers, against the LOAD DATA
    /// ceiling of the same rows, with the workers' peak memory.
    Ingest(ingest::IngestArgs),
}

pub fn run(command: BenchCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Store(args) => store::store(args, sources),
        BenchCommand::Ingest(args) => ingest::ingest(args, sources),
    }
}

/// A typical log line of about 300 bytes, varied a little by `n`.
pub fn log_message(n: usize) -> String {
    const LEVELS: &[&str] = &["info", "info", "info", "info", "warn", "error", "debug"];
    const SERVICES: &[&str] = &["checkout", "search", "auth", "payments", "catalog"];
    // A cheap, fixed scramble so values are not all alike.
    let h = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let millis = 1_714_566_896_000 + n as i64;
    let time = chrono::DateTime::from_timestamp_millis(millis)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    json!({
        "time": time,
        "level": LEVELS[n % LEVELS.len()],
        "host": format!("web-{:03}.eu-west-1.example.com", h % 200),
        "service": SERVICES[n % SERVICES.len()],
        "message": format!(
            "GET /api/v1/orders/{} 200 in {}.{}ms user={} request_id={:016x} upstream=orders-db-primary",
            h % 1_000_000,
            h % 90 + 1,
            h % 10,
            h % 50_000,
            h
        ),
        "trace_id": format!("{h:016x}{:016x}", h.rotate_left(17)),
        "client": format!("10.{}.{}.{}", h % 256, (h >> 8) % 256, (h >> 16) % 256),
    })
    .to_string()
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
/// (migrations and the log table), and drops the database afterwards whatever happened.
pub async fn in_scratch_database<T>(
    mut settings: Settings,
    bench: impl AsyncFnOnce(&Settings) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let scratch = scratch_url(&settings.mysql.url)?;
    settings.mysql.url = scratch.clone();
    db::create_database(&scratch).await?;
    let result = async {
        let mut conn = db::connect(&scratch).await?;
        migrate::run(
            &mut conn,
            &migrate::builtin()?,
            &TableSpec::from_settings(&settings),
            Utc::now(),
            false,
        )
        .await?;
        conn.disconnect().await?;
        bench(&settings).await
    }
    .await;
    let dropped = drop_database(&scratch).await;
    let value = result?;
    dropped?;
    Ok(value)
}

/// `mysql.url` with the database replaced by a scratch one of this process.
fn scratch_url(url: &MysqlUrl) -> anyhow::Result<MysqlUrl> {
    let mut scratch = url::Url::parse(url.expose()).context("mysql.url")?;
    scratch.set_path(&format!("/logstamp_bench_{}", std::process::id()));
    MysqlUrl::try_from(scratch.to_string()).map_err(|e| anyhow::anyhow!("scratch database: {e}"))
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
