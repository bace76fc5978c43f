//! Queries by time: a time range becomes an ID range, so MySQL reads only the partitions that
//! hold it, plus an optional filter in the filter language (see [`super::filter_language`]).

use std::ops::ControlFlow;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row, TxOpts, Value};
use serde::Serialize;
use serde::ser::SerializeMap;

use super::filter_language::{Condition, Literal, Op};
use super::log_table::TableSpec;
use super::residual;
use super::schema::ColumnType;
use super::text_search;
use super::zone_map;
use crate::id::{IdError, IdRange, Layout};
use crate::mysql::rows::take;
use crate::mysql::{self, DbError, Flavor, Ident, SqlValue};
use crate::time::{ceil_seconds, floor_seconds};

/// One query: the IDs of a time range, filtered, in ID order.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeQuery {
    pub range: IdRange,
    pub filter: Vec<Condition>,
    pub limit: Option<u64>,
}

impl TimeQuery {
    /// Every row stamped in `[from, to)`, unfiltered. IDs carry whole seconds, so `from` is
    /// rounded down and `to` up: a range ending mid-second still covers that second.
    pub fn between(
        layout: &Layout,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<TimeQuery, IdError> {
        Ok(TimeQuery {
            range: layout.id_range(floor_seconds(from), ceil_seconds(to))?,
            filter: Vec::new(),
            limit: None,
        })
    }
}

/// Which end of the range rows are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Ascending IDs: the oldest first.
    #[default]
    OldestFirst,
    /// Descending IDs: the newest first, as a log viewer shows them.
    NewestFirst,
}

/// The statement and its parameters: the ID bounds as unsigned parameters, then each filter
/// value. Column names come from the validated settings and are quoted.
pub fn select_sql(spec: &TableSpec, query: &TimeQuery) -> (String, Vec<Value>) {
    select_sql_in_order(spec, query, Order::OldestFirst)
}

/// [`select_sql`], reading from either end of the range.
pub fn select_sql_in_order(
    spec: &TableSpec,
    query: &TimeQuery,
    order: Order,
) -> (String, Vec<Value>) {
    select_ranges_sql(spec, &[query.range], &query.filter, query.limit, order)
}

/// The statement reading the rows of several ID ranges (in ID order, disjoint) that meet every
/// condition: one `id >= ? AND id < ?` per range, joined by `OR`, which MySQL prunes to the
/// partitions holding them.
pub fn select_ranges_sql(
    spec: &TableSpec,
    ranges: &[IdRange],
    filter: &[Condition],
    limit: Option<u64>,
    order: Order,
) -> (String, Vec<Value>) {
    let mut params = Vec::with_capacity(2 * ranges.len() + filter.len() + 1);
    let bounds = ranges_condition(ranges, &mut params);
    let mut sql = format!(
        "SELECT {} FROM {} WHERE {bounds}",
        selected_columns(spec),
        spec.table
    );
    push_filter(filter, &mut sql, &mut params);
    sql.push_str(match order {
        Order::OldestFirst => " ORDER BY `id`",
        Order::NewestFirst => " ORDER BY `id` DESC",
    });
    if let Some(limit) = limit {
        sql.push_str(" LIMIT ?");
        params.push(Value::UInt(limit));
    }
    (sql, params)
}

/// `id >= ? AND id < ?` per range, joined by `OR` (`FALSE` for none), binding the bounds.
fn ranges_condition(ranges: &[IdRange], params: &mut Vec<Value>) -> String {
    let mut bounds = Vec::with_capacity(ranges.len());
    for range in ranges {
        bounds.push("`id` >= ? AND `id` < ?");
        params.push(Value::UInt(range.start));
        params.push(Value::UInt(range.end));
    }
    match bounds.len() {
        0 => "FALSE".to_string(),
        1 => bounds.join(""),
        _ => format!("({})", bounds.join(" OR ")),
    }
}

/// The ID ranges of `range` a query with `filter` reads: all of it, or, for a search
/// (`contains`, `icontains`), the parts whose text filter may hold the text, at most
/// [`RANGES_PER_STATEMENT`] of them.
pub async fn ranges_to_read<Q: Queryable>(
    conn: &mut Q,
    spec: &TableSpec,
    range: IdRange,
    filter: &[Condition],
) -> Result<Vec<IdRange>, DbError> {
    let ranges = text_search::ranges(conn, &spec.table, range, filter).await?;
    Ok(text_search::at_most(ranges, RANGES_PER_STATEMENT))
}

