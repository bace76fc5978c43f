//! The log table: created partitioned by ID range, recorded in `logstamp_tables` with the ID
//! layout and partitioning it was made with, and checked against the settings before use.
//!
//! The checks are pure functions over what the catalog says, tested without a server; the
//! async functions only read the catalog and run the DDL.

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::Serialize;

use super::compression::{self, Compression};
use super::partition_plan::{
    ExistingPartition, PartitionScheme, Partitioning, check_partitioning, parse_bound,
};
use super::schema::{ColumnSpec, create_table_sql};
use super::settings::StoreSettings;
use crate::mysql::rows::take;
use crate::mysql::{DbError, Ident};

/// What the log table must be, from the settings.
#[derive(Debug, Clone)]
pub struct TableSpec {
    pub table: Ident,
    pub columns: Vec<ColumnSpec>,
    pub payload: bool,
    /// How its partitions are compressed (`store.compression`).
    pub compression: Compression,
    pub scheme: PartitionScheme,
    /// The event-time column kept in the zone map (`store.event_time`), if any.
    pub event_time: Option<Ident>,
}

impl TableSpec {
    /// The log table (`store.table`).
    pub fn log_table(store: &StoreSettings, scheme: PartitionScheme) -> TableSpec {
        TableSpec {
            table: store.table.clone(),
            columns: store.columns.clone(),
            payload: store.payload.kept(),
            compression: store.compression,
            scheme,
            event_time: event_time_ident(&store.event_time),
        }
    }

    /// The fan-out tables (`[[store.tables]]`): partitioned and kept like the log table.
    pub fn fanout(store: &StoreSettings, scheme: &PartitionScheme) -> Vec<TableSpec> {
        store
            .tables
            .iter()
            .map(|t| TableSpec {
                table: t.name.clone(),
                columns: t.columns.clone(),
                payload: t.payload.kept(),
                compression: store.compression,
                scheme: scheme.clone(),
                event_time: event_time_ident(&t.event_time),
            })
            .collect()
    }

    /// The log table, then the fan-out tables.
    pub fn all(store: &StoreSettings, scheme: PartitionScheme) -> Vec<TableSpec> {
        let fanout = TableSpec::fanout(store, &scheme);
        let mut all = vec![TableSpec::log_table(store, scheme)];
        all.extend(fanout);
        all
    }
}

/// A validated `event_time` setting as a column name; empty: none.
fn event_time_ident(name: &str) -> Option<Ident> {
    Ident::new(name).ok()
}

/// A row of `logstamp_tables`: how a log table was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableRecord {
    pub table_name: String,
    pub service_bits: u8,
    pub epoch_unix_seconds: u64,
    pub period: String,
    pub time_zone: String,
}

impl TableRecord {
    pub fn of(spec: &TableSpec) -> TableRecord {
        TableRecord {
            table_name: spec.table.as_str().to_string(),
            service_bits: spec.scheme.layout.service_bits(),
            epoch_unix_seconds: spec.scheme.layout.epoch_unix_seconds(),
            period: spec.scheme.period.to_string(),
            time_zone: spec.scheme.zone.to_string(),
        }
    }
}

/// A column as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingColumn {
    pub name: String,
    /// `bigint(20) unsigned` (MariaDB) or `bigint unsigned` (MySQL 8).
    pub column_type: String,
    /// `PRI` for primary key columns.
    pub key: String,
}

/// What `ensure_table` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TableOutcome {
    /// Created, with these partitions (the last is `pmax`).
    TableCreated {
        table: String,
        partitions: Vec<String>,
    },
    /// An existing table matching the settings, now recorded.
    TableAdopted { table: String, partitions: usize },
    /// Already there as the settings say.
    TableUnchanged { table: String },
    /// The recorded number of service bits was changed by `--force`.
    ServiceBitsChanged { table: String, from: u8, to: u8 },
}

