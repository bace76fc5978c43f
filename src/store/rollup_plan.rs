//! Rollups: summary tables keyed by a time bucket of the record's ID and chosen dimension
//! columns, with a count and optional sums, minimums and maximums of numeric columns. This is
//! the pure part: the settings, their checks, and the aggregation of a batch's rows into one
//! upsert row per key. The store adds each batch's aggregate in the batch's own transaction.

use std::collections::BTreeMap;

use chrono::DateTime;
use serde::{Deserialize, Serialize};

use crate::id::Layout;
use crate::mysql::{Ident, SqlValue};
use crate::store::schema::{ColumnSpec, ColumnType, DEFAULT_STRING_LENGTH};

/// InnoDB's longest index key (DYNAMIC row format, 16 KiB pages).
const MAX_KEY_BYTES: usize = 3072;

/// Time covered by one row of a rollup, aligned to UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    Minute,
    Hour,
    Day,
}

impl Bucket {
    pub fn seconds(self) -> u64 {
        match self {
            Bucket::Minute => 60,
            Bucket::Hour => 3_600,
            Bucket::Day => 86_400,
        }
    }

    /// The start of the bucket holding `unix_seconds`.
    pub fn start(self, unix_seconds: u64) -> u64 {
        unix_seconds - unix_seconds % self.seconds()
    }
}

/// Which time a rollup's buckets are of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketBy {
    /// The second in the record's ID: when it was stamped.
    #[default]
    Id,
    /// The source table's event-time column (`event_time`): when it happened. Rows without
    /// one are not counted.
    Event,
}

/// One `[[rollups]]` entry as written in the settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollupSettings {
    /// The rollup's table.
    pub name: String,
    /// The table whose rows are counted: `store.table` (empty) or one of `[[store.tables]]`.
    #[serde(default)]
    pub source: String,
    pub bucket: Bucket,
    /// Which time the buckets are of: `id` (stamp time, the default) or `event`.
    #[serde(default)]
    pub bucket_by: BucketBy,
    /// Columns of the source table the rows are grouped by: string, int, uint or bool.
    #[serde(default)]
    pub dimensions: Vec<String>,
    /// Numeric columns (int, uint, double) summed, and kept as minimum and maximum.
    #[serde(default)]
    pub sums: Vec<String>,
    #[serde(default)]
    pub mins: Vec<String>,
    #[serde(default)]
    pub maxs: Vec<String>,
}

/// What a measure keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeasureKind {
    Sum,
    Min,
    Max,
}

impl MeasureKind {
    pub fn prefix(self) -> &'static str {
        match self {
            MeasureKind::Sum => "sum",
            MeasureKind::Min => "min",
            MeasureKind::Max => "max",
        }
    }
}

/// A column of the source table used by a rollup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceColumn {
    pub name: Ident,
    /// Its place in the source table's mapped values.
    pub index: usize,
    pub column_type: ColumnType,
    /// Characters, for string columns.
    pub length: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    pub kind: MeasureKind,
    pub source: SourceColumn,
    /// The rollup's column: `sum_<source>` and so on.
    pub column: Ident,
}

/// A checked rollup: its table, its source and where each column comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupPlan {
    pub name: Ident,
    pub source: Ident,
    /// The source's place among the tables: 0 for `store.table`, then `[[store.tables]]` in order.
    pub source_index: usize,
    pub bucket: Bucket,
    /// With buckets of event time: the source's event-time column.
    pub event_time: Option<SourceColumn>,
    pub dimensions: Vec<SourceColumn>,
    pub measures: Vec<Measure>,
}

/// A table as rollups see it: its name, mapped columns and event-time column (empty: none).
pub struct SourceTable<'a> {
    pub name: &'a Ident,
    pub columns: &'a [ColumnSpec],
    pub event_time: &'a str,
}

