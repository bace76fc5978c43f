//! `logstamp serve`: a JSON API over the store, and the log explorer page that uses it, from
//! one process. Requests are read and checked in pure code (`request`) before any SQL: every
//! value is bound, filters go through the filter language, and each request is bounded in
//! rows (`serve.max_rows`), in range (`serve.max_range`) and in time (each statement runs
//! under the server's own limit, `serve.statement_timeout`, on a read-only session).

mod api;
mod counted;
mod listener;
mod page;
pub mod request;
pub mod settings;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use mysql_async::Pool;
use mysql_async::prelude::Queryable;
use tokio::net::TcpListener;
use tokio::sync::OnceCell;

pub use listener::JsonListener;
pub use settings::ServeSettings;

use crate::id::Layout;
use crate::mysql::{self, DbError, Flavor, MysqlUrl};
use crate::store::log_table::TableSpec;
use crate::store::rollup_plan::RollupPlan;
use request::ApiError;

/// Connections the server holds at most: requests beyond wait for one, so a burst cannot open
/// connections at will.
const MAX_CONNECTIONS: usize = 8;

/// How long a request waits for a connection: a new one, or one of the pool's while all are
/// busy.
const CONNECTION_WAIT: Duration = Duration::from_secs(10);

/// What the server reads: the tables and rollups of the settings, and the ID layout.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The log table first, then the fan-out tables.
    pub tables: Vec<TableSpec>,
    pub rollups: Vec<RollupPlan>,
    pub layout: Layout,
    /// How far ahead of the clock an ID's time may be (`id.mark_window`): live mode reads
    /// that far ahead of now.
    pub ids_ahead: Duration,
}

/// The server's state, shared by its requests.
pub struct Server {
    settings: ServeSettings,
    catalog: Catalog,
    pool: Pool,
    flavor: OnceCell<Flavor>,
}

impl Server {
    /// Reads the database at `serve.mysql_url`, or at `default_url` when that is empty.
    pub fn new(
        settings: ServeSettings,
        catalog: Catalog,
        default_url: &MysqlUrl,
    ) -> Result<Server, DbError> {
        let url = settings.mysql_url.as_ref().unwrap_or(default_url);
        note_histogram_sources(&catalog);
        Ok(Server {
            pool: mysql::pool(url, MAX_CONNECTIONS)?,
            settings,
            catalog,
            flavor: OnceCell::new(),
        })
    }

    /// The API under `/api/` and the page at `/`.
    fn router(self) -> Router {
        api::router(Arc::new(self)).merge(page::router())
    }

    /// Serves the page and the API on `listener`; the requests hyper refuses before routing
    /// (a URL over 65,534 bytes, say) are answered in JSON too.
    pub fn serve(self, listener: TcpListener) -> axum::serve::Serve<JsonListener, Router, Router> {
        axum::serve(JsonListener(listener), self.router())
    }

    /// A pooled connection with this server's limits set on its session, within
    /// [`CONNECTION_WAIT`]: a pooled connection to a hung server is handed out at once, and
    /// only its first statement finds the server silent.
    async fn conn(&self) -> Result<mysql_async::Conn, ApiError> {
        tokio::time::timeout(CONNECTION_WAIT, self.session())
            .await
            .map_err(|_| {
                ApiError::Unavailable(format!(
                    "no MySQL connection within {}",
                    humantime::format_duration(CONNECTION_WAIT)
                ))
            })?
    }

    async fn session(&self) -> Result<mysql_async::Conn, ApiError> {
        let timeout = self.settings.statement_timeout;
        let unavailable = |e: &dyn std::fmt::Display| ApiError::Unavailable(format!("MySQL: {e}"));
        let mut conn = self.pool.get_conn().await.map_err(|e| unavailable(&e))?;
        let flavor = *self
            .flavor
            .get_or_try_init(|| mysql::flavor(&mut conn))
            .await
            .map_err(|e| unavailable(&e))?;
        conn.query_drop(session_limits(flavor, timeout))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(conn)
    }
}

