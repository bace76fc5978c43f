//! Line counts in MySQL (`logstamp_line_counts`, see [`super::line_count_plan`]): the upsert
//! each batch adds in its own transaction, histograms in either time summed from them, the
//! rows forgotten with dropped partitions, and the rebuild from a table's rows.
//!
//! Batches add with `INSERT ... ON DUPLICATE KEY UPDATE n = n + VALUES(n)` inside the
//! transaction that claims the batch's offset, as rollups do: a batch is counted exactly once
//! however often it is retried, and a worker killed mid-batch leaves neither rows nor counts.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row as MysqlRow, TxOpts, Value};
use serde::Serialize;

use super::line_count_plan::{CountPlan, CountRow, MINUTE, NO_EVENT, minute_of};
use super::query::{Count, key_text};
use super::rebuild::in_steps;
use crate::id::Layout;
use crate::mysql::bound::Bound;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::rows::{first, take};
use crate::mysql::{DbError, Ident};
use crate::time::format_utc;

/// The line counts' table (migration 0018).
pub const LINE_COUNTS_TABLE: &str = "logstamp_line_counts";

/// A rebuild recomputes a day of ID time per transaction.
pub const REBUILD_STEP_SECONDS: u64 = 86_400;

/// Which time a histogram is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// When the line was stamped: its ID's time.
    Id,
    /// The line's own time, its event-time column.
    Event,
}

impl Time {
    fn column(self) -> &'static str {
        match self {
            Time::Id => "`minute`",
            Time::Event => "`event_minute`",
        }
    }
}

/// The upsert a batch adds its counts with: the text before and after the rows' values, and
/// the values per row.
pub fn upsert_statement() -> (String, String, usize) {
    let prefix = format!(
        "INSERT INTO `{LINE_COUNTS_TABLE}` (`table_name`, `minute`, `service_id`, \
         `event_minute`, `level`, `n`) VALUES "
    );
    (
        prefix,
        " ON DUPLICATE KEY UPDATE `n` = `n` + VALUES(`n`)".into(),
        6,
    )
}

/// A count row's values in the upsert's column order, with an upper bound of their size.
pub fn upsert_values(table: &Ident, row: &CountRow) -> (usize, Vec<Value>) {
    let values = vec![
        Value::Bytes(table.as_str().as_bytes().to_vec()),
        Value::UInt(row.minute),
        Value::UInt(u64::from(row.service_id)),
        Value::UInt(row.event_minute),
        Value::Bytes(row.level.as_bytes().to_vec()),
        Value::UInt(row.n),
    ];
    (128 + row.level.len(), values)
}

