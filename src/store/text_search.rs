//! The text filter in MySQL (`logstamp_text_filter`, see [`super::text_filter`]): the upsert
//! each batch adds in its own transaction, the ID ranges a search reads, the rows forgotten
//! with dropped partitions, and the rebuild from a table's rows.
//!
//! Batches add to it with `INSERT ... ON DUPLICATE KEY UPDATE w = w | VALUES(w)` inside the
//! transaction that claims the batch's offset, as the zone map does, so the filter holds
//! every committed row's grams. A table's filter is used only from the ID its cover row names
//! (`logstamp_text_filter_cover`): rows below it, written before the filter existed, are read
//! whole until `logstamp search rebuild` covers them.

use std::sync::LazyLock;

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row as MysqlRow, TxOpts, Value};
use serde::Serialize;

use super::filter_language::{Condition, Literal, Op};
use super::rebuild::in_steps;
use super::schema::{ColumnSpec, ColumnType};
use super::settings::StoreSettings;
use super::text_filter::{FIRST_BLOCK, FilterRow, Fold, TextFilterPlan, WORDS, Words, probe};
use super::zone_plan::{BUCKET_IDS, bucket_end, bucket_start, id_ranges};
use crate::id::{IdRange, Layout};
use crate::mysql::bound::Bound;
use crate::mysql::encode::push_sql_string;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::rows::{first, take};
use crate::mysql::{DbError, Ident, SqlValue};

/// The filter's table (migration 0021).
pub const FILTER_TABLE: &str = "logstamp_text_filter";
/// From which ID each table's filter is complete (migration 0022).
pub const COVER_TABLE: &str = "logstamp_text_filter_cover";

/// A rebuild recomputes this many IDs' worth of buckets (an hour of ID time) per transaction.
pub const REBUILD_STEP_IDS: u64 = 3_600 << 32;

/// A search probes at most this many blocks per bucket: any of the needle's grams suffice for
/// a correct answer, and a long needle's first ones are selective enough.
const MAX_PROBED_BLOCKS: usize = 24;

/// The text filter of a table's `string` and `text` columns; `None` when it has none.
pub fn plan(table: &Ident, table_index: usize, columns: &[ColumnSpec]) -> Option<TextFilterPlan> {
    let columns: Vec<(usize, String)> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.column_type, ColumnType::String | ColumnType::Text))
        .map(|(i, c)| (i, c.name.clone()))
        .collect();
    (!columns.is_empty()).then(|| TextFilterPlan {
        table: table.clone(),
        table_index,
        columns,
    })
}

/// The filters of the log table and every fan-out table that has text columns.
pub fn plans(store: &StoreSettings) -> Vec<TextFilterPlan> {
    let tables = [(&store.table, &store.columns)]
        .into_iter()
        .chain(store.tables.iter().map(|t| (&t.name, &t.columns)));
    tables
        .enumerate()
        .filter_map(|(index, (table, columns))| plan(table, index, columns))
        .collect()
}

fn word_columns() -> Vec<String> {
    (0..WORDS).map(|i| format!("`w{i}`")).collect()
}

/// The upsert's text before and after the rows' values, made once.
fn upsert_statement() -> &'static (String, String) {
    static STATEMENT: LazyLock<(String, String)> = LazyLock::new(upsert_text);
    &STATEMENT
}

