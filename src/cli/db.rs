//! What the commands that talk to MySQL share: a runtime, a connection, the pinned clock.

use std::future::Future;

use anyhow::Context;
use chrono::{DateTime, Utc};
use mysql_async::Conn;

use logstamp::mysql::{self, DbError};
use logstamp::mysql::{MysqlSettings, MysqlUrl};
use logstamp::time::{Zone, parse_time};

use super::UsageError;

/// `url` with its database replaced by `database`.
pub fn with_database(url: &MysqlUrl, database: &str) -> anyhow::Result<MysqlUrl> {
    let mut changed = url::Url::parse(url.expose()).context("mysql.url")?;
    changed.set_path(&format!("/{database}"));
    MysqlUrl::try_from(changed.to_string()).map_err(|e| anyhow::anyhow!("database {database}: {e}"))
}

/// Runs one command's MySQL work to completion on a single-threaded runtime.
pub fn block_on<F: Future>(work: F) -> anyhow::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    Ok(runtime.block_on(work))
}

/// Runs `work` on a connection of its own to `url` (this database or a shard of it), then
/// closes it: one step, within `mysql.statement_timeout`.
pub fn with_conn<T>(
    mysql: &MysqlSettings,
    url: &MysqlUrl,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, DbError>,
) -> anyhow::Result<T> {
    let bound = mysql.bound_on(url);
    Ok(block_on(bound.wait(step, mysql::with_conn(url, work)))??)
}

/// [`with_conn`] for work of many steps, each of which it bounds itself (a rebuild, a
/// follower's polls).
pub fn with_steps<T, E: From<DbError>>(
    url: &MysqlUrl,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, E>,
) -> anyhow::Result<T>
where
    anyhow::Error: From<E>,
{
    Ok(block_on(mysql::with_conn(url, work))??)
}

/// How a timed-out step of a command names its wait.
pub fn step() -> String {
    "the command's work (mysql.statement_timeout)".to_string()
}

/// The time to act at: now, or the hidden `--now` flag, which lets tests pin the clock.
pub fn now_or(flag: Option<&str>) -> Result<DateTime<Utc>, UsageError> {
    match flag {
        None => Ok(Utc::now()),
        Some(text) => parse_time(text, &Zone::UTC).map_err(|e| UsageError::new("--now", e)),
    }
}
