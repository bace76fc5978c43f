//! Rollup tables in MySQL: their DDL, the upsert each batch adds in its own transaction, the
//! rebuild of a time range from the raw table, and reading them back.
//!
//! A rollup row is keyed by `bucket` (the UTC start of its minute, hour or day, taken from the
//! record's ID) and the dimension columns. Batches add to it with
//! `INSERT ... ON DUPLICATE KEY UPDATE n = n + VALUES(n)` inside the transaction that claims the
//! batch's offset, so a batch counts exactly once however often it is retried or replayed.

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row as MysqlRow, TxOpts, Value};
use serde::Serialize;

use super::filter_language::Condition;
use super::log_table::read_columns;
use super::query::{Count, counts, push_filter};
use super::schema::ColumnType;
use crate::id::Layout;
use crate::mysql::bound::Bound;
use crate::mysql::encode::{mysql_value, size_bound};
use crate::mysql::retry::RetryPolicy;
use crate::mysql::rows::first;
use crate::mysql::{DbError, Ident};
use crate::store::rebuild::in_steps;
use crate::store::rollup_plan::{Bucket, MeasureKind, RollupPlan, RollupRow};
use crate::store::zone_map;

/// A rebuild recomputes this much time per transaction, so locks are held briefly and progress
/// can be shown. Every bucket size divides it.
pub const REBUILD_STEP_SECONDS: u64 = 86_400;

/// `CREATE TABLE IF NOT EXISTS` for a rollup.
pub fn create_table_sql(plan: &RollupPlan) -> String {
    let mut lines = vec!["  `bucket` DATETIME NOT NULL".to_string()];
    for d in &plan.dimensions {
        let sql_type = match d.column_type {
            ColumnType::String => format!("VARCHAR({})", d.length),
            ColumnType::Int => "BIGINT".to_string(),
            ColumnType::Uint => "BIGINT UNSIGNED".to_string(),
            _ => "BOOLEAN".to_string(),
        };
        lines.push(format!("  {} {sql_type} NOT NULL", d.name));
    }
    lines.push("  `n` BIGINT UNSIGNED NOT NULL".to_string());
    for m in &plan.measures {
        let sql_type = match (m.kind, m.source.column_type) {
            (_, ColumnType::Double) => "DOUBLE",
            (MeasureKind::Sum, _) => "DECIMAL(65,0)",
            (_, ColumnType::Int) => "BIGINT",
            _ => "BIGINT UNSIGNED",
        };
        let null = if m.kind == MeasureKind::Sum {
            "NOT NULL DEFAULT 0"
        } else {
            "NULL"
        };
        lines.push(format!("  {} {sql_type} {null}", m.column));
    }
    let mut key = vec!["`bucket`".to_string()];
    key.extend(plan.dimensions.iter().map(|d| d.name.to_string()));
    lines.push(format!("  PRIMARY KEY ({})", key.join(", ")));
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        plan.name,
        lines.join(",\n")
    )
}

/// Creates the rollup's table if it is missing and `create` (`migrate`; a worker only checks);
/// refuses an existing one whose columns are not the plan's (a rollup changed in the settings
/// needs a new name, or its table dropped and rebuilt). Returns whether it was created.
pub async fn ensure_table(
    conn: &mut Conn,
    plan: &RollupPlan,
    create: bool,
) -> Result<bool, DbError> {
    let existing = read_columns(conn, &plan.name).await?;
    if existing.is_empty() {
        if !create {
            return Err(DbError::catalog(
                plan.name.as_str(),
                format!(
                    "rollup table {} does not exist: run `logstamp migrate`",
                    plan.name
                ),
            ));
        }
        conn.query_drop(create_table_sql(plan))
            .await
            .map_err(DbError::mysql(format!(
                "creating rollup table {}",
                plan.name
            )))?;
        return Ok(true);
    }
    let have: Vec<String> = existing
        .iter()
        .map(|c| c.name.to_ascii_lowercase())
        .collect();
    let want: Vec<String> = plan
        .column_names()
        .iter()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if have != want {
        return Err(DbError::catalog(
            plan.name.as_str(),
            format!(
                "rollup table {} has the columns ({}), the settings say ({}): give the changed \
             rollup a new name, or drop the table, migrate and run `rollup rebuild`",
                plan.name,
                have.join(", "),
                want.join(", ")
            ),
        ));
    }
    Ok(false)
}