impl RollupPlan {
    /// Checks a rollup against the tables (main table first); the error is the reason.
    pub fn compile(
        settings: &RollupSettings,
        tables: &[SourceTable],
    ) -> Result<RollupPlan, String> {
        let name = Ident::new(&settings.name).map_err(|e| e.to_string())?;
        let source_index = if settings.source.is_empty() {
            0
        } else {
            tables
                .iter()
                .position(|t| t.name.as_str() == settings.source)
                .ok_or_else(|| {
                    format!(
                        "source {:?} is neither store.table nor one of store.tables",
                        settings.source
                    )
                })?
        };
        let Some(source) = tables.get(source_index) else {
            return Err("there is no table to count".to_string());
        };
        if tables
            .iter()
            .any(|t| t.name.as_str().eq_ignore_ascii_case(name.as_str()))
        {
            return Err(format!("{name} is already a log table's name"));
        }
        let column = |wanted: &str| -> Result<SourceColumn, String> {
            let index = source
                .columns
                .iter()
                .position(|c| c.name == wanted)
                .ok_or_else(|| format!("{} has no column {wanted:?}", source.name))?;
            let spec = &source.columns[index];
            Ok(SourceColumn {
                name: Ident::new(wanted).map_err(|e| e.to_string())?,
                index,
                column_type: spec.column_type,
                length: spec.length.unwrap_or(DEFAULT_STRING_LENGTH),
            })
        };
        let mut dimensions = Vec::new();
        for wanted in &settings.dimensions {
            let dimension = column(wanted)?;
            if !matches!(
                dimension.column_type,
                ColumnType::String | ColumnType::Int | ColumnType::Uint | ColumnType::Bool
            ) {
                return Err(format!(
                    "dimension {wanted} is a {:?} column; dimensions are string, int, uint or \
                     bool columns",
                    dimension.column_type
                ));
            }
            dimensions.push(dimension);
        }
        let mut measures = Vec::new();
        for (kind, names) in [
            (MeasureKind::Sum, &settings.sums),
            (MeasureKind::Min, &settings.mins),
            (MeasureKind::Max, &settings.maxs),
        ] {
            for wanted in names {
                let source = column(wanted)?;
                if !matches!(
                    source.column_type,
                    ColumnType::Int | ColumnType::Uint | ColumnType::Double
                ) {
                    return Err(format!(
                        "{} of {wanted}: it is a {:?} column; measures are int, uint or double \
                         columns",
                        kind.prefix(),
                        source.column_type
                    ));
                }
                let column = Ident::new(&format!("{}_{wanted}", kind.prefix()))
                    .map_err(|e| e.to_string())?;
                measures.push(Measure {
                    kind,
                    source,
                    column,
                });
            }
        }
        let event_time = match settings.bucket_by {
            BucketBy::Id => None,
            BucketBy::Event if source.event_time.is_empty() => {
                return Err(format!(
                    "bucket_by = \"event\" needs an event time: {} has none (store.event_time, \
                     or event_time of its [[store.tables]])",
                    source.name
                ));
            }
            BucketBy::Event => Some(column(source.event_time)?),
        };
        let plan = RollupPlan {
            name,
            source: source.name.clone(),
            source_index,
            bucket: settings.bucket,
            event_time,
            dimensions,
            measures,
        };
        plan.check_columns()?;
        Ok(plan)
    }

    /// The Unix seconds a row is counted at: its ID's, or its event time's (`None`: it has
    /// none, or one before 1970, which no bucket holds).
    fn bucket_seconds(&self, layout: &Layout, id: u64, values: &[SqlValue]) -> Option<u64> {
        match &self.event_time {
            None => Some(layout.decode(id).unix_seconds),
            Some(column) => match values.get(column.index) {
                Some(SqlValue::Datetime(t)) => u64::try_from(t.and_utc().timestamp()).ok(),
                _ => None,
            },
        }
    }

    /// The rollup table's columns in order: `bucket`, the dimensions, `n`, the measures.
    pub fn column_names(&self) -> Vec<&str> {
        let mut names = vec!["bucket"];
        names.extend(self.dimensions.iter().map(|d| d.name.as_str()));
        names.push("n");
        names.extend(self.measures.iter().map(|m| m.column.as_str()));
        names
    }

    fn check_columns(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for name in self.column_names() {
            if !seen.insert(name.to_ascii_lowercase()) {
                return Err(format!("column {name} would appear twice in {}", self.name));
            }
        }
        // The key is the bucket and every dimension; utf8mb4 takes up to 4 bytes a character.
        let key_bytes: usize = 5 + self
            .dimensions
            .iter()
            .map(|d| match d.column_type {
                ColumnType::String => 4 * d.length as usize,
                ColumnType::Bool => 1,
                _ => 8,
            })
            .sum::<usize>();
        if key_bytes > MAX_KEY_BYTES {
            return Err(format!(
                "the key of {} (bucket and dimensions) may take {key_bytes} bytes, more than \
                 InnoDB's {MAX_KEY_BYTES}: give its string dimensions shorter lengths",
                self.name
            ));
        }
        Ok(())
    }

