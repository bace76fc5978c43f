//! The `[store]` and `[partitions]` settings: the log table, its columns and fan-out tables, how
//! rows are written, and how tables are partitioned and kept.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::Period;
use super::compression::Compression;
use super::partition_plan::PartitionScheme;
use super::schema::{ColumnSpec, ColumnType};
use super::zone_plan::ZonePlan;
use crate::id::Layout;
use crate::mysql::ident::serialize_bare;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::{Ident, MysqlUrl};
use crate::settings::{
    SettingError, as_text, at_least_one, at_most, at_most_a_year, duration_text,
};
use crate::store::route::Condition;
use crate::store::shard_plan::ShardName;
use crate::time::Zone;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSettings {
    #[serde(with = "as_text")]
    pub period: Period,
    #[serde(with = "as_text")]
    pub time_zone: Zone,
    pub ahead: u32,
    pub retention: DurationOrOff,
}

impl PartitionSettings {
    /// How tables are partitioned and kept, for IDs of `layout`.
    pub fn scheme(&self, layout: Layout) -> PartitionScheme {
        PartitionScheme {
            layout,
            period: self.period,
            zone: self.time_zone,
            ahead: self.ahead,
            retention: self.retention.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    #[serde(
        serialize_with = "serialize_bare",
        deserialize_with = "as_text::deserialize"
    )]
    pub table: Ident,
    pub concurrency: usize,
    pub insert_method: InsertMethod,
    /// How long a batch failing for a transient reason is retried before the writer gives up.
    #[serde(with = "duration_text")]
    pub give_up_after: Duration,
    /// How long one attempt at writing a batch (or reading a partition's stored offset) may
    /// wait on its database, connecting included; past it the database is taken as hung and
    /// the attempt fails (see [`crate::mysql::bound`]).
    #[serde(with = "duration_text")]
    pub write_timeout: Duration,
    /// How long after its stamping a batch may still commit (see [`StoreSettings::commit_window`]).
    pub commit_window: DurationOrOff,
    pub payload: PayloadMode,
    /// How the log and fan-out tables' partitions are compressed.
    pub compression: Compression,
    pub columns: Vec<ColumnSpec>,
    /// The log table's event-time column (a datetime column of `columns`), kept in the zone
    /// map for queries by event time; empty: none.
    #[serde(default)]
    pub event_time: String,
    /// Fan-out tables: records (or those meeting `when`) also go there, with the same ID.
    #[serde(default)]
    pub tables: Vec<FanoutTable>,
    /// The databases the partitions are spread over (each partition's rows and offset in one
    /// of them); empty: everything in `mysql.url`'s database.
    #[serde(default)]
    pub shards: Vec<MysqlUrl>,
}

/// One `[[store.tables]]`: a table partitioned like the log table, keyed by the record's ID.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FanoutTable {
    #[serde(
        serialize_with = "serialize_bare",
        deserialize_with = "as_text::deserialize"
    )]
    pub name: Ident,
    /// Conditions on the record, all of which must hold; none: every record.
    #[serde(default)]
    pub when: Vec<Condition>,
    /// What this table's `payload` column keeps, as `store.payload` (default: no column).
    #[serde(default)]
    pub payload: PayloadMode,
    pub columns: Vec<ColumnSpec>,
    /// This table's event-time column, as `store.event_time`; empty: none.
    #[serde(default)]
    pub event_time: String,
}

/// What a table's `payload` column keeps (`store.payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PayloadMode {
    /// No `payload` column (`false`, as the setting was once written).
    #[default]
    None,
    /// The whole record, as received (`true`, as the setting was once written).
    Full,
    /// What no column of the table holds exactly (see [`crate::store::residual`]); readers
    /// give the whole record back.
    Residual,
}

impl PayloadMode {
    /// Whether the table has a `payload` column.
    pub fn kept(self) -> bool {
        self != PayloadMode::None
    }
}

impl fmt::Display for PayloadMode {
    /// The setting's own spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PayloadMode::None => "none",
            PayloadMode::Full => "full",
            PayloadMode::Residual => "residual",
        })
    }
}