/// Refuses a table whose `id` is not an unsigned 64-bit primary key, or which lacks a column
/// the settings map.
pub fn check_columns(spec: &TableSpec, columns: &[ExistingColumn]) -> Result<(), String> {
    let table = &spec.table;
    let find = |name: &str| columns.iter().find(|c| c.name.eq_ignore_ascii_case(name));
    let Some(id) = find("id") else {
        return Err(format!("table {table} has no id column"));
    };
    let id_type = id.column_type.to_ascii_lowercase();
    if !(id_type.starts_with("bigint") && id_type.contains("unsigned")) {
        return Err(format!(
            "column id of table {table} is {}, not BIGINT UNSIGNED: IDs past 2038 would not fit",
            id.column_type
        ));
    }
    let primary: Vec<&str> = columns
        .iter()
        .filter(|c| c.key == "PRI")
        .map(|c| c.name.as_str())
        .collect();
    if primary.len() != 1 || !primary[0].eq_ignore_ascii_case("id") {
        return Err(format!(
            "table {table} must have PRIMARY KEY (id), has ({})",
            primary.join(", ")
        ));
    }
    let mut missing: Vec<&str> = spec
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|name| find(name).is_none())
        .collect();
    if spec.payload && find("payload").is_none() {
        missing.push("payload");
    }
    if !missing.is_empty() {
        return Err(format!(
            "table {table} lacks the columns {} that the settings map (store.columns, \
             store.payload): add them with ALTER TABLE or change the settings",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// How the recorded table differs from the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordCheck {
    Same,
    /// Only the number of service bits differs, and `force` allows it.
    ServiceBitsChange {
        from: u8,
        to: u8,
    },
}

/// Compares a table's record with the settings. A different epoch, period or zone is always
/// refused: the partition bounds and the IDs already stored depend on them. A different number
/// of service bits is refused unless `force`, since IDs from both layouts would then share the
/// table and decode differently.
pub fn check_record(
    record: &TableRecord,
    spec: &TableSpec,
    force: bool,
) -> Result<RecordCheck, String> {
    let want = TableRecord::of(spec);
    let table = &spec.table;
    if record.epoch_unix_seconds != want.epoch_unix_seconds {
        return Err(format!(
            "table {table} was created with the ID epoch {} (Unix seconds), the settings say {} \
             (id.epoch): its IDs and partition bounds count from the recorded epoch, so this \
             cannot be changed, even with --force",
            record.epoch_unix_seconds, want.epoch_unix_seconds
        ));
    }
    if record.period != want.period || record.time_zone != want.time_zone {
        return Err(format!(
            "table {table} is partitioned by {} in {}, the settings say {} in {} \
             (partitions.period, partitions.time_zone): set them back; repartitioning a live \
             table is not supported, even with --force",
            record.period, record.time_zone, want.period, want.time_zone
        ));
    }
    if record.service_bits != want.service_bits {
        if !force {
            return Err(format!(
                "table {table} was created with {} service bits, the settings say {} \
                 (id.service_bits): changing the ID layout of a live table is refused; stop \
                 every writer first and run migrate --force to change it",
                record.service_bits, want.service_bits
            ));
        }
        return Ok(RecordCheck::ServiceBitsChange {
            from: record.service_bits,
            to: want.service_bits,
        });
    }
    Ok(RecordCheck::Same)
}

/// Creates the log table if it is missing, or checks an existing one against its record and
/// the settings; records it in `logstamp_tables`. Needs the migrations applied. The caller
/// serializes concurrent runs (see `lock`).
pub async fn ensure_table(
    conn: &mut Conn,
    spec: &TableSpec,
    now: DateTime<Utc>,
    force: bool,
) -> Result<TableOutcome, DbError> {
    let table = spec.table.as_str().to_string();
    let record = read_record(conn, &spec.table).await?;
    let Some(partitioning) = read_partitioning(conn, &spec.table).await? else {
        let plan = spec.scheme.initial_plan(now).map_err(|e| {
            DbError::catalog(
                spec.table.as_str(),
                format!("partitions of table {}: {e}", spec.table),
            )
        })?;
        compression::check_server(conn, spec.compression).await?;
        let flavor = crate::mysql::flavor(conn).await?;
        let sql = create_table_sql(
            &spec.table,
            &spec.columns,
            spec.payload,
            &plan,
            spec.compression.options(flavor),
        );
        conn.query_drop(sql.trim_end().trim_end_matches(';'))
            .await
            .map_err(DbError::mysql(format!("creating table {}", spec.table)))?;
        // No table means no IDs to protect: a record left by a dropped table is replaced.
        write_record(conn, spec).await?;
        // An empty table's text filter is complete from its first row on.
        super::text_search::cover_new_table(conn, &spec.table).await?;
        return Ok(TableOutcome::TableCreated {
            table,
            partitions: plan.partitions.into_iter().map(|p| p.name).collect(),
        });
    };
    let check = match &record {
        Some(record) => check_record(record, spec, force)
            .map_err(|e| DbError::catalog(spec.table.as_str(), e))?,
        None => RecordCheck::Same,
    };
    let scheme = &spec.scheme;
    check_partitioning(
        &spec.table,
        &partitioning,
        &scheme.layout,
        scheme.period,
        &scheme.zone,
    )
    .map_err(|e| DbError::catalog(spec.table.as_str(), e))?;
    let columns = read_columns(conn, &spec.table).await?;
    check_columns(spec, &columns).map_err(|e| DbError::catalog(spec.table.as_str(), e))?;
    match (record, check) {
        (None, _) => {
            write_record(conn, spec).await?;
            Ok(TableOutcome::TableAdopted {
                table,
                partitions: partitioning.partitions.len(),
            })
        }
        (Some(_), RecordCheck::ServiceBitsChange { from, to }) => {
            write_record(conn, spec).await?;
            Ok(TableOutcome::ServiceBitsChanged { table, from, to })
        }
        (Some(_), RecordCheck::Same) => Ok(TableOutcome::TableUnchanged { table }),
    }
}

/// The table's row in `logstamp_tables`, if any.
pub async fn read_record(conn: &mut Conn, table: &Ident) -> Result<Option<TableRecord>, DbError> {
    let row: Option<mysql_async::Row> = conn
        .exec_first(
            "SELECT `table_name`, `service_bits`, `epoch_unix_seconds`, `period`, `time_zone` \
             FROM `logstamp_tables` WHERE `table_name` = ?",
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(format!(
            "reading the record of table {table} (has logstamp migrate run?)"
        )))?;
    row.map(|mut row| {
        Ok(TableRecord {
            table_name: take(&mut row, 0, "logstamp_tables.table_name")?,
            service_bits: take(&mut row, 1, "logstamp_tables.service_bits")?,
            epoch_unix_seconds: take(&mut row, 2, "logstamp_tables.epoch_unix_seconds")?,
            period: take(&mut row, 3, "logstamp_tables.period")?,
            time_zone: take(&mut row, 4, "logstamp_tables.time_zone")?,
        })
    })
    .transpose()
}

async fn write_record(conn: &mut Conn, spec: &TableSpec) -> Result<(), DbError> {
    let r = TableRecord::of(spec);
    conn.exec_drop(
        "INSERT INTO `logstamp_tables` \
         (`table_name`, `service_bits`, `epoch_unix_seconds`, `period`, `time_zone`, \
          `created_at`, `updated_at`) \
         VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) \
         ON DUPLICATE KEY UPDATE `service_bits` = VALUES(`service_bits`), \
         `epoch_unix_seconds` = VALUES(`epoch_unix_seconds`), `period` = VALUES(`period`), \
         `time_zone` = VALUES(`time_zone`), `updated_at` = UTC_TIMESTAMP(6)",
        (
            r.table_name.as_str(),
            r.service_bits,
            r.epoch_unix_seconds,
            r.period.as_str(),
            r.time_zone.as_str(),
        ),
    )
    .await
    .map_err(DbError::mysql(format!(
        "recording table {} in logstamp_tables",
        spec.table
    )))
}

/// How the table is partitioned; `None` if there is no such table in the current database.
pub async fn read_partitioning(
    conn: &mut Conn,
    table: &Ident,
) -> Result<Option<Partitioning>, DbError> {
    let context = || format!("reading the partitions of table {table}");
    let kind: Option<mysql_async::Row> = conn
        .exec_first(
            "SELECT `TABLE_TYPE` FROM information_schema.TABLES \
             WHERE `TABLE_SCHEMA` = DATABASE() AND `TABLE_NAME` = ?",
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let Some(mut kind) = kind else {
        return Ok(None);
    };
    let kind: String = take(&mut kind, 0, "TABLES.TABLE_TYPE")?;
    if kind != "BASE TABLE" {
        return Err(DbError::catalog(
            table.as_str(),
            format!("{table} is a {kind}, not a table"),
        ));
    }
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT `PARTITION_NAME`, `PARTITION_METHOD`, `PARTITION_EXPRESSION`, \
             `PARTITION_DESCRIPTION`, `TABLE_ROWS`, `SUBPARTITION_NAME` \
             FROM information_schema.PARTITIONS \
             WHERE `TABLE_SCHEMA` = DATABASE() AND `TABLE_NAME` = ? \
             ORDER BY `PARTITION_ORDINAL_POSITION`, `SUBPARTITION_ORDINAL_POSITION`",
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(context()))?;
    let mut partitioning = Partitioning {
        method: None,
        expression: None,
        subpartitioned: false,
        partitions: Vec::new(),
    };
    for mut row in rows {
        let name: Option<String> = take(&mut row, 0, "PARTITIONS.PARTITION_NAME")?;
        let Some(name) = name else {
            // The one row of a table that is not partitioned.
            continue;
        };
        partitioning.method = take(&mut row, 1, "PARTITIONS.PARTITION_METHOD")?;
        partitioning.expression = take(&mut row, 2, "PARTITIONS.PARTITION_EXPRESSION")?;
        let description: Option<String> = take(&mut row, 3, "PARTITIONS.PARTITION_DESCRIPTION")?;
        let rows: Option<u64> = take(&mut row, 4, "PARTITIONS.TABLE_ROWS")?;
        let sub: Option<String> = take(&mut row, 5, "PARTITIONS.SUBPARTITION_NAME")?;
        partitioning.subpartitioned |= sub.is_some();
        let less_than = match description {
            // Only RANGE partitions have bounds; the method check refuses the others.
            Some(text) if partitioning.method.as_deref() == Some("RANGE") => {
                parse_bound(&text).map_err(|e| DbError::catalog(table.as_str(), e))?
            }
            _ => None,
        };
        partitioning.partitions.push(ExistingPartition {
            name,
            less_than,
            rows: rows.unwrap_or(0),
        });
    }
    Ok(Some(partitioning))
}

/// The table's columns, in order.
pub async fn read_columns(conn: &mut Conn, table: &Ident) -> Result<Vec<ExistingColumn>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT `COLUMN_NAME`, `COLUMN_TYPE`, `COLUMN_KEY` FROM information_schema.COLUMNS \
             WHERE `TABLE_SCHEMA` = DATABASE() AND `TABLE_NAME` = ? ORDER BY `ORDINAL_POSITION`",
            (table.as_str(),),
        )
        .await
        .map_err(DbError::mysql(format!(
            "reading the columns of table {table}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(ExistingColumn {
                name: take(&mut row, 0, "COLUMNS.COLUMN_NAME")?,
                column_type: take(&mut row, 1, "COLUMNS.COLUMN_TYPE")?,
                key: take(&mut row, 2, "COLUMNS.COLUMN_KEY")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::store::partition_plan::aligned_period_start;
    use chrono::{NaiveDate, NaiveTime};

    fn spec(overrides: &[(&str, &str)]) -> TableSpec {
        let mut sources = crate::config::Sources {
            env: Some(Default::default()),
            ..Default::default()
        };
        for (k, v) in overrides {
            sources = sources.set(k, v);
        }
        Settings::load(&sources).unwrap().log_table()
    }

    fn day(text: &str) -> NaiveDate {
        text.parse().unwrap()
    }

    fn bound(spec: &TableSpec, date: &str) -> u64 {
        let at = spec.scheme.zone.resolve(day(date).and_time(NaiveTime::MIN));
        spec.scheme.layout.first_id_at(at.timestamp()).unwrap()
    }

    fn partitioned(bounds: &[Option<u64>]) -> Partitioning {
        Partitioning {
            method: Some("RANGE".into()),
            expression: Some("`id`".into()),
            subpartitioned: false,
            partitions: bounds
                .iter()
                .enumerate()
                .map(|(i, b)| ExistingPartition {
                    name: format!("p{i}"),
                    less_than: *b,
                    rows: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn bounds_read_back_exactly_in_both_servers_notations() {
        assert_eq!(parse_bound("MAXVALUE"), Ok(None));
        assert_eq!(parse_bound("42"), Ok(Some(42)));
        assert_eq!(
            parse_bound("-9223372036854775808"),
            Ok(Some(9_223_372_036_854_775_808))
        );
        assert_eq!(
            parse_bound("-4294967296"),
            Ok(Some(u64::MAX - 4_294_967_295))
        );
        assert_eq!(
            parse_bound("18446744069414584320"),
            Ok(Some(18_446_744_069_414_584_320))
        );
        for bad in [
            "",
            "-0",
            "-9223372036854775809",
            "x",
            "1.5",
            "18446744073709551616",
        ] {
            assert!(parse_bound(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn aligned_bounds_are_period_starts_in_the_zone() {
        let s = spec(&[
            ("partitions.period", "month"),
            ("partitions.time_zone", "+08:00"),
        ]);
        let b = bound(&s, "2040-03-01");
        assert!(b > i64::MAX as u64);
        assert_eq!(
            aligned_period_start(b, &s.scheme.layout, s.scheme.period, &s.scheme.zone),
            Some(day("2040-03-01"))
        );
        // The same date at UTC midnight is eight hours off.
        let utc = s
            .scheme
            .layout
            .first_id_at(
                day("2040-03-01")
                    .and_time(NaiveTime::MIN)
                    .and_utc()
                    .timestamp(),
            )
            .unwrap();
        assert_eq!(
            aligned_period_start(utc, &s.scheme.layout, s.scheme.period, &s.scheme.zone),
            None
        );
        // Mid-month and a bound with counter bits set are not starts.
        assert_eq!(
            aligned_period_start(
                bound(&s, "2040-03-02"),
                &s.scheme.layout,
                s.scheme.period,
                &s.scheme.zone
            ),
            None
        );
        assert_eq!(
            aligned_period_start(b + 1, &s.scheme.layout, s.scheme.period, &s.scheme.zone),
            None
        );
        // A week starts on Monday: 2040-03-05 is one.
        let w = spec(&[("partitions.period", "week")]);
        assert!(
            aligned_period_start(
                bound(&w, "2040-03-05"),
                &w.scheme.layout,
                w.scheme.period,
                &w.scheme.zone
            )
            .is_some()
        );
        assert!(
            aligned_period_start(
                bound(&w, "2040-03-06"),
                &w.scheme.layout,
                w.scheme.period,
                &w.scheme.zone
            )
            .is_none()
        );
    }

    #[test]
    fn partitioning_must_be_range_on_id_ending_in_maxvalue() {
        let s = spec(&[]);
        let good = partitioned(&[
            Some(bound(&s, "2024-01-01")),
            Some(bound(&s, "2024-01-02")),
            None,
        ]);
        let check = |p: &Partitioning| {
            check_partitioning(
                &s.table,
                p,
                &s.scheme.layout,
                s.scheme.period,
                &s.scheme.zone,
            )
        };
        assert_eq!(check(&good), Ok(()));
        // A first partition named pmin (tables made since) is checked like any other.
        let mut with_pmin = good.clone();
        with_pmin.partitions[0].name = "pmin".into();
        assert_eq!(check(&with_pmin), Ok(()));
        with_pmin.partitions[0].less_than = Some(bound(&s, "2024-01-01") - (60 << 32));
        assert!(check(&with_pmin).unwrap_err().contains("partition pmin"));

        let mut hash = good.clone();
        hash.method = Some("HASH".into());
        assert!(check(&hash).unwrap_err().contains("partitioned by HASH"));
        let mut other_column = good.clone();
        other_column.expression = Some("`ts`".into());
        assert!(check(&other_column).unwrap_err().contains("RANGE (id)"));
        let plain = Partitioning {
            method: None,
            expression: None,
            subpartitioned: false,
            partitions: vec![],
        };
        assert!(check(&plain).unwrap_err().contains("not partitioned"));
        let no_pmax = partitioned(&[Some(bound(&s, "2024-01-01"))]);
        assert!(check(&no_pmax).unwrap_err().contains("MAXVALUE"));
        let mut sub = good.clone();
        sub.subpartitioned = true;
        assert!(check(&sub).unwrap_err().contains("subpartitions"));
        let misaligned = partitioned(&[Some(bound(&s, "2024-01-01") + (3600 << 32)), None]);
        assert!(
            check(&misaligned)
                .unwrap_err()
                .contains("not the start of a day")
        );
    }

    fn column(name: &str, column_type: &str, key: &str) -> ExistingColumn {
        ExistingColumn {
            name: name.into(),
            column_type: column_type.into(),
            key: key.into(),
        }
    }

    #[test]
    fn columns_need_an_unsigned_id_key_and_every_mapped_column() {
        let s = spec(&[("store.payload", "false")]);
        let mut columns = vec![column("id", "bigint(20) unsigned", "PRI")];
        columns.extend(s.columns.iter().map(|c| column(&c.name, "varchar(10)", "")));
        assert_eq!(check_columns(&s, &columns), Ok(()));

        let mut signed = columns.clone();
        signed[0].column_type = "bigint(20)".into();
        assert!(
            check_columns(&s, &signed)
                .unwrap_err()
                .contains("not BIGINT UNSIGNED")
        );
        let mut wide_key = columns.clone();
        wide_key[1].key = "PRI".into();
        assert!(
            check_columns(&s, &wide_key)
                .unwrap_err()
                .contains("PRIMARY KEY (id)")
        );
        let missing = &columns[..columns.len() - 1];
        let error = check_columns(&s, missing).unwrap_err();
        assert!(error.contains(&s.columns.last().unwrap().name), "{error}");
        let with_payload = spec(&[]);
        assert!(
            check_columns(&with_payload, &columns)
                .unwrap_err()
                .contains("payload")
        );
        assert_eq!(
            check_columns(&s, &[]).unwrap_err(),
            "table `logs` has no id column"
        );
    }

    #[test]
    fn records_compare_with_the_settings() {
        let s = spec(&[]);
        let same = TableRecord::of(&s);
        assert_eq!(check_record(&same, &s, false), Ok(RecordCheck::Same));

        let mut bits = same.clone();
        bits.service_bits = 12;
        let error = check_record(&bits, &s, false).unwrap_err();
        assert!(
            error.contains("12 service bits, the settings say 10"),
            "{error}"
        );
        assert_eq!(
            check_record(&bits, &s, true),
            Ok(RecordCheck::ServiceBitsChange { from: 12, to: 10 })
        );

        let mut epoch = same.clone();
        epoch.epoch_unix_seconds = 1_600_000_000;
        assert!(
            check_record(&epoch, &s, true)
                .unwrap_err()
                .contains("ID epoch 1600000000")
        );
        let mut period = same.clone();
        period.period = "month".into();
        assert!(
            check_record(&period, &s, true)
                .unwrap_err()
                .contains("by month in UTC")
        );
        let mut zone = same;
        zone.time_zone = "+08:00".into();
        assert!(
            check_record(&zone, &s, true)
                .unwrap_err()
                .contains("by day in +08:00")
        );
    }
}