/// The upsert a batch adds its aggregate with: the text before and after the rows' values,
/// and the values per row.
pub fn upsert_statement(plan: &RollupPlan) -> (String, String, usize) {
    let names = plan.column_names();
    let columns: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    let prefix = format!("INSERT INTO {} ({}) VALUES ", plan.name, columns.join(", "));
    let mut updates = vec!["`n` = `n` + VALUES(`n`)".to_string()];
    for m in &plan.measures {
        let c = &m.column;
        updates.push(match m.kind {
            MeasureKind::Sum => format!("{c} = {c} + VALUES({c})"),
            // A NULL on either side (no value yet) leaves the other; the comparison is NULL then.
            MeasureKind::Min => {
                format!("{c} = IF({c} IS NULL OR VALUES({c}) < {c}, VALUES({c}), {c})")
            }
            MeasureKind::Max => {
                format!("{c} = IF({c} IS NULL OR VALUES({c}) > {c}, VALUES({c}), {c})")
            }
        });
    }
    let suffix = format!(" ON DUPLICATE KEY UPDATE {}", updates.join(", "));
    (prefix, suffix, names.len())
}

/// A rollup row's values in the upsert's column order, with an upper bound of their size.
pub fn upsert_values(row: &RollupRow) -> (usize, Vec<Value>) {
    let mut values = Vec::with_capacity(2 + row.dimensions.len() + row.measures.len());
    let mut size = 64;
    values.push(mysql_value(&row.bucket));
    for value in &row.dimensions {
        size += size_bound(value);
        values.push(mysql_value(value));
    }
    values.push(Value::UInt(row.n));
    for value in &row.measures {
        size += size_bound(value);
        values.push(mysql_value(value));
    }
    (size, values)
}

/// The half-open time range `[from, to)` widened to whole buckets, in Unix seconds.
pub fn widen_to_buckets(plan: &RollupPlan, from: u64, to: u64) -> (u64, u64) {
    let width = plan.bucket.seconds();
    let start = plan.bucket.start(from);
    let end = to.div_ceil(width).saturating_mul(width);
    (start, end.max(start))
}

/// The statements recomputing `[from, to)` (whole buckets) from the raw table: delete the
/// range's rollup rows, then insert them again from a `GROUP BY` over the raw rows of the
/// matching ID range. Bucket starts are computed as in [`RollupPlan::aggregate`], by adding
/// seconds to 1970-01-01 (not `FROM_UNIXTIME`, which stops at 2038 on MariaDB 10.11), and
/// missing dimensions count as the type's zero, as the writer counts them. For a rollup by
/// event time the insert is [`rebuild_insert`] over the step's ID ranges instead.
pub fn rebuild_sql(plan: &RollupPlan, layout: &Layout) -> (String, String) {
    let delete = format!(
        "DELETE FROM {} WHERE `bucket` >= ? AND `bucket` < ?",
        plan.name
    );
    (
        delete,
        rebuild_insert(plan, layout, "`id` >= ? AND `id` < ?"),
    )
}