/// Counts of `table`'s lines per `interval` seconds (a multiple of a minute) of `time` and per
/// level, over the whole minutes `[from, to)` (Unix seconds), only of the `levels` listed
/// (all when empty). An event-time histogram never counts lines without an event time.
pub async fn histogram<Q: Queryable>(
    conn: &mut Q,
    table: &Ident,
    time: Time,
    levels: &[String],
    interval: u64,
    (from, to): (u64, u64),
) -> Result<Vec<Count>, DbError> {
    let column = time.column();
    let mut sql = format!(
        "SELECT {column} DIV ? AS `slot`, `level`, CAST(SUM(`n`) AS UNSIGNED) \
         FROM `{LINE_COUNTS_TABLE}` WHERE `table_name` = ? AND {column} >= ? AND {column} < ?"
    );
    let mut params = vec![
        Value::UInt(interval.max(1)),
        Value::Bytes(table.as_str().as_bytes().to_vec()),
        Value::UInt(from),
        Value::UInt(to.min(NO_EVENT - 1)),
    ];
    if !levels.is_empty() {
        sql.push_str(&format!(
            " AND `level` IN ({})",
            vec!["?"; levels.len()].join(", ")
        ));
        params.extend(levels.iter().map(|l| Value::Bytes(l.as_bytes().to_vec())));
    }
    sql.push_str(" GROUP BY `slot`, `level`");
    let rows: Vec<MysqlRow> = conn
        .exec(sql, params)
        .await
        .map_err(DbError::mysql(format!(
            "reading the line counts of {table}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            let slot: u64 = take(&mut row, 0, "interval")?;
            let key: Value = take(&mut row, 1, "level")?;
            let n: u64 = take(&mut row, 2, "count")?;
            Ok(Count {
                start: slot.saturating_mul(interval.max(1)),
                key: key_text(&key),
                n,
            })
        })
        .collect()
}

/// The statements recomputing a table's counts of a range of ID minutes from its rows: delete
/// them, then insert them again from a `GROUP BY` over the rows of the matching ID range,
/// computed as [`CountPlan::aggregate`] does: event minutes as seconds from 1970 (not
/// `UNIX_TIMESTAMP`, which depends on the session's time zone and stops at 2038 on MariaDB
/// 10.11), a missing level as "".
pub fn rebuild_sql(plan: &CountPlan, columns: &[String], layout: &Layout) -> (String, String) {
    let delete = format!(
        "DELETE FROM `{LINE_COUNTS_TABLE}` \
         WHERE `table_name` = ? AND `minute` >= ? AND `minute` < ?"
    );
    let event = match plan.event_index.and_then(|i| columns.get(i)) {
        Some(c) => format!(
            "IF(`{c}` IS NULL OR `{c}` < TIMESTAMP'1970-01-01 00:00:00', {NO_EVENT}, \
             TIMESTAMPDIFF(SECOND, TIMESTAMP'1970-01-01 00:00:00', `{c}`) DIV {MINUTE} * {MINUTE})"
        ),
        None => NO_EVENT.to_string(),
    };
    let level = match plan.level_index.and_then(|i| columns.get(i)) {
        Some(c) => format!("COALESCE(`{c}`, '')"),
        None => "''".to_string(),
    };
    let insert = format!(
        "INSERT INTO `{LINE_COUNTS_TABLE}` (`table_name`, `minute`, `service_id`, \
         `event_minute`, `level`, `n`) \
         SELECT ?, ((`id` >> 32) + {epoch}) DIV {MINUTE} * {MINUTE}, \
         (`id` >> {counter_bits}) & {max_service}, {event}, {level}, COUNT(*) \
         FROM {table} WHERE `id` >= ? AND `id` < ? GROUP BY 2, 3, 4, 5",
        epoch = layout.epoch_unix_seconds(),
        counter_bits = layout.counter_bits(),
        max_service = layout.max_service_id(),
        table = plan.table,
    );
    (delete, insert)
}

/// What a rebuild of line counts did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CountsRebuildReport {
    pub table: String,
    pub from: String,
    pub to: String,
    /// Count rows written.
    pub rows: u64,
    /// Table lines counted into them.
    pub counted: u64,
}

/// Recomputes `plan`'s counts over the ID time `[from, to)` (Unix seconds, widened to whole
/// minutes) from the table, one day per transaction, under the table's lock.
///
/// Safe while batches are written, by the argument of [`super::rollup::rebuild`]: each step
/// runs at REPEATABLE READ; its `DELETE` locks the range's count rows and the gaps between
/// them, and its `INSERT ... SELECT` reads the table with shared next-key locks. A batch
/// committed before the step is in the recount; a batch still open makes the step wait (or
/// one of them is a deadlock victim and is retried); a batch starting later waits for the step
/// and then adds its own. `progress` is told each step's end (Unix seconds).
pub async fn rebuild(
    conn: &mut Conn,
    (plan, columns): (&CountPlan, &[String]),
    layout: &Layout,
    (from, to): (u64, u64),
    (retry, bound): (RetryPolicy, &Bound),
    mut progress: impl FnMut(u64, &CountsRebuildReport),
) -> Result<CountsRebuildReport, DbError> {
    let from = minute_of(from);
    let to = to.div_ceil(MINUTE).saturating_mul(MINUTE).max(from);
    let mut report = CountsRebuildReport {
        table: plan.table.as_str().to_string(),
        from: format_utc(from),
        to: format_utc(to),
        ..CountsRebuildReport::default()
    };
    let statements = rebuild_sql(plan, columns, layout);
    in_steps(
        conn,
        &plan.table,
        &format!("rebuilding the line counts of {}", plan.table),
        (from, to, REBUILD_STEP_SECONDS),
        (retry, bound),
        async |conn, start, end| rebuild_step(conn, plan, layout, &statements, (start, end)).await,
        |end, (rows, counted)| {
            report.rows += rows;
            report.counted += counted;
            progress(end, &report);
        },
    )
    .await?;
    Ok(report)
}

