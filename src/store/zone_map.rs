//! The zone map in MySQL (`logstamp_zone_map`, see [`super::zone_plan`]): the upsert each
//! batch adds in its own transaction, the ID ranges an event-time range reads, the rows
//! forgotten with dropped partitions, and the rebuild from a table's rows.
//!
//! Batches add to it with `INSERT ... ON DUPLICATE KEY UPDATE min = LEAST(..), max =
//! GREATEST(..)` inside the transaction that claims the batch's offset, as rollups do, so the
//! zone map holds exactly the committed rows' buckets: a query that reads it and the table in
//! one snapshot finds every committed row whose event time is in its range.

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row as MysqlRow, TxOpts, Value};
use serde::Serialize;

use super::rebuild::in_steps;
use super::zone_plan::{ZonePlan, ZoneRow, bucket_start, id_ranges};
use crate::id::{IdRange, Layout};
use crate::mysql::bound::Bound;
use crate::mysql::encode::mysql_value;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::rows::take;
use crate::mysql::{DbError, Ident, SqlValue};

/// The zone map's table (migration 0014).
pub const ZONE_MAP_TABLE: &str = "logstamp_zone_map";

/// A rebuild recomputes this many IDs' worth of buckets (a day of ID time) per transaction.
pub const REBUILD_STEP_IDS: u64 = 86_400 << 32;

/// The upsert a batch adds its zone rows with: the text before and after the rows' values,
/// and the values per row.
pub fn upsert_statement() -> (String, String, usize) {
    let prefix = format!(
        "INSERT INTO `{ZONE_MAP_TABLE}` (`table_name`, `bucket_start`, `service_id`, \
         `min_event`, `max_event`, `n`) VALUES "
    );
    let suffix = " ON DUPLICATE KEY UPDATE `min_event` = LEAST(`min_event`, VALUES(`min_event`)), \
                  `max_event` = GREATEST(`max_event`, VALUES(`max_event`)), `n` = `n` + VALUES(`n`)"
        .to_string();
    (prefix, suffix, 6)
}

/// A zone row's values in the upsert's column order, with an upper bound of their size.
pub fn upsert_values(table: &Ident, row: &ZoneRow) -> (usize, Vec<Value>) {
    let values = vec![
        Value::Bytes(table.as_str().as_bytes().to_vec()),
        Value::UInt(row.bucket_start),
        Value::UInt(u64::from(row.service_id)),
        datetime_value(row.min_event),
        datetime_value(row.max_event),
        Value::UInt(row.rows),
    ];
    (128, values)
}

fn datetime_value(t: NaiveDateTime) -> Value {
    mysql_value(&SqlValue::Datetime(t))
}

/// An instant as the DATETIME value compared with event times (stored in UTC).
pub fn event_bound(t: DateTime<Utc>) -> Value {
    datetime_value(t.naive_utc())
}

/// The ID ranges (adjacent buckets merged, in ID order) whose buckets may hold a row of
/// `table` with an event time in `[from, to)`. With `lock`, a locking read: it sees the latest
/// committed zone rows and keeps writers from adding to them until the transaction ends.
pub async fn ranges<Q: Queryable>(
    conn: &mut Q,
    table: &Ident,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    lock: bool,
) -> Result<Vec<IdRange>, DbError> {
    let sql = format!(
        "SELECT `bucket_start` FROM `{ZONE_MAP_TABLE}` \
         WHERE `table_name` = ? AND `min_event` < ? AND `max_event` >= ?{}",
        if lock { " LOCK IN SHARE MODE" } else { "" }
    );
    let rows: Vec<MysqlRow> = conn
        .exec(sql, (table.as_str(), event_bound(to), event_bound(from)))
        .await
        .map_err(DbError::mysql(format!("reading the zone map of {table}")))?;
    let mut starts = Vec::with_capacity(rows.len());
    for mut row in rows {
        starts.push(take::<u64>(&mut row, 0, "logstamp_zone_map.bucket_start")?);
    }
    Ok(id_ranges(starts))
}

/// The statements recomputing the zone rows of an ID range from the table: delete them, then
/// insert them again from a `GROUP BY` bucket and service ID over the rows.
pub fn rebuild_sql(plan: &ZonePlan, layout: &Layout) -> (String, String) {
    let delete = format!(
        "DELETE FROM `{ZONE_MAP_TABLE}` \
         WHERE `table_name` = ? AND `bucket_start` >= ? AND `bucket_start` < ?"
    );
    let seconds = super::zone_plan::BUCKET_SECONDS;
    let column = &plan.column;
    let insert = format!(
        "INSERT INTO `{ZONE_MAP_TABLE}` (`table_name`, `bucket_start`, `service_id`, \
         `min_event`, `max_event`, `n`) \
         SELECT ?, ((`id` >> 32) DIV {seconds} * {seconds}) << 32, \
         (`id` >> {counter_bits}) & {max_service}, MIN({column}), MAX({column}), COUNT(*) \
         FROM {table} WHERE `id` >= ? AND `id` < ? AND {column} IS NOT NULL GROUP BY 2, 3",
        counter_bits = layout.counter_bits(),
        max_service = layout.max_service_id(),
        table = plan.table,
    );
    (delete, insert)
}

/// What a zone-map rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ZoneRebuildReport {
    pub table: String,
    pub start_id: u64,
    pub end_id: u64,
    /// Zone rows written.
    pub zones: u64,
    /// Table rows with an event time, counted into them.
    pub counted: u64,
}