/// The `INSERT ... SELECT ... GROUP BY` recomputing a rollup from the source rows meeting
/// `condition`. Buckets of event time are the event time cut to the bucket (stored in UTC).
pub fn rebuild_insert(plan: &RollupPlan, layout: &Layout, condition: &str) -> String {
    let width = plan.bucket.seconds();
    let epoch = layout.epoch_unix_seconds();
    let bucket = match &plan.event_time {
        None => format!(
            "TIMESTAMP'1970-01-01 00:00:00' + INTERVAL (((`id` >> 32) + {epoch}) DIV {width} * {width}) SECOND"
        ),
        Some(event) => {
            let cut = match plan.bucket {
                Bucket::Minute => "%Y-%m-%d %H:%i:00",
                Bucket::Hour => "%Y-%m-%d %H:00:00",
                Bucket::Day => "%Y-%m-%d 00:00:00",
            };
            format!("CAST(DATE_FORMAT({}, '{cut}') AS DATETIME)", event.name)
        }
    };
    let mut select = vec![bucket];
    for d in &plan.dimensions {
        let zero = match d.column_type {
            ColumnType::String => "''",
            ColumnType::Bool => "FALSE",
            _ => "0",
        };
        select.push(format!("COALESCE({}, {zero})", d.name));
    }
    select.push("COUNT(*)".to_string());
    for m in &plan.measures {
        let c = &m.source.name;
        select.push(match m.kind {
            MeasureKind::Sum => format!("COALESCE(SUM({c}), 0)"),
            MeasureKind::Min => format!("MIN({c})"),
            MeasureKind::Max => format!("MAX({c})"),
        });
    }
    let group_by: Vec<String> = (1..=1 + plan.dimensions.len())
        .map(|i| i.to_string())
        .collect();
    let columns: Vec<String> = plan
        .column_names()
        .iter()
        .map(|n| format!("`{n}`"))
        .collect();
    format!(
        "INSERT INTO {} ({}) SELECT {} FROM {} WHERE {condition} GROUP BY {}",
        plan.name,
        columns.join(", "),
        select.join(", "),
        plan.source,
        group_by.join(", ")
    )
}

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    pub rollup: String,
    pub from: String,
    pub to: String,
    /// Rollup rows written.
    pub rows: u64,
    /// Raw rows counted.
    pub counted: u64,
}

/// Recomputes the rollup over `[from, to)` (Unix seconds, widened to whole buckets) from its
/// source table, one day per transaction, under the source table's lock (which partition
/// maintenance also takes, so no partition is dropped or split meanwhile).
///
/// Safe while batches are written: each step runs at REPEATABLE READ, where InnoDB's
/// `INSERT ... SELECT` reads the source with shared next-key locks. A batch committed before
/// the step's locks is in both the deleted and the recomputed rows; a batch still open holds
/// its raw rows, so the step waits for it (or one of them is chosen as a deadlock victim and
/// retried); a batch starting later waits on the locked range and then adds its rows to the
/// recomputed totals. No batch is counted twice or lost. `progress` is told each step's end.
pub async fn rebuild(
    conn: &mut Conn,
    plan: &RollupPlan,
    layout: &Layout,
    (from, to): (u64, u64),
    (retry, bound): (RetryPolicy, &Bound),
    mut progress: impl FnMut(u64, &RebuildReport),
) -> Result<RebuildReport, DbError> {
    let (from, to) = widen_to_buckets(plan, from, to);
    let mut report = RebuildReport {
        rollup: plan.name.as_str().to_string(),
        from: format_time(from),
        to: format_time(to),
        ..RebuildReport::default()
    };
    let (delete, insert) = rebuild_sql(plan, layout);
    in_steps(
        conn,
        &plan.source,
        &format!("rebuilding {}", plan.name),
        (from, to, REBUILD_STEP_SECONDS),
        (retry, bound),
        async |conn, start, end| {
            rebuild_step(conn, plan, layout, (&delete, &insert), (start, end)).await
        },
        |end, (rows, counted)| {
            report.rows += rows;
            report.counted += counted;
            progress(end, &report);
        },
    )
    .await?;
    Ok(report)
}

