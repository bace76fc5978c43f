//! Connecting to MySQL: the pool, and the database it names.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};

use super::bound::within;
use super::rows::take;
use super::{DbError, Ident};
use crate::mysql::MysqlUrl;

/// A pool of up to `max_connections` connections to the URL's database.
pub fn pool(url: &MysqlUrl, max_connections: usize) -> Result<Pool, DbError> {
    let constraints = PoolConstraints::new(1, max_connections.max(1))
        .ok_or_else(|| DbError::Invariant(format!("invalid pool size {max_connections}")))?;
    let opts = OptsBuilder::from_opts(opts(url)?)
        .pool_opts(PoolOpts::default().with_constraints(constraints));
    Ok(Pool::new(opts))
}

/// Connection options from the URL. The driver's message is kept, the URL (and its password)
/// is not.
pub(crate) fn opts(url: &MysqlUrl) -> Result<Opts, DbError> {
    let opts = Opts::from_url(url.expose())
        .map_err(|e| DbError::config("mysql.url", format!("{}: {e}", url.redacted())))?;
    // DATETIME columns (and their CURRENT_TIMESTAMP defaults) hold UTC whatever the server's
    // zone is; `setup` runs again after a pooled connection is reset.
    // `client_found_rows=true` in the URL would make a row an upsert or update finds but leaves
    // unchanged count as affected: the writer's offset claim (and any conditional update read
    // by its affected rows) would then succeed for a stale owner. It is off on every session.
    Ok(OptsBuilder::from_opts(opts)
        .setup(vec![SESSION_UTC])
        .client_found_rows(false)
        .into())
}

/// Makes the session's `NOW()`, `CURRENT_TIMESTAMP` and `UNIX_TIMESTAMP(text)` UTC.
const SESSION_UTC: &str = "SET time_zone = '+00:00'";

/// How long connecting (TCP, handshake and session setup) may take: a hung server accepts
/// the TCP connection in its kernel and then never greets.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection of its own, outside any pool: for work that keeps session state such as
/// named locks (`GET_LOCK`), which a pooled connection would carry into its next use. Within
/// [`CONNECT_TIMEOUT`].
pub async fn connect(url: &MysqlUrl) -> Result<Conn, DbError> {
    let context = || format!("connecting to {}", url.redacted());
    let opts = opts(url)?;
    within(CONNECT_TIMEOUT, context, async {
        Conn::new(opts).await.map_err(DbError::mysql(context()))
    })
    .await
}

/// Runs `work` on a connection of its own to `url`, then closes it. After a failure the
/// connection is dropped unclosed: after a wait cut short (see [`super::bound`]) it may be
/// mid-answer, and a goodbye could wait on a hung server too.
pub async fn with_conn<T, E: From<DbError>>(
    url: &MysqlUrl,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, E>,
) -> Result<T, E> {
    let mut conn = connect(url).await?;
    let done = work(&mut conn).await?;
    // Nothing is left open on the server; a failed goodbye changes nothing.
    let _ = conn.disconnect().await;
    Ok(done)
}

/// Creates the URL's database if it does not exist, connecting without selecting it; all of
/// it within [`CONNECT_TIMEOUT`].
pub async fn create_database(url: &MysqlUrl) -> Result<(), DbError> {
    let database = Ident::new(url.database())
        .map_err(|e| DbError::config("mysql.url", format!("database: {e}")))?;
    let server = OptsBuilder::from_opts(opts(url)?).db_name(None::<String>);
    let context = || format!("creating database {database} at {}", url.redacted());
    within(CONNECT_TIMEOUT, context, async {
        let mut conn = mysql_async::Conn::new(server)
            .await
            .map_err(DbError::mysql(context()))?;
        conn.query_drop(format!(
            "CREATE DATABASE IF NOT EXISTS {database} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        ))
        .await
        .map_err(DbError::mysql(context()))?;
        conn.disconnect().await.map_err(DbError::mysql(context()))
    })
    .await
}

/// The database the connection works in.
pub async fn current_database(conn: &mut Conn) -> Result<String, DbError> {
    let row: Option<mysql_async::Row> = conn
        .query_first("SELECT DATABASE()")
        .await
        .map_err(DbError::mysql("reading the current database"))?;
    let name: Option<String> = match row {
        Some(mut row) => take(&mut row, 0, "DATABASE()")?,
        None => None,
    };
    name.ok_or_else(|| DbError::config("mysql.url", "names no database"))
}