    /// One row per bucket and dimension values of `rows` (each an ID with its source-table
    /// values), in key order, so every writer locks a rollup's rows in the same order.
    pub fn aggregate<'a>(
        &self,
        layout: &Layout,
        rows: impl IntoIterator<Item = (u64, &'a [SqlValue])>,
    ) -> Vec<RollupRow> {
        let mut groups: BTreeMap<(u64, Vec<DimensionKey>), Totals> = BTreeMap::new();
        for (id, values) in rows {
            let Some(seconds) = self.bucket_seconds(layout, id, values) else {
                continue;
            };
            let bucket = self.bucket.start(seconds);
            let key = self
                .dimensions
                .iter()
                .map(|d| DimensionKey::of(values.get(d.index), d.column_type))
                .collect();
            groups
                .entry((bucket, key))
                .or_insert_with(|| Totals::new(&self.measures))
                .add(&self.measures, values);
        }
        groups
            .into_iter()
            .map(|((bucket, key), totals)| RollupRow {
                bucket: bucket_value(bucket),
                dimensions: key.into_iter().map(DimensionKey::into_value).collect(),
                n: totals.n,
                measures: totals.values.into_iter().map(Total::into_value).collect(),
            })
            .collect()
    }
}

/// A bucket's start as the `bucket DATETIME` value.
fn bucket_value(unix_seconds: u64) -> SqlValue {
    i64::try_from(unix_seconds)
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .map_or(SqlValue::Null, |t| SqlValue::Datetime(t.naive_utc()))
}

/// One upsert row of a rollup.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRow {
    pub bucket: SqlValue,
    pub dimensions: Vec<SqlValue>,
    pub n: u64,
    /// In the plan's measure order: sums as exact decimal text (integer columns) or doubles;
    /// minimums and maximums as the column's type, NULL when no row had a value.
    pub measures: Vec<SqlValue>,
}

/// A dimension value as a key. A missing value counts as the type's zero ("" for strings),
/// because key columns cannot be NULL; the rebuild from the raw table does the same.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum DimensionKey {
    Text(String),
    Int(i64),
    Uint(u64),
    Bool(bool),
}

impl DimensionKey {
    fn of(value: Option<&SqlValue>, column_type: ColumnType) -> DimensionKey {
        match (value, column_type) {
            (Some(SqlValue::Text(s)), _) => DimensionKey::Text(s.clone()),
            (Some(SqlValue::Int(n)), _) => DimensionKey::Int(*n),
            (Some(SqlValue::Uint(n)), _) => DimensionKey::Uint(*n),
            (Some(SqlValue::Bool(b)), _) => DimensionKey::Bool(*b),
            (_, ColumnType::Int) => DimensionKey::Int(0),
            (_, ColumnType::Uint) => DimensionKey::Uint(0),
            (_, ColumnType::Bool) => DimensionKey::Bool(false),
            _ => DimensionKey::Text(String::new()),
        }
    }

    fn into_value(self) -> SqlValue {
        match self {
            DimensionKey::Text(s) => SqlValue::Text(s),
            DimensionKey::Int(n) => SqlValue::Int(n),
            DimensionKey::Uint(n) => SqlValue::Uint(n),
            DimensionKey::Bool(b) => SqlValue::Bool(b),
        }
    }
}

struct Totals {
    n: u64,
    values: Vec<Total>,
}

/// A measure's running value. Integer sums are exact (i128; the column is DECIMAL(65,0)).
enum Total {
    IntSum(i128),
    DoubleSum(f64),
    Extreme(MeasureKind, Option<SqlValue>),
}

impl Totals {
    fn new(measures: &[Measure]) -> Totals {
        Totals {
            n: 0,
            values: measures
                .iter()
                .map(|m| match (m.kind, m.source.column_type) {
                    (MeasureKind::Sum, ColumnType::Double) => Total::DoubleSum(0.0),
                    (MeasureKind::Sum, _) => Total::IntSum(0),
                    (kind, _) => Total::Extreme(kind, None),
                })
                .collect(),
        }
    }