impl Serialize for PayloadMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `"none"`, `"full"` or `"residual"`; the booleans of earlier versions are still read, `true`
/// as `"full"` and `false` as `"none"` (environment variables arrive as text: `"true"`,
/// `"false"`).
impl<'de> Deserialize<'de> for PayloadMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PayloadMode, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Flag(true) => Ok(PayloadMode::Full),
            Written::Flag(false) => Ok(PayloadMode::None),
            Written::Text(text) => match text.trim() {
                "none" | "false" => Ok(PayloadMode::None),
                "full" | "true" => Ok(PayloadMode::Full),
                "residual" => Ok(PayloadMode::Residual),
                other => Err(serde::de::Error::custom(format!(
                    "{other:?} is not a payload mode: use \"residual\" (what no column holds), \
                     \"full\" (the whole record) or \"none\" (no payload column)"
                ))),
            },
        }
    }
}

/// How the writer sends rows to MySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InsertMethod {
    Text,
    Prepared,
    Batch,
    LoadData,
}

impl fmt::Display for InsertMethod {
    /// The setting's own spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertMethod::Text => "text",
            InsertMethod::Prepared => "prepared",
            InsertMethod::Batch => "batch",
            InsertMethod::LoadData => "load_data",
        })
    }
}

/// The least the commit window exceeds `store.give_up_after` by: for the last attempt's own
/// time, and for worker clocks somewhat behind the database's.
pub const COMMIT_WINDOW_MARGIN: Duration = Duration::from_secs(30);

impl StoreSettings {
    /// How the writer, start-up and `rollup rebuild` retry: for `give_up_after` at most.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::giving_up_after(self.give_up_after)
    }

    /// How long after the second in its lowest ID a batch may still commit, by the database's
    /// clock (`None`: no limit): the setting, raised to `give_up_after` plus
    /// [`COMMIT_WINDOW_MARGIN`] so a batch retried that long can still commit. The writer refuses
    /// to commit later; `query --follow` re-reads this much of the table's tail, and needs it.
    pub fn commit_window(&self) -> Option<Duration> {
        let least = self.give_up_after + COMMIT_WINDOW_MARGIN;
        self.commit_window.0.map(|window| window.max(least))
    }

    /// Valid, distinct column and table names; fan-out tables with columns and conditions that
    /// make sense.
    pub fn validate(&self) -> Result<(), SettingError> {
        at_least_one("store.concurrency", self.concurrency as u64)?;
        at_most("store.concurrency", self.concurrency, 1_024)?;
        at_most_a_year("store.give_up_after", self.give_up_after)?;
        at_most_a_year("store.write_timeout", self.write_timeout)?;
        if self.write_timeout < Duration::from_millis(1) {
            return Err(SettingError::new(
                "store.write_timeout",
                "must be at least 1ms",
            ));
        }
        if let Some(window) = self.commit_window.0 {
            at_most_a_year("store.commit_window", window)?;
        }
        distinct_shards(&self.shards)?;
        distinct_columns("store.columns", &self.columns)?;
        event_time_column("store.event_time", &self.event_time, &self.columns)?;
        let mut tables = HashSet::from([self.table.as_str().to_ascii_lowercase()]);
        for table in &self.tables {
            let key = format!("store.tables.{}", table.name);
            if !tables.insert(table.name.as_str().to_ascii_lowercase()) {
                return Err(SettingError::new(
                    "store.tables",
                    format!("table {} appears twice", table.name),
                ));
            }
            if table.columns.is_empty() {
                return Err(SettingError::new(&key, "needs at least one column"));
            }
            distinct_columns(&key, &table.columns)?;
            event_time_column(
                &format!("{key}.event_time"),
                &table.event_time,
                &table.columns,
            )?;
            for condition in &table.when {
                condition.check().map_err(|e| SettingError::new(&key, e))?;
            }
        }
        Ok(())
    }

    /// The tables with an event time, each with where that time is among its values.
    pub fn zone_plans(&self) -> Vec<ZonePlan> {
        let tables = [(&self.table, &self.event_time, &self.columns)]
            .into_iter()
            .chain(
                self.tables
                    .iter()
                    .map(|t| (&t.name, &t.event_time, &t.columns)),
            );
        tables
            .enumerate()
            .filter_map(|(table_index, (table, event_time, columns))| {
                let column_index = columns.iter().position(|c| c.name == *event_time)?;
                Some(ZonePlan {
                    table: table.clone(),
                    table_index,
                    column: columns[column_index].ident().ok()?,
                    column_index,
                })
            })
            .collect()
    }
}