/// One transaction of a rebuild; returns the count rows written and the lines counted.
async fn rebuild_step(
    conn: &mut Conn,
    plan: &CountPlan,
    layout: &Layout,
    (delete, insert): &(String, String),
    (start, end): (u64, u64),
) -> Result<(u64, u64), DbError> {
    let context = || {
        format!(
            "rebuilding the line counts of {} from {}",
            plan.table,
            format_utc(start)
        )
    };
    let seconds = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
    let ids = layout
        .id_range(seconds(start), seconds(end))
        .map_err(|e| DbError::Invariant(format!("{}: {e}", context())))?;
    let mut options = TxOpts::default();
    options.with_isolation_level(IsolationLevel::RepeatableRead);
    let mut tx = conn
        .start_transaction(options)
        .await
        .map_err(DbError::mysql(context()))?;
    let table = plan.table.as_str();
    tx.exec_drop(delete.as_str(), (table, start, end))
        .await
        .map_err(DbError::mysql(context()))?;
    tx.exec_drop(insert.as_str(), (table, ids.start, ids.end))
        .await
        .map_err(DbError::mysql(context()))?;
    let rows = tx.affected_rows();
    let counted: Option<MysqlRow> = tx
        .exec_first(
            format!(
                "SELECT CAST(COALESCE(SUM(`n`), 0) AS UNSIGNED) FROM `{LINE_COUNTS_TABLE}` \
                 WHERE `table_name` = ? AND `minute` >= ? AND `minute` < ?"
            ),
            (table, start, end),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let counted: Option<u64> = first(counted, "the lines counted")?;
    tx.commit().await.map_err(DbError::mysql(context()))?;
    Ok((rows, counted.unwrap_or(0)))
}

/// The ID time (Unix seconds) a rebuild of the whole table covers: from the first to past the
/// last of its lines and of its count rows (so stale counts are cleared too); `None` when there
/// are neither.
pub async fn span(
    conn: &mut Conn,
    table: &Ident,
    layout: &Layout,
) -> Result<Option<(u64, u64)>, DbError> {
    let context = || format!("reading the time span of {table} and its line counts");
    let ids: Option<MysqlRow> = conn
        .query_first(format!("SELECT MIN(`id`), MAX(`id`) FROM {table}"))
        .await
        .map_err(DbError::mysql(context()))?;
    let minutes: Option<MysqlRow> = conn
        .exec_first(
            format!(
                "SELECT MIN(`minute`), MAX(`minute`) FROM `{LINE_COUNTS_TABLE}` \
                 WHERE `table_name` = ?"
            ),
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let mut bounds: Vec<(u64, u64)> = Vec::new();
    if let Some(mut row) = ids {
        let low: Option<u64> = take(&mut row, 0, "the lowest ID")?;
        let high: Option<u64> = take(&mut row, 1, "the highest ID")?;
        if let Some((low, high)) = low.zip(high) {
            let second = |id| layout.decode(id).unix_seconds;
            bounds.push((second(low), second(high) + 1));
        }
    }
    if let Some(mut row) = minutes {
        let low: Option<u64> = take(&mut row, 0, "the first minute")?;
        let high: Option<u64> = take(&mut row, 1, "the last minute")?;
        if let Some((low, high)) = low.zip(high) {
            bounds.push((low, high + MINUTE));
        }
    }
    Ok(bounds
        .into_iter()
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rebuild_counts_as_the_writer_does() {
        let plan = CountPlan {
            table: Ident::new("logs").unwrap(),
            table_index: 0,
            event_index: Some(1),
            level_index: Some(0),
        };
        let columns = vec!["level".to_string(), "event_time".to_string()];
        let (delete, insert) = rebuild_sql(&plan, &columns, &Layout::new(10, 60).unwrap());
        assert!(delete.starts_with("DELETE FROM `logstamp_line_counts`"));
        assert!(
            insert.contains("((`id` >> 32) + 60) DIV 60 * 60, (`id` >> 22) & 1023"),
            "{insert}"
        );
        assert!(insert.contains("COALESCE(`level`, '')"), "{insert}");
        assert!(
            insert.contains("`event_time` IS NULL OR `event_time` < TIMESTAMP'1970-01-01"),
            "{insert}"
        );
        let bare = CountPlan {
            event_index: None,
            level_index: None,
            ..plan
        };
        let (_, insert) = rebuild_sql(&bare, &columns, &Layout::new(10, 0).unwrap());
        assert!(
            insert.contains(&format!("{NO_EVENT}, '', COUNT(*)")),
            "{insert}"
        );
    }
}
