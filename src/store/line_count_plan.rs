//! Line counts, the pure part: which key each stored line is counted under, and a batch's
//! counts per key.
//!
//! Every log table (`store.table` and each `[[store.tables]]`, whatever `[[rollups]]` say) has
//! its lines counted per (minute of ID time, service ID, minute of event time, level). Both
//! histograms the page draws are then sums over one small table: by ID time, group by
//! `minute`; by event time, group by `event_minute`. Keying by both minutes (rather than
//! keeping one count per ID minute and another per event minute) costs few rows, since a
//! batch's lines share one or two ID minutes and mostly a few event minutes, and it lets a
//! single row set answer either question exactly, in the same transaction as the rows.
//!
//! The level is the table's `level` column (a `string` of at most [`MAX_LEVEL_CHARS`]
//! characters), the column the page splits its bars by by default and the one whose values
//! are few; a table without one is counted per minutes only (level ""). NULL counts as "", as
//! a histogram shows it. The service ID is in the key so that two workers never wait for each
//! other's count rows (as in the zone map).

use std::collections::HashMap;

use chrono::NaiveDateTime;
use foldhash::fast::FixedState;

use crate::id::Layout;
use crate::mysql::{Ident, SqlValue};
use crate::store::schema::{ColumnSpec, ColumnType};
use crate::store::settings::StoreSettings;

/// Seconds per count bucket, in either time.
pub const MINUTE: u64 = 60;

/// The `event_minute` of lines without an event time (no column, NULL, or before 1970): past
/// every range, so an event-time range never counts them.
pub const NO_EVENT: u64 = u64::MAX;

/// The longest `level` column counted by: the count table's key column is `VARCHAR(255)`.
pub const MAX_LEVEL_CHARS: u32 = 255;

/// The name of the column lines are counted by, when a table has it.
pub const LEVEL: &str = "level";

/// One table's counts: where its values are among a record's and which of them count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountPlan {
    pub table: Ident,
    /// The table's place: 0 for `store.table`, then `[[store.tables]]` in order.
    pub table_index: usize,
    /// The event-time column's place among the table's values.
    pub event_index: Option<usize>,
    /// The level column's place among the table's values.
    pub level_index: Option<usize>,
}

/// One count row: the lines of one table stamped in one minute by one service, with one
/// event minute and one level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow {
    /// Unix seconds the ID-time minute starts at.
    pub minute: u64,
    pub service_id: u32,
    /// Unix seconds the event-time minute starts at, or [`NO_EVENT`].
    pub event_minute: u64,
    pub level: String,
    pub n: u64,
}

/// The place of the column counted by among `columns`: `level`, if it is a short string.
pub fn level_index(columns: &[ColumnSpec]) -> Option<usize> {
    columns.iter().position(|c| {
        c.name.eq_ignore_ascii_case(LEVEL)
            && c.column_type == ColumnType::String
            && c.length.is_some_and(|l| l <= MAX_LEVEL_CHARS)
    })
}

/// Every table's count plan, in table order.
pub fn plans(store: &StoreSettings) -> Vec<CountPlan> {
    let tables = [(&store.table, &store.event_time, &store.columns)]
        .into_iter()
        .chain(
            store
                .tables
                .iter()
                .map(|t| (&t.name, &t.event_time, &t.columns)),
        );
    tables
        .enumerate()
        .map(|(table_index, (table, event_time, columns))| CountPlan {
            table: table.clone(),
            table_index,
            event_index: columns.iter().position(|c| c.name == *event_time),
            level_index: level_index(columns),
        })
        .collect()
}

/// The start of the minute holding `unix_seconds`.
pub fn minute_of(unix_seconds: u64) -> u64 {
    unix_seconds - unix_seconds % MINUTE
}

/// The event minute of an event time: its minute in Unix seconds, or [`NO_EVENT`].
pub fn event_minute(value: Option<&SqlValue>) -> u64 {
    match value {
        Some(SqlValue::Datetime(t)) => event_minute_of(*t),
        _ => NO_EVENT,
    }
}

fn event_minute_of(t: NaiveDateTime) -> u64 {
    u64::try_from(t.and_utc().timestamp()).map_or(NO_EVENT, minute_of)
}