/// Runs one statement's work on a session of this server, failing with a 504 when no answer
/// comes within `serve.statement_timeout` and a second: the server stops the statement at its
/// limit, so only a server that does not answer (hung, or a path dropping packets) gets here.
async fn bounded<T>(
    settings: &ServeSettings,
    work: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let deadline = settings.statement_timeout + Duration::from_secs(1);
    tokio::time::timeout(deadline, work).await.map_err(|_| {
        ApiError::Timeout(format!(
            "MySQL gave no answer within serve.statement_timeout and a second ({})",
            humantime::format_duration(deadline)
        ))
    })?
}

/// Says, per table, which histograms are summed from counts: by level (and by event time)
/// from the line counts every table keeps, by other columns from rollups; the rest count the
/// table's rows, which takes seconds over millions, so a table whose level the counts lack is
/// worth a warning that names the remedy.
fn note_histogram_sources(catalog: &Catalog) {
    for spec in &catalog.tables {
        let table = spec.table.as_str();
        let mut columns: Vec<&str> = catalog
            .rollups
            .iter()
            .filter(|p| p.source == spec.table && p.event_time.is_none())
            .flat_map(|p| p.dimensions.iter().map(|d| d.name.as_str()))
            .collect();
        if let Some(level) = crate::store::line_count_plan::level_index(&spec.columns) {
            columns.extend(spec.columns.get(level).map(|c| c.name.as_str()));
        }
        columns.sort_unstable();
        columns.dedup();
        if columns.is_empty() {
            tracing::warn!(
                table,
                "{table} has no `level` column (a string of at most 255 characters) for its line \
                 counts, and no rollup counts it: its histograms by a column are counted from \
                 the table, which takes seconds over millions of rows; add a [[rollups]] with \
                 bucket = \"minute\" and the columns histograms split and filter by as \
                 dimensions (see the README's log explorer section)"
            );
        } else {
            tracing::info!(
                table,
                "histograms of {table} by or filtered by {} are summed from counts",
                columns.join(", ")
            );
        }
    }
}

/// Bounds each statement of the session in time, and makes the session read-only: a mistake
/// here cannot write. MariaDB counts in seconds (`max_statement_time`, any statement), MySQL in
/// milliseconds (`max_execution_time`, SELECT only, which is all this server runs).
fn session_limits(flavor: Flavor, timeout: Duration) -> String {
    match flavor {
        Flavor::MariaDb => format!(
            "SET SESSION max_statement_time = {:.3}, SESSION tx_read_only = 1",
            timeout.as_secs_f64()
        ),
        Flavor::MySql => format!(
            "SET SESSION max_execution_time = {}, SESSION transaction_read_only = 1",
            timeout.as_millis().max(1)
        ),
    }
}

/// A database error as the caller sees it: whose fault, and what to do.
fn db_error(error: DbError) -> ApiError {
    // ER_STATEMENT_TIMEOUT (MariaDB), ER_QUERY_TIMEOUT (MySQL).
    const TIMED_OUT: [u16; 2] = [1969, 3024];
    // ER_NO_SUCH_TABLE.
    const NO_TABLE: u16 = 1146;
    match error.server_code() {
        Some(code) if TIMED_OUT.contains(&code) => ApiError::Timeout(format!(
            "{error}: the statement ran past serve.statement_timeout; narrow the range or the \
             filter"
        )),
        Some(NO_TABLE) => ApiError::Unavailable(format!("{error}: run logstamp migrate")),
        _ if error.is_transient() => ApiError::Unavailable(error.to_string()),
        _ => ApiError::Internal(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bounded_and_read_only_on_either_server() {
        let ten = Duration::from_millis(10_500);
        assert_eq!(
            session_limits(Flavor::MariaDb, ten),
            "SET SESSION max_statement_time = 10.500, SESSION tx_read_only = 1"
        );
        assert_eq!(
            session_limits(Flavor::MySql, ten),
            "SET SESSION max_execution_time = 10500, SESSION transaction_read_only = 1"
        );
    }
}
