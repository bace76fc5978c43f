//! The zone map's pure part: which stamp-time bucket an ID falls in, the minimum and maximum
//! event time of a batch's rows per bucket, and the ID ranges an event-time range must read.
//!
//! An ID carries the second it was stamped; a record's event time (its own time, a column of
//! the table) can be far earlier: a backlog replayed, a consumer that was down, rows relayed
//! late. The zone map keeps, per table with an event time and per bucket of
//! [`BUCKET_SECONDS`] of ID time (and per service ID, so workers never wait on each other's
//! zone rows), the least and greatest event time of the rows stamped in it. A bucket can hold
//! a row with an event time in `[from, to)` only if `min < to AND max >= from`; so reading
//! exactly the ID ranges of those buckets, and filtering on the event-time column, finds every
//! such row. Rows whose event time is NULL are not in the zone map and match no event-time
//! range (as in SQL, where `NULL >= x` is not true).

use std::collections::BTreeMap;

use chrono::NaiveDateTime;

use crate::id::{IdRange, Layout};
use crate::mysql::{Ident, SqlValue};

/// Seconds of ID time per zone-map bucket: small enough that a query reads little more than
/// the rows it wants, large enough that a busy table keeps a few rows per minute.
pub const BUCKET_SECONDS: u64 = 60;

/// IDs per bucket: a bucket is `[start, start + BUCKET_IDS)`.
pub const BUCKET_IDS: u64 = BUCKET_SECONDS << 32;

/// A table whose rows have an event time, and where that time is among its mapped values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonePlan {
    pub table: Ident,
    /// The table's place: 0 for `store.table`, then `[[store.tables]]` in order.
    pub table_index: usize,
    /// The event-time column.
    pub column: Ident,
    /// Its place among the table's mapped values.
    pub column_index: usize,
}

/// The first ID of the bucket holding `id`.
pub fn bucket_start(id: u64) -> u64 {
    let seconds = id >> 32;
    (seconds - seconds % BUCKET_SECONDS) << 32
}

/// The end (excluded) of the bucket starting at `start`; the last bucket ends at `u64::MAX`.
pub fn bucket_end(start: u64) -> u64 {
    start.saturating_add(BUCKET_IDS)
}

/// One zone-map row: the rows of one bucket and service ID in one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRow {
    pub bucket_start: u64,
    pub service_id: u32,
    pub min_event: NaiveDateTime,
    pub max_event: NaiveDateTime,
    /// Rows counted (those with an event time).
    pub rows: u64,
}

impl ZonePlan {
    /// One row per bucket and service ID of `rows` (each an ID with the table's values), in key
    /// order, so every writer locks zone rows in the same order. Rows without an event time are
    /// left out.
    pub fn aggregate<'a>(
        &self,
        layout: &Layout,
        rows: impl IntoIterator<Item = (u64, &'a [SqlValue])>,
    ) -> Vec<ZoneRow> {
        let mut zones: BTreeMap<(u64, u32), ZoneRow> = BTreeMap::new();
        for (id, values) in rows {
            let Some(SqlValue::Datetime(event)) = values.get(self.column_index) else {
                continue;
            };
            let key = (bucket_start(id), layout.decode(id).service_id);
            zones
                .entry(key)
                .and_modify(|z| {
                    z.min_event = z.min_event.min(*event);
                    z.max_event = z.max_event.max(*event);
                    z.rows += 1;
                })
                .or_insert(ZoneRow {
                    bucket_start: key.0,
                    service_id: key.1,
                    min_event: *event,
                    max_event: *event,
                    rows: 1,
                });
        }
        zones.into_values().collect()
    }
}

/// The ID ranges of bucket starts (any order, repeats allowed), adjacent buckets merged, in
/// ID order.
pub fn id_ranges(bucket_starts: impl IntoIterator<Item = u64>) -> Vec<IdRange> {
    let mut starts: Vec<u64> = bucket_starts.into_iter().collect();
    starts.sort_unstable();
    starts.dedup();
    let mut ranges: Vec<IdRange> = Vec::new();
    for start in starts {
        let end = bucket_end(start);
        match ranges.last_mut() {
            Some(last) if last.end >= start => last.end = last.end.max(end),
            _ => ranges.push(IdRange { start, end }),
        }
    }
    ranges
}

