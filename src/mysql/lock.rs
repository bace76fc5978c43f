//! Named locks (`GET_LOCK`), so that only one process of the fleet changes a table's schema or
//! partitions at a time. A lock belongs to its connection: hold it on a connection of its own
//! (`mysql::connect`), never a pooled one, and it is released when that connection closes even if
//! the process dies.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};

use super::DbError;
use super::rows::take;

/// MySQL 5.7+ refuses lock names longer than 64 characters.
const MAX_NAME_LEN: usize = 64;

/// `logstamp.<parts joined by .>`, or, when that is too long, its start and a hash of the whole.
pub fn lock_name(parts: &[&str]) -> String {
    let name = format!("logstamp.{}", parts.join("."));
    if name.len() <= MAX_NAME_LEN {
        return name;
    }
    let digest = Sha256::digest(name.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    // Names are ASCII (validated identifiers), so any byte index is a character boundary.
    format!("{}~{hash}", &name[..MAX_NAME_LEN - hash.len() - 1])
}

/// The lock that serializes schema changes (migrations) of one database.
pub fn schema_lock(database: &str) -> String {
    lock_name(&["schema", database])
}

/// The lock that serializes changes to one log table: its creation and its partitions.
pub fn table_lock(database: &str, table: &str) -> String {
    lock_name(&["table", database, table])
}

/// Takes the lock, waiting up to `wait_seconds` (0: only if free now). False if another
/// session holds it.
pub async fn try_lock(conn: &mut Conn, name: &str, wait_seconds: u32) -> Result<bool, DbError> {
    let context = || format!("taking lock {name}");
    let mut row = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (name, wait_seconds))
        .await
        .map_err(DbError::mysql(context()))?
        .ok_or_else(|| DbError::Invariant(format!("{}: no answer", context())))?;
    match take::<Option<i64>>(&mut row, 0, "GET_LOCK")? {
        Some(1) => Ok(true),
        Some(_) => Ok(false),
        // NULL: the server failed to take it (out of memory, or the thread was killed).
        None => Err(DbError::Invariant(format!(
            "{}: the server returned NULL",
            context()
        ))),
    }
}

/// Runs `work` holding the lock, then releases it whether or not the work succeeded. `None`
/// when another session held the lock for `wait_seconds`: nothing was done.
pub async fn with_lock<T>(
    conn: &mut Conn,
    name: &str,
    wait_seconds: u32,
    work: impl AsyncFnOnce(&mut Conn) -> Result<T, DbError>,
) -> Result<Option<T>, DbError> {
    if !try_lock(conn, name, wait_seconds).await? {
        return Ok(None);
    }
    let result = work(conn).await;
    let released = release(conn, name).await;
    // The work's own error says more than a failed release after it.
    let value = result?;
    released?;
    Ok(Some(value))
}

/// Releases a lock this connection holds.
pub async fn release(conn: &mut Conn, name: &str) -> Result<(), DbError> {
    conn.exec_drop("SELECT RELEASE_LOCK(?)", (name,))
        .await
        .map_err(DbError::mysql(format!("releasing lock {name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept() {
        assert_eq!(
            lock_name(&["partitions", "db", "logs"]),
            "logstamp.partitions.db.logs"
        );
    }

    #[test]
    fn long_names_fit_and_stay_distinct() {
        let long = "x".repeat(64);
        let a = lock_name(&["partitions", &long, "a"]);
        let b = lock_name(&["partitions", &long, "b"]);
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert_eq!(b.len(), MAX_NAME_LEN);
        assert_ne!(a, b);
        assert!(a.starts_with("logstamp.partitions.xxx"));
    }
}