/// Recomputes `plan`'s zone rows over the ID range `ids` (widened to whole buckets) from the
/// table, one day of ID time per transaction, under the table's lock.
///
/// Safe while batches are written, by the argument of [`super::rollup::rebuild`]: each step
/// runs at REPEATABLE READ; its `DELETE` locks the range's zone rows and the gaps between
/// them, and its `INSERT ... SELECT` reads the table with shared next-key locks. A batch
/// committed before the step is in the recomputed rows; a batch still open makes the step wait
/// (or one of them is a deadlock victim and is retried); a batch starting later waits for the
/// step and then widens the recomputed rows with its own. `progress` is told each step's end.
pub async fn rebuild(
    conn: &mut Conn,
    plan: &ZonePlan,
    layout: &Layout,
    ids: IdRange,
    (retry, bound): (RetryPolicy, &Bound),
    mut progress: impl FnMut(u64, &ZoneRebuildReport),
) -> Result<ZoneRebuildReport, DbError> {
    let from = bucket_start(ids.start);
    let to = if ids.end > 0 && bucket_start(ids.end - 1) >= from {
        super::zone_plan::bucket_end(bucket_start(ids.end - 1))
    } else {
        from
    };
    let mut report = ZoneRebuildReport {
        table: plan.table.as_str().to_string(),
        start_id: from,
        end_id: to,
        ..ZoneRebuildReport::default()
    };
    let (delete, insert) = rebuild_sql(plan, layout);
    in_steps(
        conn,
        &plan.table,
        &format!("rebuilding the zone map of {}", plan.table),
        (from, to, REBUILD_STEP_IDS),
        (retry, bound),
        async |conn, start, end| rebuild_step(conn, plan, (&delete, &insert), (start, end)).await,
        |end, (zones, counted)| {
            report.zones += zones;
            report.counted += counted;
            progress(end, &report);
        },
    )
    .await?;
    Ok(report)
}

/// One transaction of a rebuild; returns the zone rows written and the table rows counted.
async fn rebuild_step(
    conn: &mut Conn,
    plan: &ZonePlan,
    (delete, insert): (&str, &str),
    (start, end): (u64, u64),
) -> Result<(u64, u64), DbError> {
    let context = || format!("rebuilding the zone map of {} from ID {start}", plan.table);
    let mut options = TxOpts::default();
    options.with_isolation_level(IsolationLevel::RepeatableRead);
    let mut tx = conn
        .start_transaction(options)
        .await
        .map_err(DbError::mysql(context()))?;
    let table = plan.table.as_str();
    tx.exec_drop(delete, (table, start, end))
        .await
        .map_err(DbError::mysql(context()))?;
    tx.exec_drop(insert, (table, start, end))
        .await
        .map_err(DbError::mysql(context()))?;
    let zones = tx.affected_rows();
    let counted: Option<MysqlRow> = tx
        .exec_first(
            format!(
                "SELECT CAST(COALESCE(SUM(`n`), 0) AS UNSIGNED) FROM `{ZONE_MAP_TABLE}` \
                 WHERE `table_name` = ? AND `bucket_start` >= ? AND `bucket_start` < ?"
            ),
            (table, start, end),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let counted: Option<u64> =
        crate::mysql::rows::first(counted, "the rows counted in a zone map")?;
    tx.commit().await.map_err(DbError::mysql(context()))?;
    Ok((zones, counted.unwrap_or(0)))
}

/// The IDs a rebuild of the whole table covers: from the lowest to past the highest of the
/// table's IDs and of its zone rows' buckets (so stale zone rows are cleared too); `None` when
/// there are neither.
pub async fn id_span(conn: &mut Conn, table: &Ident) -> Result<Option<IdRange>, DbError> {
    let context = || format!("reading the ID span of {table} and its zone map");
    let rows: Option<MysqlRow> = conn
        .query_first(format!("SELECT MIN(`id`), MAX(`id`) FROM {table}"))
        .await
        .map_err(DbError::mysql(context()))?;
    let zones: Option<MysqlRow> = conn
        .exec_first(
            format!(
                "SELECT MIN(`bucket_start`), MAX(`bucket_start`) FROM `{ZONE_MAP_TABLE}` \
                 WHERE `table_name` = ?"
            ),
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let mut span: Option<IdRange> = None;
    for row in [rows, zones].into_iter().flatten() {
        let mut row = row;
        let low: Option<u64> = take(&mut row, 0, "the lowest ID")?;
        let high: Option<u64> = take(&mut row, 1, "the highest ID")?;
        if let Some((low, high)) = low.zip(high) {
            let end = high.saturating_add(1);
            span = Some(match span {
                Some(s) => IdRange {
                    start: s.start.min(low),
                    end: s.end.max(end),
                },
                None => IdRange { start: low, end },
            });
        }
    }
    Ok(span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements() {
        let (prefix, suffix, width) = upsert_statement();
        assert_eq!(width, 6);
        assert!(prefix.starts_with("INSERT INTO `logstamp_zone_map`"));
        assert!(suffix.contains("`min_event` = LEAST(`min_event`, VALUES(`min_event`))"));
        let plan = ZonePlan {
            table: Ident::new("logs").unwrap(),
            table_index: 0,
            column: Ident::new("event_time").unwrap(),
            column_index: 0,
        };
        let (delete, insert) = rebuild_sql(&plan, &Layout::new(10, 0).unwrap());
        assert!(delete.starts_with("DELETE FROM `logstamp_zone_map`"));
        assert!(
            insert.contains("((`id` >> 32) DIV 60 * 60) << 32"),
            "{insert}"
        );
        assert!(insert.contains("(`id` >> 22) & 1023"), "{insert}");
        assert!(
            insert.ends_with("`event_time` IS NOT NULL GROUP BY 2, 3"),
            "{insert}"
        );
    }
}