    fn add(&mut self, measures: &[Measure], values: &[SqlValue]) {
        self.n += 1;
        for (total, measure) in self.values.iter_mut().zip(measures) {
            let value = values.get(measure.source.index).unwrap_or(&SqlValue::Null);
            match (total, value) {
                (_, SqlValue::Null) => {}
                (Total::IntSum(sum), SqlValue::Int(n)) => *sum += i128::from(*n),
                (Total::IntSum(sum), SqlValue::Uint(n)) => *sum += i128::from(*n),
                (Total::DoubleSum(sum), SqlValue::Double(f)) => *sum += f,
                (Total::Extreme(kind, current), value) => {
                    let replace = match current {
                        None => true,
                        Some(current) => {
                            let ordering = compare(value, current);
                            match kind {
                                MeasureKind::Min => ordering.is_lt(),
                                _ => ordering.is_gt(),
                            }
                        }
                    };
                    if replace {
                        *current = Some(value.clone());
                    }
                }
                // The mapping gives a column only values of its type.
                _ => {}
            }
        }
    }
}

impl Total {
    fn into_value(self) -> SqlValue {
        match self {
            Total::IntSum(sum) => SqlValue::Text(sum.to_string()),
            Total::DoubleSum(sum) => SqlValue::Double(sum),
            Total::Extreme(_, value) => value.unwrap_or(SqlValue::Null),
        }
    }
}