fn upsert_text() -> (String, String) {
    let words = word_columns();
    let prefix = format!(
        "INSERT INTO `{FILTER_TABLE}` (`table_name`, `bucket_start`, `service_id`, `block`, {}) \
         VALUES ",
        words.join(", ")
    );
    let suffix = format!(
        " ON DUPLICATE KEY UPDATE {}",
        words
            .iter()
            .map(|w| format!("{w} = {w} | VALUES({w})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    (prefix, suffix)
}

/// The upserts ORing `rows` into `table`'s filter, each of at most about `max_bytes`. Text,
/// not prepared: a batch sends any number of rows from 1 to 128 per bucket, and a
/// prepared statement per count would miss the connection's statement cache (a prepare and
/// a round trip more) in most batches; the values are all numbers but the table's name.
pub fn upsert_sql(table: &Ident, rows: &[FilterRow], max_bytes: usize) -> Vec<String> {
    use std::fmt::Write as _;
    let (prefix, suffix) = upsert_statement();
    let mut statements = Vec::new();
    let mut sql = String::new();
    for row in rows {
        if sql.is_empty() {
            sql.push_str(prefix);
        } else {
            sql.push_str(", ");
        }
        sql.push('(');
        push_sql_string(&mut sql, table.as_str());
        // Writing to a String cannot fail.
        let _ = write!(
            sql,
            ", {}, {}, {}",
            row.bucket_start, row.service_id, row.block
        );
        for word in row.words {
            let _ = write!(sql, ", {word}");
        }
        sql.push(')');
        if sql.len() + suffix.len() >= max_bytes {
            sql.push_str(suffix);
            statements.push(std::mem::take(&mut sql));
        }
    }
    if !sql.is_empty() {
        sql.push_str(suffix);
        statements.push(sql);
    }
    statements
}

/// The needles of a filter's `contains` and `icontains` conditions, by column.
fn needles(filter: &[Condition]) -> Vec<(&str, &str, Fold)> {
    filter
        .iter()
        .filter_map(|c| {
            let how = match c.op {
                Op::Contains => Fold::Exact,
                Op::IContains => Fold::IgnoreCase,
                _ => return None,
            };
            match &c.value {
                Literal::Text(needle) => Some((c.column.as_str(), needle.as_str(), how)),
                _ => None,
            }
        })
        .collect()
}

/// The statement telling, per bucket and service ID in a range of bucket starts, how many of
/// `probe`'s blocks hold all their bits (a bucket may hold the needle when one of its service
/// IDs' filters holds them all), and the lowest block (below [`FIRST_BLOCK`], a filter of
/// format 1, which may hold anything); its parameters. Only the probed blocks and format 1's
/// are read, and every bucket the filter has is answered, so the caller knows how many
/// buckets there are.
fn candidates_sql(
    table: &Ident,
    (from, to): (u64, u64),
    probe: &[(u64, Words)],
) -> (String, Vec<Value>) {
    let mut params = Vec::new();
    let mut blocks = Vec::with_capacity(probe.len());
    for (block, words) in probe {
        let mut test = vec!["`block` = ?".to_string()];
        params.push(Value::UInt(*block));
        for (i, w) in words.iter().enumerate().filter(|(_, w)| **w != 0) {
            test.push(format!("(`w{i}` & ?) = ?"));
            params.push(Value::UInt(*w));
            params.push(Value::UInt(*w));
        }
        blocks.push(format!("({})", test.join(" AND ")));
    }
    params.push(Value::Bytes(table.as_str().as_bytes().to_vec()));
    params.push(Value::UInt(from));
    params.push(Value::UInt(to));
    params.extend(probe.iter().map(|(block, _)| Value::UInt(*block)));
    let sql = format!(
        "SELECT `bucket_start`, SUM({}), MIN(`block`) FROM `{FILTER_TABLE}` \
         WHERE `table_name` = ? AND `bucket_start` >= ? AND `bucket_start` < ? \
         AND (`block` IN ({}) OR `block` < {FIRST_BLOCK}) \
         GROUP BY `bucket_start`, `service_id`",
        blocks.join(" OR "),
        vec!["?"; probe.len()].join(", ")
    );
    (sql, params)
}

/// Of the buckets a filter has in a span, those that may hold the needle, and how many there
/// are in all.
struct Candidates {
    may_hold: Vec<u64>,
    buckets: usize,
}

impl Candidates {
    /// From `(bucket start, blocks holding all their bits, lowest block)` per bucket and
    /// service ID.
    fn of(groups: impl IntoIterator<Item = (u64, u64, u64)>, probed: usize) -> Candidates {
        let mut all = Vec::new();
        let mut may_hold = Vec::new();
        for (start, hits, lowest_block) in groups {
            all.push(start);
            if hits == probed as u64 || lowest_block < FIRST_BLOCK {
                may_hold.push(start);
            }
        }
        all.sort_unstable();
        all.dedup();
        may_hold.sort_unstable();
        may_hold.dedup();
        Candidates {
            may_hold,
            buckets: all.len(),
        }
    }
}

/// Whether so many of a span's buckets may hold the needle that one scan of the whole span
/// costs about what reading only those would (and no more of the filter need be read).
fn mostly(may_hold: usize, buckets: usize) -> bool {
    buckets > 0 && may_hold * SCAN_SHARE.1 >= buckets * SCAN_SHARE.0
}

/// When at least this share (numerator, denominator) of a span's buckets may hold the needle,
/// the span is scanned whole: the few buckets skipped would save less than the filter's read
/// and the split ranges' conditions cost.
const SCAN_SHARE: (usize, usize) = (3, 4);

/// The filter of the newest buckets of a span is read first, this many IDs of them (an hour):
/// when most of them may hold the needle (a common word), the whole span is scanned without
/// reading the rest of the filter, so such a search costs a scan and an hour of the filter.
const SAMPLE_IDS: u64 = 3_600 << 32;

async fn candidates<Q: Queryable>(
    conn: &mut Q,
    table: &Ident,
    span: (u64, u64),
    probe: &[(u64, Words)],
) -> Result<Candidates, DbError> {
    let (sql, params) = candidates_sql(table, span, probe);
    let rows: Vec<MysqlRow> = conn
        .exec(sql, params)
        .await
        .map_err(DbError::mysql(format!(
            "reading the text filter of {table}"
        )))?;
    let mut groups = Vec::with_capacity(rows.len());
    for mut row in rows {
        let start: u64 = take(&mut row, 0, "logstamp_text_filter.bucket_start")?;
        let hits: Option<u64> = take(&mut row, 1, "the blocks holding the needle's bits")?;
        let lowest_block: u64 = take(&mut row, 2, "logstamp_text_filter.block")?;
        groups.push((start, hits.unwrap_or(0), lowest_block));
    }
    Ok(Candidates::of(groups, probe.len()))
}

/// Whether the text filter can narrow what a query with `filter` reads: it has a `contains`
/// or `icontains` condition with a needle of at least a gram.
pub fn narrows(filter: &[Condition]) -> bool {
    !probe(needles(filter)).is_empty()
}

/// The ID ranges within `range` (in ID order, disjoint) that may hold a row meeting `filter`'s
/// `contains` and `icontains` conditions: `[range]` when the filter has none the text filter
/// can use, the table has no cover, or most of the range may hold the text (then a scan of it
/// is no slower). The rest of the filter is the reader's to apply.
pub async fn ranges<Q: Queryable>(
    conn: &mut Q,
    table: &Ident,
    range: IdRange,
    filter: &[Condition],
) -> Result<Vec<IdRange>, DbError> {
    let mut probe = probe(needles(filter));
    if probe.is_empty() || range.start >= range.end {
        return Ok(vec![range]);
    }
    probe.truncate(MAX_PROBED_BLOCKS);
    let context = || format!("reading the text filter of {table}");
    let cover: Option<MysqlRow> = conn
        .exec_first(
            format!("SELECT `from_id` FROM `{COVER_TABLE}` WHERE `table_name` = ?"),
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let Some(from_id) = first::<u64>(cover, "logstamp_text_filter_cover.from_id")? else {
        return Ok(vec![range]);
    };
    let covered = IdRange {
        start: range.start.max(from_id),
        end: range.end,
    };
    // Below the cover, every row is read.
    let mut read = Vec::new();
    if range.start < covered.start {
        read.push(IdRange {
            start: range.start,
            end: covered.start.min(range.end),
        });
    }
    if covered.start < covered.end {
        let first = bucket_start(covered.start);
        let sample_from = bucket_start(covered.end - 1)
            .saturating_sub(SAMPLE_IDS - BUCKET_IDS)
            .max(first);
        let newest = candidates(conn, table, (sample_from, covered.end), &probe).await?;
        if mostly(newest.may_hold.len(), newest.buckets) {
            return Ok(vec![range]);
        }
        let (mut may_hold, mut buckets) = (newest.may_hold, newest.buckets);
        if first < sample_from {
            let older = candidates(conn, table, (first, sample_from), &probe).await?;
            buckets += older.buckets;
            may_hold.extend(older.may_hold);
            if mostly(may_hold.len(), buckets) {
                return Ok(vec![range]);
            }
        }
        read.extend(id_ranges(may_hold).into_iter().filter_map(|r| {
            let start = r.start.max(covered.start);
            let end = r.end.min(covered.end);
            (start < end).then_some(IdRange { start, end })
        }));
    }
    Ok(merge_touching(read))
}

/// Ranges in ID order with touching ones joined.
fn merge_touching(ranges: Vec<IdRange>) -> Vec<IdRange> {
    let mut merged: Vec<IdRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// At most `max` ranges covering `ranges` (in ID order, disjoint): the smallest gaps are
/// closed first. Closing a gap only reads more rows, which the exact conditions drop.
pub fn at_most(mut ranges: Vec<IdRange>, max: usize) -> Vec<IdRange> {
    if ranges.len() <= max.max(1) {
        return ranges;
    }
    let mut gaps: Vec<u64> = ranges
        .windows(2)
        .map(|w| w[1].start.saturating_sub(w[0].end))
        .collect();
    gaps.sort_unstable();
    // Gaps up to this width close; ties may close a few more, which is still correct.
    let limit = gaps[ranges.len() - max.max(1) - 1];
    let mut out: Vec<IdRange> = Vec::with_capacity(max);
    for r in ranges.drain(..) {
        match out.last_mut() {
            Some(last) if r.start.saturating_sub(last.end) <= limit => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// The ranges of both lists (each in ID order, disjoint) at once.
pub fn intersect(a: &[IdRange], b: &[IdRange]) -> Vec<IdRange> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let start = a[i].start.max(b[j].start);
        let end = a[i].end.min(b[j].end);
        if start < end {
            out.push(IdRange { start, end });
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Marks a newly created table's filter complete from its first ID, forgetting the filter rows
/// of any table of the same name before it.
pub async fn cover_new_table(conn: &mut Conn, table: &Ident) -> Result<(), DbError> {
    let context = || format!("starting the text filter of {table}");
    conn.exec_drop(
        format!("DELETE FROM `{FILTER_TABLE}` WHERE `table_name` = ?"),
        (table.as_str(),),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    set_cover(conn, table, 0).await
}

async fn set_cover(conn: &mut Conn, table: &Ident, from_id: u64) -> Result<(), DbError> {
    conn.exec_drop(
        format!(
            "INSERT INTO `{COVER_TABLE}` (`table_name`, `from_id`) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE `from_id` = LEAST(`from_id`, VALUES(`from_id`))"
        ),
        (table.as_str(), from_id),
    )
    .await
    .map_err(DbError::mysql(format!(
        "recording where the text filter of {table} starts"
    )))
}

/// What a text-filter rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FilterRebuildReport {
    pub table: String,
    pub start_id: u64,
    pub end_id: u64,
    /// Filter rows (blocks) written.
    pub blocks: u64,
    /// Table rows read.
    pub rows: u64,
    /// Whether the filter now covers the table from its first ID.
    pub covered: bool,
}

/// Recomputes `plan`'s filter over the ID range `ids` (widened to whole buckets) from the
/// table's rows, an hour of ID time per transaction, under the table's lock; with `whole`
/// (`ids` starts at or below the table's first ID), records the filter as complete from
/// there. Safe while batches are written, as [`super::zone_map::rebuild`] is: each step
/// deletes its range's filter rows and reads the table's rows with shared locks.
pub async fn rebuild(
    conn: &mut Conn,
    plan: &TextFilterPlan,
    layout: &Layout,
    (ids, whole): (IdRange, bool),
    (retry, bound): (RetryPolicy, &Bound),
    mut progress: impl FnMut(u64, &FilterRebuildReport),
) -> Result<FilterRebuildReport, DbError> {
    let from = bucket_start(ids.start);
    let to = if ids.end > 0 && bucket_start(ids.end - 1) >= from {
        bucket_end(bucket_start(ids.end - 1))
    } else {
        from
    };
    let mut report = FilterRebuildReport {
        table: plan.table.as_str().to_string(),
        start_id: from,
        end_id: to,
        ..FilterRebuildReport::default()
    };
    in_steps(
        conn,
        &plan.table,
        &format!("rebuilding the text filter of {}", plan.table),
        (from, to, REBUILD_STEP_IDS),
        (retry, bound),
        async |conn, start, end| rebuild_step(conn, plan, layout, (start, end)).await,
        |end, (blocks, rows)| {
            report.blocks += blocks;
            report.rows += rows;
            progress(end, &report);
        },
    )
    .await?;
    if whole {
        set_cover(conn, &plan.table, from).await?;
        report.covered = true;
    }
    Ok(report)
}

/// Bytes per upsert statement in a rebuild (about 1,500 filter rows), well under MariaDB's
/// default `max_allowed_packet` (16 MiB).
const REBUILD_STATEMENT_BYTES: usize = 1 << 20;

/// One transaction of a rebuild; returns the filter rows written and the table rows read.
async fn rebuild_step(
    conn: &mut Conn,
    plan: &TextFilterPlan,
    layout: &Layout,
    (start, end): (u64, u64),
) -> Result<(u64, u64), DbError> {
    let context = || {
        format!(
            "rebuilding the text filter of {} from ID {start}",
            plan.table
        )
    };
    let mut options = TxOpts::default();
    options.with_isolation_level(IsolationLevel::RepeatableRead);
    let mut tx = conn
        .start_transaction(options)
        .await
        .map_err(DbError::mysql(context()))?;
    tx.exec_drop(
        format!(
            "DELETE FROM `{FILTER_TABLE}` \
             WHERE `table_name` = ? AND `bucket_start` >= ? AND `bucket_start` < ?"
        ),
        (plan.table.as_str(), start, end),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    let width = plan.columns.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let select = format!(
        "SELECT `id`, {} FROM {} WHERE `id` >= ? AND `id` < ? LOCK IN SHARE MODE",
        plan.columns
            .iter()
            .map(|(_, name)| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", "),
        plan.table
    );
    // Rows arrive in ID order, so a bucket's rows are all read before the next bucket's:
    // each bucket is aggregated and its rows let go as soon as it ends.
    let mut read = 0u64;
    let mut pending: Vec<(u64, Vec<SqlValue>)> = Vec::new();
    let mut filter_rows = Vec::new();
    {
        let mut rows = tx
            .exec_stream::<MysqlRow, _, _>(select, (start, end))
            .await
            .map_err(DbError::mysql(context()))?;
        while let Some(row) = rows.next().await {
            let mut row = row.map_err(DbError::mysql(context()))?;
            let id: u64 = take(&mut row, 0, "id")?;
            let mut values = vec![SqlValue::Null; width];
            for (n, (index, name)) in plan.columns.iter().enumerate() {
                let value: Value = take(&mut row, n + 1, name)?;
                if let Value::Bytes(bytes) = value {
                    values[*index] = SqlValue::Text(String::from_utf8_lossy(&bytes).into_owned());
                }
            }
            if pending
                .first()
                .is_some_and(|(first, _)| bucket_start(*first) != bucket_start(id))
            {
                filter_rows.extend(aggregate(plan, layout, &pending));
                pending.clear();
            }
            pending.push((id, values));
            read += 1;
        }
    }
    filter_rows.extend(aggregate(plan, layout, &pending));
    for sql in upsert_sql(&plan.table, &filter_rows, REBUILD_STATEMENT_BYTES) {
        tx.query_drop(sql)
            .await
            .map_err(DbError::mysql(context()))?;
    }
    tx.commit().await.map_err(DbError::mysql(context()))?;
    Ok((filter_rows.len() as u64, read))
}

fn aggregate(
    plan: &TextFilterPlan,
    layout: &Layout,
    rows: &[(u64, Vec<SqlValue>)],
) -> Vec<super::text_filter::FilterRow> {
    plan.aggregate(layout, rows.iter().map(|(id, v)| (*id, v.as_slice())))
}

/// The IDs a rebuild of the whole table covers: its lowest to past its highest ID; `None` for
/// an empty table.
pub async fn id_span(conn: &mut Conn, table: &Ident) -> Result<Option<IdRange>, DbError> {
    let row: Option<MysqlRow> = conn
        .query_first(format!("SELECT MIN(`id`), MAX(`id`) FROM {table}"))
        .await
        .map_err(DbError::mysql(format!("reading the ID span of {table}")))?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    let low: Option<u64> = take(&mut row, 0, "the lowest ID")?;
    let high: Option<u64> = take(&mut row, 1, "the highest ID")?;
    Ok(low.zip(high).map(|(low, high)| IdRange {
        start: low,
        end: high.saturating_add(1),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> IdRange {
        IdRange { start, end }
    }

    #[test]
    fn at_most_closes_the_smallest_gaps() {
        let ranges = vec![r(0, 1), r(2, 3), r(10, 11), r(12, 13), r(100, 101)];
        assert_eq!(at_most(ranges.clone(), 5), ranges);
        assert_eq!(
            at_most(ranges.clone(), 3),
            vec![r(0, 3), r(10, 13), r(100, 101)]
        );
        assert_eq!(at_most(ranges, 1), vec![r(0, 101)]);
    }

    #[test]
    fn intersect_keeps_what_both_hold() {
        let a = [r(0, 10), r(20, 30)];
        let b = [r(5, 25), r(28, 40)];
        assert_eq!(intersect(&a, &b), vec![r(5, 10), r(20, 25), r(28, 30)]);
        assert!(intersect(&a, &[]).is_empty());
    }

    #[test]
    fn a_bucket_may_hold_the_needle_when_one_service_holds_every_block() {
        let minute = 60u64 << 32;
        let f2 = FIRST_BLOCK;
        let found = Candidates::of(
            [
                (0, 2, f2),
                (minute, 1, f2),
                (minute, 2, f2),
                (2 * minute, 1, f2),
            ],
            2,
        );
        assert_eq!(found.may_hold, vec![0, minute]);
        assert_eq!(found.buckets, 3);
        // A service's filter of format 1 may hold anything.
        let found = Candidates::of([(0, 0, f2 + 5), (0, 0, 3), (minute, 0, f2)], 2);
        assert_eq!(found.may_hold, vec![0]);
        assert!(!mostly(2, 3));
        assert!(mostly(3, 4));
        assert!(!mostly(0, 0));
    }

    #[test]
    fn statements_bind_every_mask() {
        let (prefix, suffix) = upsert_statement();
        assert!(prefix.contains("`w31`"));
        assert!(suffix.contains("`w0` = `w0` | VALUES(`w0`)"));
        let row = |block| FilterRow {
            bucket_start: 60 << 32,
            service_id: 3,
            block,
            words: [u64::MAX; WORDS],
        };
        let rows = [row(130), row(131), row(132)];
        let logs = Ident::new("logs").unwrap();
        let one = upsert_sql(&logs, &rows, 1 << 20);
        assert_eq!(one.len(), 1);
        assert!(one[0].starts_with(prefix.as_str()) && one[0].ends_with(suffix.as_str()));
        assert!(one[0].contains(&format!("('logs', {}, 3, 131, {}", 60u64 << 32, u64::MAX)));
        // A small budget: a statement per row, each whole.
        let split = upsert_sql(&logs, &rows, 1_000);
        assert_eq!(split.len(), 3);
        assert!(
            split
                .iter()
                .all(|sql| sql.starts_with(prefix.as_str()) && sql.ends_with(suffix.as_str()))
        );
        let mut words = [0; WORDS];
        words[3] = 0b1010;
        let (sql, params) = candidates_sql(&Ident::new("logs").unwrap(), (0, 10), &[(7, words)]);
        assert!(sql.contains("(`block` = ? AND (`w3` & ?) = ?)"), "{sql}");
        assert_eq!(params.len(), 3 + 1 + 2 + 1);
        assert_eq!(sql.matches('?').count(), params.len());
    }
}