/// `id`, each mapped column and `payload` (if kept), quoted, as a select list.
fn selected_columns(spec: &TableSpec) -> String {
    let mut columns = vec!["`id`".to_string()];
    columns.extend(spec.columns.iter().map(|c| format!("`{}`", c.name)));
    if spec.payload {
        columns.push("`payload`".into());
    }
    columns.join(", ")
}

/// Appends ` AND column op ?` per condition, binding each value.
pub(super) fn push_filter(filter: &[Condition], sql: &mut String, params: &mut Vec<Value>) {
    for c in filter {
        sql.push_str(&format!(" AND {}", c.op.condition_sql(&c.column)));
        params.push(c.value.to_value());
    }
}

/// The IDs from a bound on, by a locking read (`query --follow`, see [`super::follow`]).
pub fn select_ids_sql(spec: &TableSpec) -> String {
    format!(
        "SELECT `id` FROM {} WHERE `id` >= ? ORDER BY `id` LOCK IN SHARE MODE",
        spec.table
    )
}

/// The rows of the IDs listed that meet the filter, in ID order.
pub fn select_listed_sql(
    spec: &TableSpec,
    ids: &[u64],
    filter: &[Condition],
) -> (String, Vec<Value>) {
    let mut params: Vec<Value> = ids.iter().map(|id| Value::UInt(*id)).collect();
    let marks = vec!["?"; ids.len()].join(", ");
    let mut sql = format!(
        "SELECT {} FROM {} WHERE `id` IN ({marks})",
        selected_columns(spec),
        spec.table
    );
    push_filter(filter, &mut sql, &mut params);
    sql.push_str(" ORDER BY `id`");
    (sql, params)
}

/// The rows of a table whose event time lies in `[from, to)`, through the zone map (see
/// [`crate::store::zone_plan`]): exact, and reading only the ID ranges whose minutes of stamp
/// time hold such rows.
#[derive(Debug, Clone, PartialEq)]
pub struct EventQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub filter: Vec<Condition>,
    pub limit: Option<u64>,
    /// Rows are handed over in this order of IDs.
    pub order: Order,
    /// Only rows past this ID in `order`: where the previous page stopped.
    pub past: Option<u64>,
}

/// ID ranges per statement of a query by event time: a long `OR` list costs the optimizer
/// more than a second statement.
pub const RANGES_PER_STATEMENT: usize = 256;

impl EventQuery {
    /// Every row with an event time in `[from, to)`, unfiltered.
    pub fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> EventQuery {
        EventQuery {
            from,
            to,
            filter: Vec::new(),
            limit: None,
            order: Order::OldestFirst,
            past: None,
        }
    }

    /// `ranges` (disjoint, in ID order, as the zone map gives them) in the order this query
    /// reads them, cut to the IDs past [`EventQuery::past`].
    fn ranges_to_read(&self, ranges: &[IdRange]) -> Vec<IdRange> {
        let cut = |r: &IdRange| match (self.order, self.past) {
            (_, None) => Some(*r),
            (Order::OldestFirst, Some(past)) => {
                let start = r.start.max(past.saturating_add(1));
                (start < r.end).then_some(IdRange { start, end: r.end })
            }
            (Order::NewestFirst, Some(past)) => {
                let end = r.end.min(past);
                (r.start < end).then_some(IdRange {
                    start: r.start,
                    end,
                })
            }
        };
        let mut read: Vec<IdRange> = ranges.iter().filter_map(cut).collect();
        if self.order == Order::NewestFirst {
            read.reverse();
        }
        read
    }

    /// The conditions on the event-time column, then the filter.
    fn conditions(&self, column: &Ident) -> Vec<Condition> {
        let mut conditions = vec![
            Condition {
                column: column.clone(),
                op: Op::Ge,
                value: Literal::Datetime(self.from.naive_utc()),
            },
            Condition {
                column: column.clone(),
                op: Op::Lt,
                value: Literal::Datetime(self.to.naive_utc()),
            },
        ];
        conditions.extend(self.filter.iter().cloned());
        conditions
    }
}