/// Orders two numeric values of one column.
fn compare(a: &SqlValue, b: &SqlValue) -> std::cmp::Ordering {
    match (a, b) {
        (SqlValue::Int(a), SqlValue::Int(b)) => a.cmp(b),
        (SqlValue::Uint(a), SqlValue::Uint(b)) => a.cmp(b),
        (SqlValue::Double(a), SqlValue::Double(b)) => a.total_cmp(b),
        _ => std::cmp::Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, column_type: ColumnType, length: Option<u32>) -> ColumnSpec {
        ColumnSpec {
            name: name.into(),
            pointer: format!("/{name}"),
            column_type,
            length,
            truncate: false,
        }
    }

    fn columns() -> Vec<ColumnSpec> {
        vec![
            column("service", ColumnType::String, Some(64)),
            column("level", ColumnType::String, Some(16)),
            column("latency_ms", ColumnType::Uint, None),
            column("message", ColumnType::Text, None),
            column("ratio", ColumnType::Double, None),
        ]
    }

    fn settings(dimensions: &[&str], sums: &[&str], maxs: &[&str]) -> RollupSettings {
        RollupSettings {
            name: "per_hour".into(),
            source: String::new(),
            bucket: Bucket::Hour,
            bucket_by: Default::default(),
            dimensions: dimensions.iter().map(|s| s.to_string()).collect(),
            sums: sums.iter().map(|s| s.to_string()).collect(),
            mins: vec![],
            maxs: maxs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn compile(settings: &RollupSettings) -> Result<RollupPlan, String> {
        let logs = Ident::new("logs").unwrap();
        let columns = columns();
        RollupPlan::compile(
            settings,
            &[SourceTable {
                name: &logs,
                columns: &columns,
                event_time: "",
            }],
        )
    }

    #[test]
    fn buckets_of_event_time_come_from_the_event_column() {
        let logs = Ident::new("logs").unwrap();
        let mut columns = columns();
        columns.push(column("at", ColumnType::Datetime, None));
        let by_event = RollupSettings {
            bucket_by: BucketBy::Event,
            ..settings(&["level"], &[], &[])
        };
        let source = |event_time| SourceTable {
            name: &logs,
            columns: &columns,
            event_time,
        };
        let refused = RollupPlan::compile(&by_event, &[source("")]).unwrap_err();
        assert!(refused.contains("needs an event time"), "{refused}");
        let plan = RollupPlan::compile(&by_event, &[source("at")]).unwrap();
        let layout = Layout::new(10, 0).unwrap();
        let stamped = layout.encode(1_700_000_000, 1, 0).unwrap();
        let at = |h| {
            chrono::NaiveDate::from_ymd_opt(2023, 1, 2)
                .unwrap()
                .and_hms_opt(h, 30, 0)
                .map_or(SqlValue::Null, SqlValue::Datetime)
        };
        let row = |event: SqlValue| {
            let mut values = vec![SqlValue::Null; 5];
            values[1] = SqlValue::Text("info".into());
            values.push(event);
            values
        };
        let rows = [row(at(7)), row(at(7)), row(at(9)), row(SqlValue::Null)];
        let aggregate = plan.aggregate(&layout, rows.iter().map(|r| (stamped, r.as_slice())));
        // Two hours of event time, whatever the ID says; the row without one is not counted.
        let hour = |h: u64| bucket_value(1_672_617_600 + h * 3600);
        assert_eq!(
            aggregate
                .iter()
                .map(|r| (r.bucket.clone(), r.n))
                .collect::<Vec<_>>(),
            [(hour(7), 2), (hour(9), 1)]
        );
    }

    #[test]
    fn counts_sums_and_extremes_per_bucket_and_dimension() {
        let plan = compile(&settings(
            &["service", "level"],
            &["latency_ms"],
            &["latency_ms"],
        ))
        .unwrap();
        let layout = Layout::new(10, 0).unwrap();
        let hour = 1_700_000_000 - 1_700_000_000 % 3600;
        let id = |second: u64, counter: u32| layout.encode(second, 1, counter).unwrap();
        let row = |service: &str, level: Option<&str>, latency: Option<u64>| {
            vec![
                SqlValue::Text(service.into()),
                level.map_or(SqlValue::Null, |l| SqlValue::Text(l.into())),
                latency.map_or(SqlValue::Null, SqlValue::Uint),
                SqlValue::Text("m".into()),
                SqlValue::Null,
            ]
        };
        let rows = [
            (id(hour + 10, 0), row("api", Some("info"), Some(5))),
            (id(hour + 20, 1), row("api", Some("info"), Some(7))),
            (id(hour + 3599, 2), row("api", Some("info"), None)),
            (id(hour + 3600, 0), row("api", Some("info"), Some(1))),
            (id(hour + 30, 0), row("db", None, Some(u64::MAX))),
            (id(hour + 31, 0), row("db", None, Some(u64::MAX))),
        ];
        let aggregate = plan.aggregate(&layout, rows.iter().map(|(id, v)| (*id, v.as_slice())));
        let at = |s: u64| bucket_value(s);
        assert_eq!(
            aggregate,
            vec![
                RollupRow {
                    bucket: at(hour),
                    dimensions: vec![SqlValue::Text("api".into()), SqlValue::Text("info".into())],
                    n: 3,
                    measures: vec![SqlValue::Text("12".into()), SqlValue::Uint(7)],
                },
                RollupRow {
                    bucket: at(hour),
                    dimensions: vec![SqlValue::Text("db".into()), SqlValue::Text(String::new())],
                    n: 2,
                    measures: vec![
                        SqlValue::Text((2 * u128::from(u64::MAX)).to_string()),
                        SqlValue::Uint(u64::MAX)
                    ],
                },
                RollupRow {
                    bucket: at(hour + 3600),
                    dimensions: vec![SqlValue::Text("api".into()), SqlValue::Text("info".into())],
                    n: 1,
                    measures: vec![SqlValue::Text("1".into()), SqlValue::Uint(1)],
                },
            ]
        );
    }

    #[test]
    fn a_measure_without_values_is_null_and_sums_to_zero() {
        let plan = compile(&RollupSettings {
            mins: vec!["ratio".into()],
            ..settings(&[], &["ratio"], &[])
        })
        .unwrap();
        let layout = Layout::new(10, 0).unwrap();
        let values = vec![SqlValue::Null; 5];
        let rows = plan.aggregate(&layout, [(1u64 << 40, values.as_slice())]);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].measures,
            vec![SqlValue::Double(0.0), SqlValue::Null]
        );
        assert!(rows[0].dimensions.is_empty());
    }

    #[test]
    fn bad_rollups_are_refused() {
        assert!(compile(&settings(&["nope"], &[], &[])).is_err());
        assert!(compile(&settings(&["message"], &[], &[])).is_err());
        assert!(compile(&settings(&[], &["service"], &[])).is_err());
        assert!(
            compile(&RollupSettings {
                source: "other".into(),
                ..settings(&[], &[], &[])
            })
            .is_err()
        );
        assert!(
            compile(&RollupSettings {
                name: "logs".into(),
                ..settings(&[], &[], &[])
            })
            .is_err()
        );
        // The key would be too long: four 255-character strings.
        let wide: Vec<ColumnSpec> = (0..4)
            .map(|i| column(&format!("d{i}"), ColumnType::String, Some(255)))
            .collect();
        let logs = Ident::new("logs").unwrap();
        let wide_settings = settings(&["d0", "d1", "d2", "d3"], &[], &[]);
        let refused = RollupPlan::compile(
            &wide_settings,
            &[SourceTable {
                name: &logs,
                columns: &wide,
                event_time: "",
            }],
        );
        assert!(refused.unwrap_err().contains("3072"));
    }

    #[test]
    fn buckets_align_to_utc() {
        assert_eq!(Bucket::Minute.start(125), 120);
        assert_eq!(Bucket::Hour.start(7_199), 3_600);
        assert_eq!(Bucket::Day.start(86_400 * 3 + 5), 86_400 * 3);
    }
}