/// One transaction of a rebuild; returns the rollup rows written and the raw rows counted.
///
/// By event time, the raw rows of the step's buckets can be anywhere in the table: the step
/// reads the zone map's ID ranges that may hold them with a locking read, after its `DELETE`
/// (which locks the rollup's rows and gaps of the range). A batch that committed before that
/// read is in the ranges read and in the recount; one still open holds its zone rows, so the
/// read waits for it; one starting later waits for the step's locks (on the zone rows, or on
/// the rollup rows it adds to) and then adds to the recount. So by event time too no batch is
/// counted twice or lost.
async fn rebuild_step(
    conn: &mut Conn,
    plan: &RollupPlan,
    layout: &Layout,
    (delete, insert): (&str, &str),
    (start, end): (u64, u64),
) -> Result<(u64, u64), DbError> {
    let context = || format!("rebuilding {} from {}", plan.name, format_time(start));
    let mut options = TxOpts::default();
    options.with_isolation_level(IsolationLevel::RepeatableRead);
    let mut tx = conn
        .start_transaction(options)
        .await
        .map_err(DbError::mysql(context()))?;
    let bounds = (datetime(start), datetime(end));
    tx.exec_drop(delete, bounds.clone())
        .await
        .map_err(DbError::mysql(context()))?;
    let rows = match &plan.event_time {
        None => {
            let ids = layout
                .id_range(to_i64(start), to_i64(end))
                .map_err(|e| DbError::Invariant(format!("{}: {e}", context())))?;
            tx.exec_drop(insert, (ids.start, ids.end))
                .await
                .map_err(DbError::mysql(context()))?;
            tx.affected_rows()
        }
        Some(event) => {
            let instant = |s: u64| {
                DateTime::<Utc>::from_timestamp(to_i64(s), 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
            };
            let ranges =
                zone_map::ranges(&mut tx, &plan.source, (instant(start), instant(end)), true)
                    .await?;
            if ranges.is_empty() {
                0
            } else {
                let ids = vec!["`id` >= ? AND `id` < ?"; ranges.len()].join(" OR ");
                let condition = format!("({ids}) AND {0} >= ? AND {0} < ?", event.name);
                let mut params: Vec<Value> = ranges
                    .iter()
                    .flat_map(|r| [Value::UInt(r.start), Value::UInt(r.end)])
                    .collect();
                params.extend([bounds.0.clone(), bounds.1.clone()]);
                tx.exec_drop(rebuild_insert(plan, layout, &condition), params)
                    .await
                    .map_err(DbError::mysql(context()))?;
                tx.affected_rows()
            }
        }
    };
    let counted: Option<MysqlRow> = tx
        .exec_first(
            format!(
                "SELECT CAST(COALESCE(SUM(`n`), 0) AS UNSIGNED) FROM {} \
                 WHERE `bucket` >= ? AND `bucket` < ?",
                plan.name
            ),
            bounds,
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let counted: Option<u64> = first(counted, "the rows counted in a rollup")?;
    tx.commit().await.map_err(DbError::mysql(context()))?;
    // An aggregate without GROUP BY always returns one row.
    let counted = counted.unwrap_or(0);
    Ok((rows, counted))
}

/// A rollup row read back: each column by name, as JSON, in table order.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRecord {
    pub columns: Vec<(String, serde_json::Value)>,
}

impl Serialize for RollupRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.columns.len()))?;
        for (name, value) in &self.columns {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// A rollup's rows with `from <= bucket < to` (Unix seconds), in key order.
pub async fn read(
    conn: &mut Conn,
    plan: &RollupPlan,
    (from, to): (u64, u64),
    mut each: impl FnMut(RollupRecord) -> std::ops::ControlFlow<()>,
) -> Result<(), DbError> {
    let names = plan.column_names();
    let columns: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    let mut key = vec!["`bucket`".to_string()];
    key.extend(plan.dimensions.iter().map(|d| d.name.to_string()));
    // DECIMAL sums come back as text and are shown as numbers, exactly.
    let sql = format!(
        "SELECT {} FROM {} WHERE `bucket` >= ? AND `bucket` < ? ORDER BY {}",
        columns.join(", "),
        plan.name,
        key.join(", ")
    );
    let rows: Vec<MysqlRow> = conn
        .exec(sql, (datetime(from), datetime(to)))
        .await
        .map_err(DbError::mysql(format!("reading rollup {}", plan.name)))?;
    for row in rows {
        let values = row.unwrap();
        let columns = names
            .iter()
            .zip(values)
            .enumerate()
            .map(|(i, (name, value))| (name.to_string(), json_value(value, i == 0)))
            .collect();
        if each(RollupRecord { columns }).is_break() {
            break;
        }
    }
    Ok(())
}

/// The rows of one rollup read from several shards (each in key order) as one: rows of the
/// same bucket and dimensions are added up (`n` and sums added, the least of the minimums, the
/// greatest of the maximums), in key order. Integers add exactly; a sum with a fraction adds
/// as a double, as the server's DOUBLE sums do.
pub fn merge(plan: &RollupPlan, shards: Vec<Vec<RollupRecord>>) -> Vec<RollupRecord> {
    use std::collections::btree_map::{BTreeMap, Entry};
    let keys = 1 + plan.dimensions.len();
    // The bucket (RFC 3339, fixed width) and the dimensions, compared as the key's columns
    // (utf8mb4_bin: by bytes).
    let mut merged: BTreeMap<Vec<KeyPart>, RollupRecord> = BTreeMap::new();
    for record in shards.into_iter().flatten() {
        let key: Vec<KeyPart> = record.columns[..keys]
            .iter()
            .map(|(_, v)| KeyPart::of(v))
            .collect();
        match merged.entry(key) {
            Entry::Vacant(slot) => {
                slot.insert(record);
            }
            Entry::Occupied(mut slot) => {
                let into = slot.get_mut();
                // After the key: `n`, then the measures in order.
                let kinds =
                    std::iter::once(MeasureKind::Sum).chain(plan.measures.iter().map(|m| m.kind));
                for ((into, (_, value)), kind) in into.columns[keys..]
                    .iter_mut()
                    .zip(record.columns.into_iter().skip(keys))
                    .zip(kinds)
                {
                    into.1 = combine(kind, &into.1, value);
                }
            }
        }
    }
    merged.into_values().collect()
}

/// A key column's value, ordered as MySQL orders the column: NULL first, numbers by value,
/// text by bytes.
#[derive(Debug, Clone)]
enum KeyPart {
    Null,
    Number(f64),
    Text(String),
}

impl Ord for KeyPart {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use KeyPart::{Null, Number, Text};
        use std::cmp::Ordering::{Equal, Greater, Less};
        match (self, other) {
            (Null, Null) => Equal,
            (Null, _) => Less,
            (_, Null) => Greater,
            (Number(a), Number(b)) => a.total_cmp(b),
            (Number(_), Text(_)) => Less,
            (Text(_), Number(_)) => Greater,
            (Text(a), Text(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for KeyPart {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for KeyPart {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for KeyPart {}

impl KeyPart {
    fn of(value: &serde_json::Value) -> KeyPart {
        match value {
            serde_json::Value::Null => KeyPart::Null,
            serde_json::Value::Number(n) => KeyPart::Number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::Bool(b) => KeyPart::Number(f64::from(u8::from(*b))),
            other => KeyPart::Text(
                other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_string),
            ),
        }
    }
}

/// Two shards' values of a measure as one.
fn combine(kind: MeasureKind, a: &serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    use serde_json::Value as Json;
    let (Json::Number(x), Json::Number(y)) = (a, &b) else {
        // NULL (a min or max over no values) yields to the other.
        return if a.is_null() { b } else { a.clone() };
    };
    let exact = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match kind {
        MeasureKind::Sum => match (exact(x), exact(y)) {
            (Some(x), Some(y)) => {
                let sum = x + y;
                u64::try_from(sum)
                    .map(Json::from)
                    .or_else(|_| i64::try_from(sum).map(Json::from))
                    .unwrap_or_else(|_| Json::from(sum as f64))
            }
            _ => Json::from(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
        },
        MeasureKind::Min | MeasureKind::Max => {
            let (fx, fy) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            let take_b = if kind == MeasureKind::Min {
                fy < fx
            } else {
                fy > fx
            };
            if take_b { b } else { a.clone() }
        }
    }
}

/// The rollup's counts per `interval` seconds (a multiple of its bucket) and per value of its
/// dimension `by`, over its other dimensions, for buckets with `from <= bucket < to` (Unix
/// seconds), of the rows whose dimensions meet `filter` (conditions on dimensions only).
pub async fn histogram(
    conn: &mut Conn,
    plan: &RollupPlan,
    by: &Ident,
    filter: &[Condition],
    interval: u64,
    (from, to): (u64, u64),
) -> Result<Vec<Count>, DbError> {
    // The session's zone is UTC, so UNIX_TIMESTAMP reads the bucket as the UTC time it is.
    let mut sql = format!(
        "SELECT UNIX_TIMESTAMP(`bucket`) DIV ? AS `slot`, {by} AS `key`, SUM(`n`) FROM {} \
         WHERE `bucket` >= ? AND `bucket` < ?",
        plan.name
    );
    let interval = interval.max(1);
    let mut params = vec![Value::UInt(interval), datetime(from), datetime(to)];
    push_filter(filter, &mut sql, &mut params);
    sql.push_str(" GROUP BY `slot`, `key`");
    let rows: Vec<MysqlRow> = conn
        .exec(sql, params)
        .await
        .map_err(DbError::mysql(format!(
            "counting from rollup {}",
            plan.name
        )))?;
    counts(rows, by, interval)
}

/// A value read from a rollup as JSON: the bucket as RFC 3339 text, numbers as numbers (DECIMAL
/// text too, exactly, when it is an integer).
fn json_value(value: Value, is_bucket: bool) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        Value::NULL => Json::Null,
        Value::Int(n) => Json::from(n),
        Value::UInt(n) => Json::from(n),
        Value::Float(f) => Json::from(f64::from(f)),
        Value::Double(f) => Json::from(f),
        Value::Bytes(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if is_bucket {
                return Json::String(
                    NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S")
                        .map(|t| t.and_utc().to_rfc3339())
                        .unwrap_or(text),
                );
            }
            match serde_json::from_str::<serde_json::Number>(&text) {
                Ok(number) => Json::Number(number),
                Err(_) => Json::String(text),
            }
        }
        Value::Date(y, mo, d, h, mi, s, _) => {
            Json::String(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}+00:00"))
        }
        Value::Time(..) => Json::Null,
    }
}

fn to_i64(unix_seconds: u64) -> i64 {
    i64::try_from(unix_seconds).unwrap_or(i64::MAX)
}

fn datetime(unix_seconds: u64) -> Value {
    let t = DateTime::<Utc>::from_timestamp(to_i64(unix_seconds), 0)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .naive_utc();
    mysql_value(&crate::mysql::SqlValue::Datetime(t))
}

/// A time as RFC 3339 UTC.
pub fn format_time(unix_seconds: u64) -> String {
    DateTime::<Utc>::from_timestamp(to_i64(unix_seconds), 0)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| unix_seconds.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::Ident;
    use crate::store::rollup_plan::{Bucket, RollupSettings, SourceTable};
    use crate::store::schema::ColumnSpec;

    fn plan() -> RollupPlan {
        let columns = vec![
            ColumnSpec {
                name: "service".into(),
                pointer: "/service".into(),
                column_type: ColumnType::String,
                length: Some(64),
                truncate: false,
            },
            ColumnSpec {
                name: "latency_ms".into(),
                pointer: "/latency_ms".into(),
                column_type: ColumnType::Uint,
                length: None,
                truncate: false,
            },
        ];
        let logs = Ident::new("logs").unwrap();
        RollupPlan::compile(
            &RollupSettings {
                name: "per_hour".into(),
                source: String::new(),
                bucket: Bucket::Hour,
                bucket_by: Default::default(),
                dimensions: vec!["service".into()],
                sums: vec!["latency_ms".into()],
                mins: vec![],
                maxs: vec!["latency_ms".into()],
            },
            &[SourceTable {
                name: &logs,
                columns: &columns,
                event_time: "",
            }],
        )
        .unwrap()
    }

    #[test]
    fn table_and_statements() {
        let plan = plan();
        assert_eq!(
            create_table_sql(&plan),
            "CREATE TABLE IF NOT EXISTS `per_hour` (\n  `bucket` DATETIME NOT NULL,\n  \
             `service` VARCHAR(64) NOT NULL,\n  `n` BIGINT UNSIGNED NOT NULL,\n  \
             `sum_latency_ms` DECIMAL(65,0) NOT NULL DEFAULT 0,\n  \
             `max_latency_ms` BIGINT UNSIGNED NULL,\n  PRIMARY KEY (`bucket`, `service`)\n) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        );
        let (prefix, suffix, width) = upsert_statement(&plan);
        assert_eq!(width, 5);
        assert!(prefix.starts_with("INSERT INTO `per_hour` (`bucket`, `service`, `n`,"));
        assert!(suffix.contains("`sum_latency_ms` = `sum_latency_ms` + VALUES(`sum_latency_ms`)"));
        let layout = Layout::new(10, 0).unwrap();
        let (_, insert) = rebuild_sql(&plan, &layout);
        assert!(insert.contains("DIV 3600 * 3600"));
        assert!(insert.contains("COALESCE(`service`, '')"));
        assert!(insert.ends_with("GROUP BY 1, 2"));
    }

    #[test]
    fn shards_rows_merge_by_key_adding_counts_and_sums() {
        use serde_json::json;
        let row = |bucket: &str, service: &str, n: u64, sum: serde_json::Value, max| RollupRecord {
            columns: vec![
                ("bucket".into(), json!(bucket)),
                ("service".into(), json!(service)),
                ("n".into(), json!(n)),
                ("sum_latency_ms".into(), sum),
                ("max_latency_ms".into(), max),
            ],
        };
        let (h1, h2) = ("2026-11-21T10:00:00+00:00", "2026-11-21T11:00:00+00:00");
        let a = vec![
            row(h1, "api", 2, json!(30), json!(20)),
            row(h2, "api", 1, json!(5), json!(5)),
        ];
        let b = vec![
            row(h1, "api", 3, json!(u64::MAX - 40), json!(null)),
            row(h1, "web", 1, json!(7), json!(7)),
        ];
        let merged = merge(&plan(), vec![a, b]);
        assert_eq!(
            merged,
            vec![
                row(h1, "api", 5, json!(u64::MAX - 10), json!(20)),
                row(h1, "web", 1, json!(7), json!(7)),
                row(h2, "api", 1, json!(5), json!(5)),
            ]
        );
        let small = merge(
            &plan(),
            vec![
                vec![row(h1, "api", 1, json!(1), json!(3))],
                vec![row(h1, "api", 1, json!(2), json!(9))],
            ],
        );
        assert_eq!(small, vec![row(h1, "api", 2, json!(3), json!(9))]);
    }

    #[test]
    fn ranges_widen_to_whole_buckets() {
        let plan = plan();
        assert_eq!(widen_to_buckets(&plan, 3_601, 7_200), (3_600, 7_200));
        assert_eq!(widen_to_buckets(&plan, 3_600, 7_201), (3_600, 10_800));
        assert_eq!(widen_to_buckets(&plan, 5, 5), (0, 3_600));
    }
}