/// The event-time column of the table, or why it has none.
pub fn event_column(spec: &TableSpec) -> Result<&Ident, DbError> {
    spec.event_time.as_ref().ok_or_else(|| {
        DbError::config(
            "store.event_time",
            format!(
                "table {} has no event time to query by: set its event_time and run \
                 `logstamp zonemap rebuild` for the rows already there",
                spec.table
            ),
        )
    })
}

/// Runs a query by event time and hands each row to `each`, in the query's order of IDs, until the rows end or
/// `each` breaks. The zone map and the table are read in one consistent snapshot, so every
/// row committed before it whose event time is in the range is found. Returns the ID ranges
/// read and the number of rows handed over.
pub async fn run_by_event(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &EventQuery,
    mut each: impl FnMut(Record) -> ControlFlow<()>,
) -> Result<(Vec<IdRange>, u64), DbError> {
    let column = event_column(spec)?;
    let context = || format!("querying table {} by event time", spec.table);
    let mut tx = conn
        .start_transaction(snapshot())
        .await
        .map_err(DbError::mysql(context()))?;
    let ranges = zone_map::ranges(&mut tx, &spec.table, (query.from, query.to), false).await?;
    let ranges = searched(&mut tx, spec, ranges, &query.filter).await?;
    let conditions = query.conditions(column);
    let mut count = 0;
    // Disjoint ranges read chunk after chunk in the query's order, each chunk's rows sorted:
    // the rows come in ID order overall.
    'chunks: for chunk in query.ranges_to_read(&ranges).chunks(RANGES_PER_STATEMENT) {
        let limit = match query.limit {
            Some(limit) if count >= limit => break,
            Some(limit) => Some(limit - count),
            None => None,
        };
        let (sql, params) = select_ranges_sql(spec, chunk, &conditions, limit, query.order);
        let mut rows = tx
            .exec_stream::<Row, _, _>(sql, params)
            .await
            .map_err(DbError::mysql(context()))?;
        while let Some(row) = rows.next().await {
            let row = row.map_err(DbError::mysql(context()))?;
            count += 1;
            if each(record(spec, row)?).is_break() {
                break 'chunks;
            }
        }
    }
    tx.commit().await.map_err(DbError::mysql(context()))?;
    Ok((ranges, count))
}

/// The ID ranges a query by event time reads, and the partitions MySQL reads for them.
pub async fn explain_by_event(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &EventQuery,
) -> Result<(Vec<IdRange>, Vec<String>), DbError> {
    let column = event_column(spec)?;
    let ranges = zone_map::ranges(conn, &spec.table, (query.from, query.to), false).await?;
    let ranges = searched(conn, spec, ranges, &query.filter).await?;
    let conditions = query.conditions(column);
    let mut partitions: Vec<String> = Vec::new();
    for chunk in query.ranges_to_read(&ranges).chunks(RANGES_PER_STATEMENT) {
        let (sql, params) = select_ranges_sql(spec, chunk, &conditions, query.limit, query.order);
        for p in explained_partitions(conn, spec, &sql, params).await? {
            if !partitions.contains(&p) {
                partitions.push(p);
            }
        }
    }
    Ok((ranges, partitions))
}

/// The zone map's `ranges` cut to those a search's text filter may hold the text in.
async fn searched<Q: Queryable>(
    conn: &mut Q,
    spec: &TableSpec,
    ranges: Vec<IdRange>,
    filter: &[Condition],
) -> Result<Vec<IdRange>, DbError> {
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
        return Ok(ranges);
    };
    let span = IdRange {
        start: first.start,
        end: last.end,
    };
    let may_hold = text_search::ranges(conn, &spec.table, span, filter).await?;
    Ok(text_search::intersect(&ranges, &may_hold))
}

/// A read-only transaction on one consistent snapshot.
fn snapshot() -> TxOpts {
    let mut options = TxOpts::default();
    options
        .with_isolation_level(IsolationLevel::RepeatableRead)
        .with_consistent_snapshot(true)
        .with_readonly(true);
    options
}

/// The rows of one interval of ID time with one value of the column counted by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// Unix seconds the interval starts at (a multiple of the interval).
    pub start: u64,
    /// The column's value as text; NULL is empty, as a rollup counts a missing value.
    pub key: String,
    pub n: u64,
}

