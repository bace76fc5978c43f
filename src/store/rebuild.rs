//! Recomputing what is derived from a table's rows (rollups, the zone map) over a time range,
//! one step per transaction, under the table's lock, safely while batches are written.

use mysql_async::Conn;

use std::time::Duration;

use crate::mysql::bound::Bound;
use crate::mysql::lock::{release, table_lock, try_lock};
use crate::mysql::retry::RetryPolicy;
use crate::mysql::{self, DbError, Ident};

/// How long a rebuild waits for the source table's lock (held by partition maintenance).
const LOCK_WAIT_SECONDS: u32 = 60;

/// Deadlock (1213) and lock wait timeout (1205): the step lost to a batch writer and rolled
/// back; it is run again.
const CONFLICT_CODES: &[u16] = &[1205, 1213];

/// Runs `step` over `[from, to)` in pieces of `step_len` (in the range's unit), each
/// retried while it loses to a batch writer, under `source`'s table lock (which partition
/// maintenance also takes, so no partition is split or dropped meanwhile). `done` is told each
/// piece's end and result. `what` names the work in errors and logs. Each wait on the server
/// (a piece, the lock) is within `bound`: a rebuild runs as long as its range needs, but
/// fails when its server stops answering.
pub async fn in_steps<S>(
    conn: &mut Conn,
    source: &Ident,
    what: &str,
    (from, to, step_len): (u64, u64, u64),
    (retry, bound): (RetryPolicy, &Bound),
    mut step: impl AsyncFnMut(&mut Conn, u64, u64) -> Result<S, DbError>,
    mut done: impl FnMut(u64, S),
) -> Result<(), DbError> {
    let database = bound
        .wait(
            || format!("{what}: reading the database"),
            mysql::current_database(conn),
        )
        .await?;
    let lock = table_lock(&database, source.as_str());
    // The server answers a lock wait after LOCK_WAIT_SECONDS itself.
    let taken = bound
        .longer_by(Duration::from_secs(LOCK_WAIT_SECONDS.into()))
        .wait(
            || format!("{what}: taking lock {lock}"),
            try_lock(conn, &lock, LOCK_WAIT_SECONDS),
        )
        .await?;
    if !taken {
        return Err(DbError::Busy(format!(
            "{what}: table {source} stayed locked for {LOCK_WAIT_SECONDS}s (partition \
             maintenance or another rebuild); try again"
        )));
    }
    let ran = async {
        let mut start = from;
        while start < to {
            let end = start.saturating_add(step_len.max(1)).min(to);
            let mut tries = retry.tries();
            let result = loop {
                let piece = step(conn, start, end);
                match bound
                    .wait(|| format!("{what}: step {start}..{end}"), piece)
                    .await
                {
                    Err(e) if lost_to_a_writer(&e) => {
                        let context = format!("{what} (it met a batch writer)");
                        if !tries.wait_after(&context, &e).await {
                            return Err(e);
                        }
                    }
                    result => break result?,
                }
            };
            done(end, result);
            start = end;
        }
        Ok(())
    }
    .await;
    if let Err(e @ DbError::TimedOut { .. }) = ran {
        // Nothing more is asked of a server that stopped answering: the lock goes with the
        // connection, which the caller drops.
        return Err(e);
    }
    let released = bound
        .wait(
            || format!("{what}: releasing lock {lock}"),
            release(conn, &lock),
        )
        .await;
    // The work's own error says more than a failed release after it.
    ran?;
    released
}

/// Only conflicts with writers are retried; anything else (a lost connection also loses the
/// lock) ends the rebuild, which can simply be run again.
fn lost_to_a_writer(error: &DbError) -> bool {
    error
        .server_code()
        .is_some_and(|c| CONFLICT_CODES.contains(&c))
}