/// An event time, when given, is one of the table's `datetime` columns.
fn event_time_column(key: &str, name: &str, columns: &[ColumnSpec]) -> Result<(), SettingError> {
    if name.is_empty() {
        return Ok(());
    }
    let datetimes: Vec<&str> = columns
        .iter()
        .filter(|c| c.column_type == ColumnType::Datetime)
        .map(|c| c.name.as_str())
        .collect();
    match columns.iter().find(|c| c.name == name) {
        Some(c) if c.column_type == ColumnType::Datetime => Ok(()),
        found => Err(SettingError::new(
            key,
            format!(
                "{name:?} {}: the event time is a datetime column of the table ({})",
                if found.is_some() {
                    "is not a datetime column"
                } else {
                    "is not a column of the table"
                },
                if datetimes.is_empty() {
                    "it has none".to_string()
                } else {
                    datetimes.join(", ")
                }
            ),
        )),
    }
}

/// Refuses two shard URLs of one database: a shard is known by its `host:port/database`.
fn distinct_shards(shards: &[MysqlUrl]) -> Result<(), SettingError> {
    let mut seen = HashSet::new();
    for url in shards {
        let name = ShardName::of(url);
        if !seen.insert(name.clone()) {
            return Err(SettingError::new(
                "store.shards",
                format!("database {name} is listed twice"),
            ));
        }
    }
    Ok(())
}

/// Refuses a column name that is not an identifier or is mapped twice.
fn distinct_columns(key: &str, columns: &[ColumnSpec]) -> Result<(), SettingError> {
    let mut seen = HashSet::new();
    for column in columns {
        column.ident().map_err(|e| SettingError::new(key, e))?;
        if !seen.insert(column.name.to_ascii_lowercase()) {
            return Err(SettingError::new(
                key,
                format!("column {:?} is mapped twice", column.name),
            ));
        }
    }
    Ok(())
}

/// A duration, or `"off"` (`None`): how long partitions are kept (off: forever), or the commit
/// window (off: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationOrOff(pub Option<Duration>);

impl<'de> Deserialize<'de> for DurationOrOff {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DurationOrOff, D::Error> {
        let text = String::deserialize(d)?;
        if matches!(text.trim(), "off" | "") {
            return Ok(DurationOrOff(None));
        }
        humantime::parse_duration(text.trim())
            .map(|d| DurationOrOff(Some(d)))
            .map_err(|e| {
                serde::de::Error::custom(format!("{e}: use a duration like \"90days\" or \"off\""))
            })
    }
}

impl Serialize for DurationOrOff {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            None => s.serialize_str("off"),
            Some(d) => s.collect_str(&humantime::format_duration(d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PayloadMode;

    #[test]
    fn payload_modes_and_the_old_booleans_read() {
        let read = |value: serde_json::Value| serde_json::from_value::<PayloadMode>(value);
        assert_eq!(read("residual".into()).unwrap(), PayloadMode::Residual);
        assert_eq!(read("full".into()).unwrap(), PayloadMode::Full);
        assert_eq!(read("none".into()).unwrap(), PayloadMode::None);
        // Earlier versions' booleans, also as environment variables write them.
        assert_eq!(read(true.into()).unwrap(), PayloadMode::Full);
        assert_eq!(read(false.into()).unwrap(), PayloadMode::None);
        assert_eq!(read("true".into()).unwrap(), PayloadMode::Full);
        assert_eq!(read("false".into()).unwrap(), PayloadMode::None);
        let error = read("some".into()).unwrap_err().to_string();
        assert!(error.contains("\"residual\""), "{error}");
        assert_eq!(
            serde_json::to_value(PayloadMode::Residual).unwrap(),
            "residual"
        );
    }
}