/// Counts the query's rows per `interval` seconds of their ID time (intervals aligned to Unix
/// time) and per value of column `by`, in one pass over `ranges` (the query's range, or the
/// parts of it a search reads): the partitions that do not hold them are not read.
pub fn histogram_sql(
    spec: &TableSpec,
    query: &TimeQuery,
    ranges: &[IdRange],
    by: &Ident,
    interval: u64,
) -> (String, Vec<Value>) {
    let mut params = vec![
        Value::UInt(spec.scheme.layout.epoch_unix_seconds()),
        Value::UInt(interval.max(1)),
    ];
    let bounds = ranges_condition(ranges, &mut params);
    let mut sql = format!(
        "SELECT (? + (`id` >> 32)) DIV ? AS `slot`, {by} AS `key`, COUNT(*) FROM {} \
         WHERE {bounds}",
        spec.table
    );
    push_filter(&query.filter, &mut sql, &mut params);
    sql.push_str(" GROUP BY `slot`, `key`");
    (sql, params)
}

/// Runs [`histogram_sql`].
pub async fn histogram(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &TimeQuery,
    by: &Ident,
    interval: u64,
) -> Result<Vec<Count>, DbError> {
    let ranges = ranges_to_read(conn, spec, query.range, &query.filter).await?;
    let (sql, params) = histogram_sql(spec, query, &ranges, by, interval);
    let rows: Vec<Row> = conn
        .exec(sql, params)
        .await
        .map_err(DbError::mysql(format!(
            "counting rows of table {}",
            spec.table
        )))?;
    counts(rows, by, interval)
}

/// The rows of a count per interval (`slot`, then the value of `by`, then the count), read
/// from the table or from a rollup.
pub(super) fn counts(rows: Vec<Row>, by: &Ident, interval: u64) -> Result<Vec<Count>, DbError> {
    rows.into_iter()
        .map(|mut row| {
            let slot: u64 = take(&mut row, 0, "interval")?;
            let key: Value = take(&mut row, 1, by.as_str())?;
            let n: u64 = take(&mut row, 2, "count")?;
            Ok(Count {
                start: slot.saturating_mul(interval.max(1)),
                key: key_text(&key),
                n,
            })
        })
        .collect()
}

/// A value counted by, as text: what it holds, or empty for NULL.
pub fn key_text(value: &Value) -> String {
    match value {
        Value::NULL => String::new(),
        Value::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        other => other.as_sql(true),
    }
}

/// One row: the ID, then each column by name, as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub id: u64,
    pub columns: Vec<(String, serde_json::Value)>,
}