/// The partitions holding any part of `ranges`, given each partition's name and exclusive
/// upper bound in ascending order (`None`: MAXVALUE). What an exact reader of the ranges must
/// read, and all it needs to.
pub fn partitions_of<'a>(ranges: &[IdRange], bounds: &'a [(String, Option<u64>)]) -> Vec<&'a str> {
    let mut lower = 0u64;
    let mut touched = Vec::new();
    for (name, upper) in bounds {
        let overlaps = ranges
            .iter()
            .any(|r| r.start < r.end && r.end > lower && upper.is_none_or(|u| r.start < u));
        if overlaps {
            touched.push(name.as_str());
        }
        match upper {
            Some(u) => lower = *u,
            None => break,
        }
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at(h: u32, m: u32) -> SqlValue {
        SqlValue::Datetime(t(h, m))
    }

    fn t(h: u32, m: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 21)
            .unwrap()
            .and_hms_opt(h, m, 0)
            .unwrap()
    }

    fn plan() -> ZonePlan {
        ZonePlan {
            table: Ident::new("logs").unwrap(),
            table_index: 0,
            column: Ident::new("event_time").unwrap(),
            column_index: 1,
        }
    }

    #[test]
    fn buckets_are_whole_minutes_of_id_time() {
        let id = (125u64 << 32) | 77;
        assert_eq!(bucket_start(id), 120 << 32);
        assert_eq!(bucket_end(120 << 32), 180 << 32);
        assert_eq!(bucket_start(120 << 32), 120 << 32);
        assert_eq!(bucket_start((180 << 32) - 1), 120 << 32);
        assert_eq!(bucket_end(bucket_start(u64::MAX)), u64::MAX);
    }

    #[test]
    fn rows_fold_into_min_and_max_per_bucket_and_service() {
        let layout = Layout::new(10, 0).unwrap();
        let id = |second: u64, service: u32| layout.encode(second, service, 0).unwrap();
        let rows = [
            (id(61, 1), vec![SqlValue::Null, at(10, 5)]),
            (id(62, 1), vec![SqlValue::Null, at(9, 0)]),
            (id(100, 1), vec![SqlValue::Null, SqlValue::Null]),
            (id(70, 2), vec![SqlValue::Null, at(11, 0)]),
            (id(130, 1), vec![SqlValue::Null, at(8, 0)]),
            (id(140, 3), vec![SqlValue::Null, SqlValue::Null]),
        ];
        let zones = plan().aggregate(&layout, rows.iter().map(|(i, v)| (*i, v.as_slice())));
        assert_eq!(
            zones,
            [
                ZoneRow {
                    bucket_start: 60 << 32,
                    service_id: 1,
                    min_event: t(9, 0),
                    max_event: t(10, 5),
                    rows: 2
                },
                ZoneRow {
                    bucket_start: 60 << 32,
                    service_id: 2,
                    min_event: t(11, 0),
                    max_event: t(11, 0),
                    rows: 1
                },
                ZoneRow {
                    bucket_start: 120 << 32,
                    service_id: 1,
                    min_event: t(8, 0),
                    max_event: t(8, 0),
                    rows: 1
                },
            ]
        );
    }

    #[test]
    fn adjacent_buckets_merge_into_one_range() {
        let b = |minute: u64| (minute * 60) << 32;
        assert_eq!(
            id_ranges([b(3), b(1), b(2), b(2), b(7)]),
            [
                IdRange {
                    start: b(1),
                    end: b(4)
                },
                IdRange {
                    start: b(7),
                    end: b(8)
                }
            ]
        );
        assert!(id_ranges([]).is_empty());
    }

    #[test]
    fn partitions_are_those_the_ranges_touch() {
        let bounds = vec![
            ("pmin".to_string(), Some(100)),
            ("p1".to_string(), Some(200)),
            ("p2".to_string(), Some(300)),
            ("pmax".to_string(), None),
        ];
        let r = |start, end| IdRange { start, end };
        assert_eq!(partitions_of(&[r(150, 160)], &bounds), ["p1"]);
        assert_eq!(
            partitions_of(&[r(50, 60), r(250, 400)], &bounds),
            ["pmin", "p2", "pmax"]
        );
        // An end is excluded: a range ending at a bound does not touch the next partition.
        assert_eq!(partitions_of(&[r(100, 200)], &bounds), ["p1"]);
        assert!(partitions_of(&[], &bounds).is_empty());
    }
}