impl CountPlan {
    /// One row per key of `rows` (each an ID with the table's values), in key order, so every
    /// writer locks count rows in the same order.
    pub fn aggregate<'a>(
        &self,
        layout: &Layout,
        rows: impl IntoIterator<Item = (u64, &'a [SqlValue])>,
    ) -> Vec<CountRow> {
        // Hashed, then sorted once: a batch has few keys and many rows, and a tree walk per row
        // cost the writer more than the hash.
        let mut counts: HashMap<(u64, u32, u64, &'a str), u64, FixedState> = HashMap::default();
        for (id, values) in rows {
            let decoded = layout.decode(id);
            let event = event_minute(self.event_index.and_then(|i| values.get(i)));
            let level = match self.level_index.and_then(|i| values.get(i)) {
                Some(SqlValue::Text(text)) => text.as_str(),
                _ => "",
            };
            let key = (
                minute_of(decoded.unix_seconds),
                decoded.service_id,
                event,
                level,
            );
            *counts.entry(key).or_default() += 1;
        }
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_unstable();
        counts
            .into_iter()
            .map(|((minute, service_id, event_minute, level), n)| CountRow {
                minute,
                service_id,
                event_minute,
                level: level.to_string(),
                n,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn column(name: &str, column_type: ColumnType, length: Option<u32>) -> ColumnSpec {
        ColumnSpec {
            name: name.into(),
            pointer: format!("/{name}"),
            column_type,
            length,
            truncate: false,
        }
    }

    #[test]
    fn counted_by_a_short_string_level_only() {
        let columns = vec![
            column("service", ColumnType::String, Some(32)),
            column("Level", ColumnType::String, Some(16)),
        ];
        assert_eq!(level_index(&columns), Some(1));
        assert_eq!(
            level_index(&[column("level", ColumnType::Text, None)]),
            None
        );
        assert_eq!(
            level_index(&[column("level", ColumnType::String, Some(256))]),
            None
        );
        assert_eq!(
            level_index(&[column("severity", ColumnType::String, Some(8))]),
            None
        );
    }

    #[test]
    fn a_batch_is_counted_per_minute_service_event_minute_and_level() {
        let layout = Layout::new(10, 0).unwrap();
        let plan = CountPlan {
            table: Ident::new("logs").unwrap(),
            table_index: 0,
            event_index: Some(0),
            level_index: Some(1),
        };
        let at = |h, m, s| {
            SqlValue::Datetime(
                NaiveDate::from_ymd_opt(2026, 11, 21)
                    .unwrap()
                    .and_hms_opt(h, m, s)
                    .unwrap(),
            )
        };
        let text = |s: &str| SqlValue::Text(s.into());
        let id = |seconds: u64, service: u32, counter: u32| {
            layout.encode(seconds, service, counter).unwrap()
        };
        let rows = [
            (id(1_000_000_030, 1, 0), vec![at(10, 0, 5), text("info")]),
            (id(1_000_000_031, 1, 1), vec![at(10, 0, 59), text("info")]),
            (id(1_000_000_032, 2, 0), vec![at(10, 0, 5), text("info")]),
            (id(1_000_000_033, 1, 2), vec![at(9, 0, 0), SqlValue::Null]),
            (id(1_000_000_034, 1, 3), vec![SqlValue::Null, text("error")]),
            (id(1_000_000_100, 1, 4), vec![at(10, 0, 5), text("info")]),
        ];
        let counts = plan.aggregate(&layout, rows.iter().map(|(i, v)| (*i, v.as_slice())));
        let ten = 1_795_255_200;
        let row = |minute, service_id, event_minute, level: &str, n| CountRow {
            minute,
            service_id,
            event_minute,
            level: level.into(),
            n,
        };
        assert_eq!(
            counts,
            vec![
                row(1_000_000_020, 1, ten - 3_600, "", 1),
                row(1_000_000_020, 1, ten, "info", 2),
                row(1_000_000_020, 1, NO_EVENT, "error", 1),
                row(1_000_000_020, 2, ten, "info", 1),
                row(1_000_000_080, 1, ten, "info", 1),
            ]
        );
    }

    #[test]
    fn times_before_1970_have_no_event_minute() {
        let old = NaiveDate::from_ymd_opt(1969, 12, 31)
            .unwrap()
            .and_hms_opt(23, 59, 0)
            .unwrap();
        assert_eq!(event_minute(Some(&SqlValue::Datetime(old))), NO_EVENT);
        assert_eq!(event_minute(None), NO_EVENT);
        assert_eq!(minute_of(119), 60);
    }
}