/// `{"id": .., "column": .., ...}` in table order, the ID as an exact integer.
impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.columns.len() + 1))?;
        map.serialize_entry("id", &self.id)?;
        for (name, value) in &self.columns {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Runs the query and hands each row to `each`, as it arrives, until the rows end or `each`
/// breaks. Returns the number of rows handed over.
pub async fn run(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &TimeQuery,
    each: impl FnMut(Record) -> ControlFlow<()>,
) -> Result<u64, DbError> {
    run_in_order(conn, spec, query, Order::OldestFirst, each).await
}

/// [`run`], reading from either end of the range.
pub async fn run_in_order(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &TimeQuery,
    order: Order,
    each: impl FnMut(Record) -> ControlFlow<()>,
) -> Result<u64, DbError> {
    run_merged(std::slice::from_mut(conn), spec, query, order, each).await
}

/// A search with a limit reads its range in windows from the end it reads first, each
/// window's text filter and then its rows before the next window's: it stops reading the
/// filter (and the table) once it has its rows. The first window is this many IDs (an hour of
/// ID time); each next one is [`WINDOW_GROWTH`] times longer, so a search that finds few rows
/// reads the range in a few windows.
const FIRST_WINDOW_IDS: u64 = 3_600 << 32;
const WINDOW_GROWTH: u64 = 4;

/// The windows of `range` a query reads in turn (disjoint, in the query's order): the whole
/// range, or, `stepped`, windows from the end read first (see [`FIRST_WINDOW_IDS`]).
fn windows(range: IdRange, order: Order, stepped: bool) -> Vec<IdRange> {
    if !stepped || range.start >= range.end {
        return vec![range];
    }
    let mut windows = Vec::new();
    let mut size = FIRST_WINDOW_IDS;
    let (mut start, mut end) = (range.start, range.end);
    while start < end {
        let window = match order {
            Order::NewestFirst => IdRange {
                start: end.saturating_sub(size).max(start),
                end,
            },
            Order::OldestFirst => IdRange {
                start,
                end: start.saturating_add(size).min(end),
            },
        };
        match order {
            Order::NewestFirst => end = window.start,
            Order::OldestFirst => start = window.end,
        }
        windows.push(window);
        size = size.saturating_mul(WINDOW_GROWTH);
    }
    windows
}

/// [`run_in_order`] over several databases that hold disjoint rows of one table (the shards of
/// a store): the statement goes to every one at once, and their rows, each stream in ID order,
/// are merged by ID as they arrive; the limit applies to the merged rows. One connection reads
/// like [`run_in_order`]. A search with a limit reads window by window (see [`windows`]).
pub async fn run_merged(
    conns: &mut [Conn],
    spec: &TableSpec,
    query: &TimeQuery,
    order: Order,
    mut each: impl FnMut(Record) -> ControlFlow<()>,
) -> Result<u64, DbError> {
    let stepped = query.limit.is_some() && text_search::narrows(&query.filter);
    let mut count = 0;
    for window in windows(query.range, order, stepped) {
        let limit = match query.limit {
            Some(limit) if count >= limit => break,
            Some(limit) => Some(limit - count),
            None => None,
        };
        let (read, broke) =
            run_window(conns, spec, query, (window, limit), order, &mut each).await?;
        count += read;
        if broke {
            break;
        }
    }
    Ok(count)
}

/// [`run_merged`] over one window of its range with a limit of its own; the rows handed over,
/// and whether `each` broke.
async fn run_window(
    conns: &mut [Conn],
    spec: &TableSpec,
    query: &TimeQuery,
    (window, limit): (IdRange, Option<u64>),
    order: Order,
    each: &mut impl FnMut(Record) -> ControlFlow<()>,
) -> Result<(u64, bool), DbError> {
    let context = || format!("querying table {}", spec.table);
    // Each database's text filter covers its own rows.
    let mut statements = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        let ranges = ranges_to_read(conn, spec, window, &query.filter).await?;
        statements.push(select_ranges_sql(
            spec,
            &ranges,
            &query.filter,
            limit,
            order,
        ));
    }
    let mut streams =
        futures_util::future::try_join_all(conns.iter_mut().zip(&statements).map(
            |(conn, (sql, params))| conn.exec_stream::<Row, _, _>(sql.as_str(), params.clone()),
        ))
        .await
        .map_err(DbError::mysql(context()))?;
    // Each stream's next row; the heap orders the streams by it, so a stream is read on only
    // when its row is taken. Max-heap: the key is the ID's distance from the end read first.
    let key = |id: u64| match order {
        Order::OldestFirst => u64::MAX - id,
        Order::NewestFirst => id,
    };
    let mut heads: Vec<Option<Record>> = Vec::with_capacity(streams.len());
    let mut heap = std::collections::BinaryHeap::with_capacity(streams.len());
    for (i, stream) in streams.iter_mut().enumerate() {
        let head = match stream.next().await {
            Some(row) => Some(record(spec, row.map_err(DbError::mysql(context()))?)?),
            None => None,
        };
        if let Some(r) = &head {
            heap.push((key(r.id), i));
        }
        heads.push(head);
    }
    let mut count = 0;
    while let Some((_, i)) = heap.pop() {
        let Some(taken) = heads[i].take() else {
            continue;
        };
        count += 1;
        if each(taken).is_break() {
            return Ok((count, true));
        }
        if limit.is_some_and(|limit| count >= limit) {
            break;
        }
        if let Some(row) = streams[i].next().await {
            let next = record(spec, row.map_err(DbError::mysql(context()))?)?;
            heap.push((key(next.id), i));
            heads[i] = Some(next);
        }
    }
    Ok((count, false))
}

/// The partitions MySQL reads for the query, from its `EXPLAIN` (see [`explain`]).
pub async fn explain_partitions(
    conn: &mut Conn,
    spec: &TableSpec,
    query: &TimeQuery,
) -> Result<Vec<String>, DbError> {
    let ranges = ranges_to_read(conn, spec, query.range, &query.filter).await?;
    let (sql, params) = select_ranges_sql(
        spec,
        &ranges,
        &query.filter,
        query.limit,
        Order::OldestFirst,
    );
    explained_partitions(conn, spec, &sql, params).await
}

