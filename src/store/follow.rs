//! `query --follow`: a table's rows as they are committed, like `tail -f`, never skipping or
//! repeating one, although IDs are not committed in ID order: each worker stamps a batch, then
//! writes it, and a worker's earlier block can commit after another's later one (or after a
//! retry). Following by "IDs above the last one printed" would skip those rows.
//!
//! The argument. Let `W` be the commit window ([`StoreSettings::commit_window`]:
//! `store.give_up_after` plus a minute). The writer commits a batch only if, at its last
//! statement before `COMMIT` (after every row is inserted), the database's clock reads less than
//! `s + W`, `s` being the second in the batch's lowest ID. The follower keeps a cursor `C` (every
//! row with an ID below `C` has been printed, or will never be committed) and the IDs at or
//! above `C` it has printed. Each poll:
//!
//! 1. reads the database's clock `T` (whole seconds, rounded down);
//! 2. then, in a READ COMMITTED transaction, reads the IDs at or above `C` with a locking read
//!    (`LOCK IN SHARE MODE`). InnoDB makes a locking read wait for the end of any open
//!    transaction that inserted a row it meets, and returns the latest committed rows;
//! 3. prints the rows of the IDs it has not printed, in ID order, and remembers them;
//! 4. raises `C` to the first ID of second `T - W`, forgetting the IDs below it.
//!
//! Step 4 skips nothing: take a row `r`, with second `s < T - W`, that is ever committed. Its
//! batch's check ran at database time `c < s + W < T`, after `r` was inserted; step 2 began
//! after `T` was read, so it met `r`: committed (and read it), still open (and waited for it to
//! end, then read it if it committed), or rolled back, and then `r` is never committed (the
//! next owner stamps the messages anew, with other IDs). Nothing is printed twice: IDs at or
//! above `C` are remembered once printed, and nothing below `C` is read again.
//!
//! It assumes the database's clock does not step back, and that the writers' `give_up_after`
//! is not longer than the follower's. Each poll re-reads the IDs of the last `W` of stamp time
//! (6 minutes by default; IDs only: whole rows are read only for new IDs). The locking read
//! holds shared locks on committed rows only until its transaction ends at once; under READ
//! COMMITTED it takes no gap locks, so writers inserting meanwhile do not wait.
//!
//! [`StoreSettings::commit_window`]: crate::store::settings::StoreSettings::commit_window

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row, TxOpts, Value};

use super::filter_language::Condition;
use super::log_table::TableSpec;
use super::query::{Record, record, select_ids_sql};
use crate::id::Layout;
use crate::mysql::bound::Bound;
use crate::mysql::encode::mysql_value;
use crate::mysql::rows::first;
use crate::mysql::{DbError, SqlValue};

/// Rows fetched per statement once their IDs are known to be new.
const FETCH_CHUNK: usize = 1_000;

/// Where following starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowFrom {
    /// Only rows committed from now on.
    Now,
    /// Every row from this ID on, those already there first.
    Id(u64),
}

/// What to follow and how often to look.
#[derive(Debug, Clone, PartialEq)]
pub struct Follow {
    pub from: FollowFrom,
    /// The commit window of the writers (see the module documentation).
    pub window: Duration,
    pub poll: Duration,
    pub filter: Vec<Condition>,
    /// The bound of each wait of a poll: the clock and the new IDs, then each chunk of rows.
    pub bound: Bound,
}

/// The follower's state: below `below`, every row was printed or never will be; at or above
/// it, `printed` holds what was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    below: u64,
    printed: BTreeSet<u64>,
}

impl Cursor {
    pub fn new(below: u64) -> Cursor {
        Cursor {
            below,
            printed: BTreeSet::new(),
        }
    }

    /// Where the next read starts.
    pub fn below(&self) -> u64 {
        self.below
    }

    /// Of IDs read at or above the cursor, those not printed yet, in ID order; they count as
    /// printed from now on.
    pub fn take_new(&mut self, ids: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut new: Vec<u64> = ids
            .into_iter()
            .filter(|id| *id >= self.below && self.printed.insert(*id))
            .collect();
        new.sort_unstable();
        new
    }

    /// Raises the cursor to `settled` (the first ID no row below which is still to come),
    /// forgetting the printed IDs below it. A lower value changes nothing.
    pub fn settle(&mut self, settled: u64) {
        if settled > self.below {
            self.below = settled;
            self.printed = self.printed.split_off(&settled);
        }
    }

    /// IDs remembered (at or above the cursor).
    pub fn remembered(&self) -> usize {
        self.printed.len()
    }
}

/// The first ID no row below which can still be committed, at database time `now` (Unix
/// seconds), for writers with commit window `window`.
pub fn settled_below(layout: &Layout, now: u64, window: Duration) -> u64 {
    let seconds = now.saturating_sub(window.as_secs());
    i64::try_from(seconds)
        .ok()
        .and_then(|s| layout.first_id_at(s).ok())
        .unwrap_or(0)
}

/// A time in Unix seconds as a DATETIME value (UTC).
pub(crate) fn datetime_value(unix_seconds: u64) -> Value {
    let t = i64::try_from(unix_seconds)
        .ok()
        .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .naive_utc();
    mysql_value(&SqlValue::Datetime(t))
}

