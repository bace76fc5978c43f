//! What the commands that talk to MySQL share: a runtime, a connection, the pinned clock.

use std::future::Future;

use anyhow::Context;
use chrono::{DateTime, Utc};
use mysql_async::Conn;

use logstamp::mysql::MysqlUrl;
use logstamp::mysql::{self, DbError};
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

/// Runs `work` on a connection of its own to `url`, then closes it.
pub fn with_conn<T>(
    url: &MysqlUrl,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, DbError>,
) -> anyhow::Result<T> {
    let done = block_on(async {
        let mut conn = mysql::connect(url).await?;
        let done = work(&mut conn).await;
        // Nothing is left open on the server; a failed goodbye changes nothing.
        let _ = conn.disconnect().await;
        done
    })??;
    Ok(done)
}

/// The time to act at: now, or the hidden `--now` flag, which lets tests pin the clock.
pub fn now_or(flag: Option<&str>) -> Result<DateTime<Utc>, UsageError> {
    match flag {
        None => Ok(Utc::now()),
        Some(text) => parse_time(text, &Zone::UTC).map_err(|e| UsageError::new("--now", e)),
    }
}