/// The partitions in the `EXPLAIN` of a statement on `spec`'s table.
async fn explained_partitions(
    conn: &mut Conn,
    spec: &TableSpec,
    sql: &str,
    params: Vec<Value>,
) -> Result<Vec<String>, DbError> {
    let context = || format!("explaining a query of table {}", spec.table);
    let explain = explain(mysql::flavor(conn).await?);
    let rows: Vec<Row> = conn
        .exec(format!("{explain} {sql}"), params)
        .await
        .map_err(DbError::mysql(context()))?;
    let mut partitions = Vec::new();
    for mut row in rows {
        let Some(index) = row
            .columns_ref()
            .iter()
            .position(|c| c.name_str().eq_ignore_ascii_case("partitions"))
        else {
            return Err(DbError::Invariant(format!(
                "{}: EXPLAIN shows no partitions column",
                context()
            )));
        };
        let listed: Option<String> = take(&mut row, index, "EXPLAIN partitions")?;
        partitions.extend(
            listed
                .iter()
                .flat_map(|l| l.split(','))
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
        );
    }
    Ok(partitions)
}

/// The `EXPLAIN` that shows a `partitions` column: MariaDB shows it only for `EXPLAIN
/// PARTITIONS`, which MySQL 8 no longer accepts (its plain `EXPLAIN` always shows it).
pub fn explain(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::MariaDb => "EXPLAIN PARTITIONS",
        Flavor::MySql => "EXPLAIN",
    }
}

/// A row of `spec`'s table, read with [`selected_columns`], as a record. The `payload`, if
/// kept, is the whole document again: its residual with the columns put back (see
/// [`residual::rejoin`]; a whole document, as `store.payload = "full"` keeps it, stays as it is).
pub(crate) fn record(spec: &TableSpec, mut row: Row) -> Result<Record, DbError> {
    let id: u64 = take(&mut row, 0, "id")?;
    let mut columns = Vec::with_capacity(spec.columns.len() + 1);
    for (i, c) in spec.columns.iter().enumerate() {
        let value: Value = take(&mut row, i + 1, &c.name)?;
        columns.push((c.name.clone(), to_json(value, c.column_type, &c.name)?));
    }
    if spec.payload {
        let value: Value = take(&mut row, spec.columns.len() + 1, "payload")?;
        let kept = match to_json(value, ColumnType::Json, "payload")? {
            serde_json::Value::Null => None,
            kept => Some(kept),
        };
        let paths: Vec<Option<Vec<residual::Token>>> = spec
            .columns
            .iter()
            .map(|c| residual::parse_pointer(&c.pointer))
            .collect();
        let document = residual::rejoin(
            kept,
            paths
                .iter()
                .map(Option::as_deref)
                .zip(columns.iter().map(|(_, value)| value)),
        );
        columns.push(("payload".into(), document));
    }
    Ok(Record { id, columns })
}

