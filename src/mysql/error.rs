//! Store errors, split the way retries need them: transient ones (the connection or a lock
//! failed; the same work may succeed if tried again) and definite ones (retrying cannot help).

use mysql_async::{DriverError, Error as MysqlError};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A MySQL call failed; `context` says what was being done. Transient or not by the
    /// server's error (see [`is_transient`]).
    #[error("{context}: {source}")]
    Mysql {
        context: String,
        #[source]
        source: MysqlError,
    },
    /// A setting this work cannot use as it is; `key` names it.
    #[error("{key}: {reason}")]
    Config { key: String, reason: String },
    /// A table is not what logstamp needs: missing, made by other settings or a newer
    /// logstamp, or changed by hand. The reason says how to put it right.
    #[error("{reason}")]
    Catalog { table: String, reason: String },
    /// Another process holds what this work needs (a named lock): trying again later may
    /// succeed.
    #[error("{0}")]
    Busy(String),
    /// The server refused this data for good: a row or a value it will never take.
    #[error("{0}")]
    Refused(String),
    /// The server answered what it never should (no row, a NULL, a missing column), or
    /// logstamp broke a rule of its own: a bug, or a server it does not support.
    #[error("{0}")]
    Invariant(String),
    /// The server did not answer within the bound set for this work (see
    /// [`crate::mysql::bound`]): it may be hung. Transient; the connection was dropped.
    #[error("{context}: no answer within {after:?} (the server may be hung or overloaded)")]
    TimedOut {
        context: String,
        after: std::time::Duration,
    },
    /// A task of this process panicked or was cancelled.
    #[error("{0}")]
    TaskPanicked(String),
}

impl DbError {
    pub fn mysql(context: impl Into<String>) -> impl FnOnce(MysqlError) -> DbError {
        let context = context.into();
        move |source| DbError::Mysql { context, source }
    }

    pub fn config(key: impl Into<String>, reason: impl Into<String>) -> DbError {
        DbError::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }

    pub fn catalog(table: impl Into<String>, reason: impl Into<String>) -> DbError {
        DbError::Catalog {
            table: table.into(),
            reason: reason.into(),
        }
    }

    /// Whether the same work may succeed when tried again.
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::Mysql { source, .. } => is_transient(source),
            DbError::Busy(_) | DbError::TimedOut { .. } => true,
            DbError::Config { .. }
            | DbError::Catalog { .. }
            | DbError::Refused(_)
            | DbError::Invariant(_)
            | DbError::TaskPanicked(_) => false,
        }
    }

    /// The server's error code, if the server answered with one.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            DbError::Mysql {
                source: MysqlError::Server(e),
                ..
            } => Some(e.code),
            _ => None,
        }
    }
}

/// Server errors after which a retry on a fresh transaction may succeed (MariaDB error codes).
const TRANSIENT_SERVER_CODES: &[u16] = &[
    1040, // ER_CON_COUNT_ERROR: too many connections
    1053, // ER_SERVER_SHUTDOWN
    1152, // ER_ABORTING_CONNECTION
    1158, // ER_NET_READ_ERROR
    1159, // ER_NET_READ_INTERRUPTED
    1160, // ER_NET_ERROR_ON_WRITE
    1161, // ER_NET_WRITE_INTERRUPTED
    1205, // ER_LOCK_WAIT_TIMEOUT
    1213, // ER_LOCK_DEADLOCK
    1317, // ER_QUERY_INTERRUPTED
    1927, // ER_CONNECTION_KILLED
    2006, // CR_SERVER_GONE_ERROR
    2013, // CR_SERVER_LOST
    4031, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
];

/// Lost connections and lock conflicts are transient; bad SQL or bad data is not.
pub fn is_transient(error: &MysqlError) -> bool {
    match error {
        MysqlError::Io(_) => true,
        MysqlError::Driver(e) => matches!(
            e,
            DriverError::ConnectionClosed | DriverError::PoolDisconnected
        ),
        MysqlError::Server(e) => TRANSIENT_SERVER_CODES.contains(&e.code),
        MysqlError::Other(_) | MysqlError::Url(_) => false,
    }
}
