//! A histogram by event time counted from a table's rows: for what the line counts cannot
//! answer (an event-time range's partial minutes at either end, a column other than the
//! level, a filter). The zone map says which ID ranges may hold rows of the range, so only
//! those are read.

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};

use super::filter_language::Condition;
use super::log_table::TableSpec;
use super::query::{Count, RANGES_PER_STATEMENT, counts, event_column, push_filter};
use super::zone_map;
use crate::mysql::{DbError, Ident};

/// The statement counting the rows of `ranges` (ID ranges) with an event time in `[from,
/// to)` (Unix seconds) that meet `filter`, per `interval` seconds of event time and value of
/// `by`. Seconds are counted from 1970 by `TIMESTAMPDIFF`, which no session time zone shifts.
pub fn histogram_sql(
    spec: &TableSpec,
    column: &Ident,
    ranges: &[crate::id::IdRange],
    (by, filter): (&Ident, &[Condition]),
    interval: u64,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
) -> (String, Vec<Value>) {
    let bounds = vec!["`id` >= ? AND `id` < ?"; ranges.len()].join(" OR ");
    let mut sql = format!(
        "SELECT TIMESTAMPDIFF(SECOND, TIMESTAMP'1970-01-01 00:00:00', {column}) DIV ? AS `slot`, \
         {by} AS `key`, COUNT(*) FROM {table} WHERE ({bounds}) AND {column} >= ? AND {column} < ?",
        table = spec.table,
    );
    let mut params = vec![Value::UInt(interval.max(1))];
    params.extend(
        ranges
            .iter()
            .flat_map(|r| [Value::UInt(r.start), Value::UInt(r.end)]),
    );
    params.push(zone_map::event_bound(from));
    params.push(zone_map::event_bound(to));
    push_filter(filter, &mut sql, &mut params);
    sql.push_str(" GROUP BY `slot`, `key`");
    (sql, params)
}

/// Counts `spec`'s rows with an event time in `[from, to)` (Unix seconds) meeting `filter`,
/// per `interval` seconds of event time and value of `by`, reading only the ID ranges the
/// zone map gives. The same bar may come in several counts (one per statement).
pub async fn histogram<Q: Queryable>(
    conn: &mut Q,
    spec: &TableSpec,
    (by, filter): (&Ident, &[Condition]),
    interval: u64,
    (from, to): (u64, u64),
) -> Result<Vec<Count>, DbError> {
    let column = event_column(spec)?;
    let instant = |s: u64| {
        DateTime::<Utc>::from_timestamp(i64::try_from(s).unwrap_or(i64::MAX), 0)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    };
    let range = (instant(from), instant(to));
    let ranges = zone_map::ranges(conn, &spec.table, range, false).await?;
    let mut all = Vec::new();
    for chunk in ranges.chunks(RANGES_PER_STATEMENT) {
        let (sql, params) = histogram_sql(spec, column, chunk, (by, filter), interval, range);
        let rows: Vec<Row> = conn
            .exec(sql, params)
            .await
            .map_err(DbError::mysql(format!(
                "counting rows of table {} by event time",
                spec.table
            )))?;
        all.extend(counts(rows, by, interval)?);
    }
    Ok(all)
}