/// A column value as JSON, as [`residual::as_json`] reads it back: numbers exact, DATETIME as
/// RFC 3339 UTC text, JSON as JSON.
fn to_json(
    value: Value,
    column_type: ColumnType,
    name: &str,
) -> Result<serde_json::Value, DbError> {
    if value == Value::NULL {
        return Ok(serde_json::Value::Null);
    }
    let bad = |value: &Value| {
        DbError::Invariant(format!(
            "column {name} holds {value:?}, which is not a {column_type:?} value"
        ))
    };
    let text = |value: Value| -> Result<String, DbError> {
        match value {
            Value::Bytes(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            other => Err(bad(&other)),
        }
    };
    let sql = match column_type {
        ColumnType::String | ColumnType::Text => SqlValue::Text(text(value)?),
        ColumnType::Int => SqlValue::Int(
            mysql_async::from_value_opt::<i64>(value.clone()).map_err(|_| bad(&value))?,
        ),
        ColumnType::Uint => SqlValue::Uint(
            mysql_async::from_value_opt::<u64>(value.clone()).map_err(|_| bad(&value))?,
        ),
        ColumnType::Double => SqlValue::Double(
            mysql_async::from_value_opt::<f64>(value.clone()).map_err(|_| bad(&value))?,
        ),
        ColumnType::Bool => SqlValue::Bool(
            mysql_async::from_value_opt::<i64>(value.clone()).map_err(|_| bad(&value))? != 0,
        ),
        ColumnType::Datetime => SqlValue::Datetime(datetime(&value).ok_or_else(|| bad(&value))?),
        ColumnType::Json => SqlValue::Json(text(value)?),
    };
    Ok(residual::as_json(&sql))
}

/// A DATETIME (stored as UTC).
fn datetime(value: &Value) -> Option<NaiveDateTime> {
    match value {
        Value::Date(y, mo, d, h, mi, s, us) => {
            NaiveDate::from_ymd_opt(i32::from(*y), u32::from(*mo), u32::from(*d))?
                .and_hms_micro_opt(u32::from(*h), u32::from(*mi), u32::from(*s), *us)
        }
        Value::Bytes(bytes) => {
            NaiveDateTime::parse_from_str(std::str::from_utf8(bytes).ok()?, "%Y-%m-%d %H:%M:%S%.f")
                .ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Sources};
    use crate::store::filter_language::{FilterError, parse_filter};

    fn spec() -> TableSpec {
        let sources = Sources {
            env: Some(Default::default()),
            ..Default::default()
        };
        Settings::load(&sources).unwrap().log_table()
    }

    fn parse(text: &str) -> Result<Vec<Condition>, FilterError> {
        parse_filter(text, &spec().columns)
    }

    #[test]
    fn explain_shows_partitions_on_either_server() {
        // MySQL 8 refuses `EXPLAIN PARTITIONS`; MariaDB's plain EXPLAIN has no partitions.
        assert_eq!(explain(Flavor::MariaDb), "EXPLAIN PARTITIONS");
        assert_eq!(explain(Flavor::MySql), "EXPLAIN");
    }

    #[test]
    fn a_search_with_a_limit_reads_growing_windows_from_its_first_end() {
        let hour = FIRST_WINDOW_IDS;
        let day = IdRange {
            start: 7,
            end: 7 + 24 * hour,
        };
        assert_eq!(windows(day, Order::NewestFirst, false), vec![day]);
        let newest = windows(day, Order::NewestFirst, true);
        let r = |start, end| IdRange { start, end };
        assert_eq!(
            newest,
            vec![
                r(day.end - hour, day.end),
                r(day.end - 5 * hour, day.end - hour),
                r(day.end - 21 * hour, day.end - 5 * hour),
                r(day.start, day.end - 21 * hour),
            ]
        );
        let oldest = windows(day, Order::OldestFirst, true);
        assert_eq!(oldest[0], r(day.start, day.start + hour));
        assert_eq!(oldest.last().unwrap().end, day.end);
        for w in oldest.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        let empty = r(5, 5);
        assert_eq!(windows(empty, Order::NewestFirst, true), vec![empty]);
    }

    #[test]
    fn an_event_query_reads_its_ranges_in_its_order_past_the_cursor() {
        let r = |start, end| IdRange { start, end };
        let ranges = [r(10, 20), r(30, 40), r(50, 60)];
        let at = |order, past| {
            let mut query = EventQuery::between(Utc::now(), Utc::now());
            query.order = order;
            query.past = past;
            query.ranges_to_read(&ranges)
        };
        assert_eq!(at(Order::OldestFirst, None), ranges);
        assert_eq!(
            at(Order::NewestFirst, None),
            [r(50, 60), r(30, 40), r(10, 20)]
        );
        // Past ID 35: oldest first the rows after it, newest first the rows before it.
        assert_eq!(at(Order::OldestFirst, Some(35)), [r(36, 40), r(50, 60)]);
        assert_eq!(at(Order::NewestFirst, Some(35)), [r(30, 35), r(10, 20)]);
        // A cursor on a range's last ID leaves nothing of it; past the ends, nothing at all.
        assert_eq!(at(Order::OldestFirst, Some(39)), [r(50, 60)]);
        assert_eq!(at(Order::NewestFirst, Some(30)), [r(10, 20)]);
        assert_eq!(at(Order::OldestFirst, Some(u64::MAX)), []);
        assert_eq!(at(Order::NewestFirst, Some(0)), []);
    }

    #[test]
    fn a_search_has_no_wildcards() {
        let mut params = Vec::new();
        let mut sql = String::new();
        push_filter(
            &parse("message contains '50%_\\\\' and host icontains 'Web'").unwrap(),
            &mut sql,
            &mut params,
        );
        assert_eq!(
            sql,
            " AND LOCATE(?, `message`) > 0 AND LOCATE(LOWER(?), LOWER(`host`)) > 0"
        );
        assert_eq!(
            params,
            [
                Value::Bytes(b"50%_\\".to_vec()),
                Value::Bytes(b"Web".to_vec())
            ]
        );
    }

    #[test]
    fn the_statement_binds_every_value() {
        let s = spec();
        let query = TimeQuery {
            range: IdRange {
                start: 1 << 63,
                end: u64::MAX,
            },
            filter: parse("level = 'x' and host like 'a%'").unwrap(),
            limit: Some(10),
        };
        let (sql, params) = select_sql(&s, &query);
        assert_eq!(
            sql,
            "SELECT `id`, `event_time`, `level`, `host`, `service`, `message`, `payload` \
             FROM `logs` WHERE `id` >= ? AND `id` < ? AND `level` = ? AND `host` LIKE ? \
             ORDER BY `id` LIMIT ?"
        );
        assert_eq!(
            params,
            [
                Value::UInt(1 << 63),
                Value::UInt(u64::MAX),
                Value::Bytes(b"x".to_vec()),
                Value::Bytes(b"a%".to_vec()),
                Value::UInt(10)
            ]
        );
    }

    #[test]
    fn newest_first_and_histogram_statements_bind_every_value() {
        let s = spec();
        let query = TimeQuery {
            range: IdRange { start: 5, end: 9 },
            filter: parse("host = 'h'").unwrap(),
            limit: Some(3),
        };
        let (sql, params) = select_sql_in_order(&s, &query, Order::NewestFirst);
        assert!(
            sql.ends_with("AND `host` = ? ORDER BY `id` DESC LIMIT ?"),
            "{sql}"
        );
        assert_eq!(params.len(), 4);
        let by = Ident::new("level").unwrap();
        let (sql, params) = histogram_sql(&s, &query, &[query.range], &by, 60);
        assert_eq!(
            sql,
            "SELECT (? + (`id` >> 32)) DIV ? AS `slot`, `level` AS `key`, COUNT(*) FROM `logs` \
             WHERE `id` >= ? AND `id` < ? AND `host` = ? GROUP BY `slot`, `key`"
        );
        assert_eq!(
            params,
            [
                Value::UInt(0),
                Value::UInt(60),
                Value::UInt(5),
                Value::UInt(9),
                Value::Bytes(b"h".to_vec())
            ]
        );
        assert_eq!(key_text(&Value::NULL), "");
        assert_eq!(key_text(&Value::UInt(7)), "7");
    }

    #[test]
    fn values_become_json() {
        use serde_json::json;
        let j = |v: Value, t: ColumnType| to_json(v, t, "c").unwrap();
        assert_eq!(j(Value::NULL, ColumnType::Int), json!(null));
        assert_eq!(j(Value::UInt(u64::MAX), ColumnType::Uint), json!(u64::MAX));
        assert_eq!(j(Value::Int(-3), ColumnType::Int), json!(-3));
        assert_eq!(j(Value::Double(0.5), ColumnType::Double), json!(0.5));
        assert_eq!(j(Value::Int(1), ColumnType::Bool), json!(true));
        assert_eq!(
            j(
                Value::Date(2040, 3, 5, 12, 0, 1, 250_000),
                ColumnType::Datetime
            ),
            json!("2040-03-05T12:00:01.250Z")
        );
        assert_eq!(
            j(
                Value::Bytes(b"2040-03-05 12:00:01.250".to_vec()),
                ColumnType::Datetime
            ),
            json!("2040-03-05T12:00:01.250Z")
        );
        assert_eq!(
            j(Value::Bytes(br#"{"a":[1]}"#.to_vec()), ColumnType::Json),
            json!({"a": [1]})
        );
        assert_eq!(
            j(Value::Bytes(b"text".to_vec()), ColumnType::String),
            json!("text")
        );
        assert!(to_json(Value::Bytes(b"x".to_vec()), ColumnType::Uint, "c").is_err());
        let record = Record {
            id: u64::MAX,
            columns: vec![("level".into(), json!("info")), ("a".into(), json!(null))],
        };
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            r#"{"id":18446744073709551615,"level":"info","a":null}"#
        );
    }
}