/// Follows `spec`'s table, handing each new row to `each` (in ID order within a poll) until
/// `each` breaks. Returns the rows handed over. Runs until then: the caller stops it by
/// dropping the future, or a wait past `follow.bound` ends it.
pub async fn follow(
    conn: &mut Conn,
    spec: &TableSpec,
    layout: &Layout,
    follow: &Follow,
    mut each: impl FnMut(Record) -> ControlFlow<()>,
) -> Result<u64, DbError> {
    let what = || format!("following {}", spec.table);
    let now = follow.bound.wait(what, database_now(conn, spec)).await?;
    let mut cursor = Cursor::new(match follow.from {
        FollowFrom::Id(id) => id,
        FollowFrom::Now => settled_below(layout, now, follow.window),
    });
    let mut count = 0;
    if follow.from == FollowFrom::Now {
        // What is committed already is not new: remember it without printing it.
        let below = cursor.below();
        let ids = follow
            .bound
            .wait(what, locked_ids(conn, spec, below))
            .await?;
        cursor.take_new(ids);
    }
    loop {
        let new_ids = async {
            let now = database_now(conn, spec).await?;
            let ids = locked_ids(conn, spec, cursor.below()).await?;
            Ok::<_, DbError>((now, cursor.take_new(ids)))
        };
        let (now, new) = follow.bound.wait(what, new_ids).await?;
        for chunk in new.chunks(FETCH_CHUNK) {
            let fetched = fetch(conn, spec, chunk, &follow.filter);
            // Printing is outside the bound: a slow reader of the output is no hung server.
            for record in follow.bound.wait(what, fetched).await? {
                count += 1;
                if each(record).is_break() {
                    return Ok(count);
                }
            }
        }
        cursor.settle(settled_below(layout, now, follow.window));
        tokio::time::sleep(follow.poll).await;
    }
}

/// The database's clock, in Unix seconds (rounded down).
async fn database_now(conn: &mut Conn, spec: &TableSpec) -> Result<u64, DbError> {
    let row: Option<Row> = conn
        .query_first("SELECT CAST(UTC_TIMESTAMP() AS CHAR)")
        .await
        .map_err(DbError::mysql(format!(
            "following {}: reading the clock",
            spec.table
        )))?;
    let text: Option<String> = first(row, "UTC_TIMESTAMP()")?;
    text.and_then(|t| NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S").ok())
        .and_then(|t| u64::try_from(t.and_utc().timestamp()).ok())
        .ok_or_else(|| DbError::Invariant("the server's UTC_TIMESTAMP() is not a time".into()))
}

/// The IDs at or above `from`, by a locking read that waits out transactions still writing
/// rows among them (step 2 of the module documentation).
async fn locked_ids(conn: &mut Conn, spec: &TableSpec, from: u64) -> Result<Vec<u64>, DbError> {
    let context = || format!("following {}: reading new IDs", spec.table);
    let mut options = TxOpts::default();
    options.with_isolation_level(IsolationLevel::ReadCommitted);
    let mut tx = conn
        .start_transaction(options)
        .await
        .map_err(DbError::mysql(context()))?;
    let ids: Vec<u64> = tx
        .exec(select_ids_sql(spec), (from,))
        .await
        .map_err(DbError::mysql(context()))?;
    tx.commit().await.map_err(DbError::mysql(context()))?;
    Ok(ids)
}

/// The rows of `ids` that meet the filter, in ID order.
async fn fetch(
    conn: &mut Conn,
    spec: &TableSpec,
    ids: &[u64],
    filter: &[Condition],
) -> Result<Vec<Record>, DbError> {
    let (sql, params) = super::query::select_listed_sql(spec, ids, filter);
    let context = || format!("following {}: reading new rows", spec.table);
    let mut rows = conn
        .exec_stream::<Row, _, _>(sql, params)
        .await
        .map_err(DbError::mysql(context()))?;
    let mut records = Vec::with_capacity(ids.len());
    while let Some(row) = rows.next().await {
        records.push(record(spec, row.map_err(DbError::mysql(context()))?)?);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_lower_id_is_printed_once_and_nothing_twice() {
        let mut cursor = Cursor::new(100);
        // 120 and 130 committed first; 110 (an earlier block) later.
        assert_eq!(cursor.take_new([130, 120]), [120, 130]);
        assert_eq!(cursor.take_new([120, 130]), Vec::<u64>::new());
        assert_eq!(cursor.take_new([110, 120, 130]), [110]);
        // Below the cursor nothing is new, even if read again.
        assert_eq!(cursor.take_new([90]), Vec::<u64>::new());
        cursor.settle(125);
        assert_eq!(cursor.below(), 125);
        assert_eq!(cursor.remembered(), 1);
        assert_eq!(cursor.take_new([130, 140]), [140]);
        // The cursor never moves back.
        cursor.settle(50);
        assert_eq!(cursor.below(), 125);
    }

    #[test]
    fn the_settled_id_is_the_window_before_the_clock() {
        let layout = Layout::new(10, 0).unwrap();
        assert_eq!(
            settled_below(&layout, 1_000, Duration::from_secs(360)),
            640 << 32
        );
        assert_eq!(settled_below(&layout, 100, Duration::from_secs(360)), 0);
    }
}
