//! Partition maintenance of the log table: keep `ahead` empty partitions after the current
//! one, split off `pmax` with `REORGANIZE PARTITION`, and drop partitions whose whole period is
//! older than the retention.
//!
//! What to add and drop is decided by [`plan_maintenance`], a pure function of the existing
//! partitions, the time and the settings; [`ensure`] reads the catalog, decides and runs the
//! DDL under a named lock so only one process of the fleet does it at a time.

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::Serialize;

use super::compression;
use super::line_count_plan::MINUTE;
use super::line_counts::LINE_COUNTS_TABLE;
use super::log_table::{TableSpec, check_record, read_partitioning, read_record};
use super::partition_plan::{
    Maintenance, PartitionInfo, Partitioning, check_partitioning, describe, plan_maintenance,
};
use super::text_search::FILTER_TABLE;
use super::zone_map::ZONE_MAP_TABLE;
use super::zone_plan::BUCKET_IDS;
use crate::mysql::current_database;
use crate::mysql::lock::{table_lock, with_lock};
use crate::mysql::{DbError, Ident};

/// What `ensure` did, or why it did nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum EnsureOutcome {
    /// Another process holds the table's lock (it is maintaining the table): nothing done.
    Busy { lock: String },
    /// The maintenance run (or, for a dry run, planned).
    Done(Maintenance),
}

/// Brings the table's partitions in line with the settings at `now`: see
/// [`plan_maintenance`]. With `dry_run` it only decides. Refuses a table that `migrate` did not
/// record or whose record disagrees with the settings.
pub async fn ensure(
    conn: &mut Conn,
    spec: &TableSpec,
    now: DateTime<Utc>,
    dry_run: bool,
) -> Result<EnsureOutcome, DbError> {
    let database = current_database(conn).await?;
    let lock = table_lock(&database, spec.table.as_str());
    // Wait for nobody: whoever holds the lock is doing this very work.
    let done = with_lock(conn, &lock, 0, async |conn| {
        let partitioning = checked_partitioning(conn, spec).await?;
        let plan = plan_maintenance(&partitioning.partitions, now, &spec.scheme).map_err(|e| {
            DbError::catalog(spec.table.as_str(), format!("table {}: {e}", spec.table))
        })?;
        if !dry_run {
            run(conn, spec, &partitioning, &plan).await?;
            if let Some(first_kept) = plan.first_kept_id() {
                let first_second = spec.scheme.layout.decode(first_kept).unix_seconds;
                for kept in &KEPT_PER_BUCKET {
                    let first = if kept.in_seconds { first_second } else { first_kept };
                    let forgotten = forget_below(conn, kept, &spec.table, first).await?;
                    tracing::info!(table = %spec.table, forgotten, "{} rows of dropped partitions deleted", kept.what);
                }
            }
        }
        Ok(plan)
    })
    .await?;
    Ok(match done {
        Some(plan) => EnsureOutcome::Done(plan),
        None => EnsureOutcome::Busy { lock },
    })
}

/// A table where logstamp keeps something of each log table per bucket of its rows, keyed by
/// `table_name` and the bucket's start: its rows of dropped partitions go with them.
struct KeptPerBucket {
    table: &'static str,
    /// The column of the bucket's start, and the bucket's width in its unit.
    bucket: &'static str,
    width: u64,
    /// Whether the column holds Unix seconds (otherwise IDs).
    in_seconds: bool,
    what: &'static str,
}

const KEPT_PER_BUCKET: [KeptPerBucket; 3] = [
    KeptPerBucket {
        table: ZONE_MAP_TABLE,
        bucket: "bucket_start",
        width: BUCKET_IDS,
        in_seconds: false,
        what: "zone map",
    },
    KeptPerBucket {
        table: LINE_COUNTS_TABLE,
        bucket: "minute",
        width: MINUTE,
        in_seconds: true,
        what: "line count",
    },
    KeptPerBucket {
        table: FILTER_TABLE,
        bucket: "bucket_start",
        width: BUCKET_IDS,
        in_seconds: false,
        what: "text filter",
    },
];

/// Deletes `table`'s rows of `kept` whose buckets end at or below `first` (the first ID, or
/// second, the table can still hold after partitions were dropped). A bucket straddling it is
/// kept: it may still hold rows. Returns the rows deleted.
async fn forget_below(
    conn: &mut Conn,
    kept: &KeptPerBucket,
    table: &Ident,
    first: u64,
) -> Result<u64, DbError> {
    let Some(last_gone) = first.checked_sub(kept.width) else {
        return Ok(0);
    };
    conn.exec_drop(
        format!(
            "DELETE FROM `{}` WHERE `table_name` = ? AND `{}` <= ?",
            kept.table, kept.bucket
        ),
        (table.as_str(), last_gone),
    )
    .await
    .map_err(DbError::mysql(format!(
        "forgetting the {} of {table}'s dropped partitions",
        kept.what
    )))?;
    Ok(conn.affected_rows())
}

/// The table's partitions, after checking it is the table `migrate` recorded with these
/// settings. The number of service bits does not matter here: bounds do not depend on it.
async fn checked_partitioning(conn: &mut Conn, spec: &TableSpec) -> Result<Partitioning, DbError> {
    let table = &spec.table;
    let record = read_record(conn, table).await?.ok_or_else(|| {
        DbError::catalog(
            table.as_str(),
            format!("table {table} is not recorded in logstamp_tables: run logstamp migrate first"),
        )
    })?;
    check_record(&record, spec, true).map_err(|e| DbError::catalog(table.as_str(), e))?;
    let partitioning = read_partitioning(conn, table).await?.ok_or_else(|| {
        DbError::catalog(
            table.as_str(),
            format!("table {table} does not exist: run logstamp migrate"),
        )
    })?;
    check_partitioning(
        table,
        &partitioning,
        &spec.scheme.layout,
        spec.scheme.period,
        &spec.scheme.zone,
    )
    .map_err(|e| DbError::catalog(table.as_str(), e))?;
    Ok(partitioning)
}

async fn run(
    conn: &mut Conn,
    spec: &TableSpec,
    partitioning: &Partitioning,
    plan: &Maintenance,
) -> Result<(), DbError> {
    let table = &spec.table;
    if !plan.add.is_empty() {
        // New partitions are made compressed as the setting says, with the server's algorithm.
        compression::check_server(conn, spec.compression).await?;
        let options = spec.compression.options(crate::mysql::flavor(conn).await?);
        // check_partitioning made sure the last partition is the MAXVALUE one.
        let pmax = partitioning
            .partitions
            .last()
            .map(|p| quote(&p.name))
            .ok_or_else(|| {
                DbError::catalog(table.as_str(), format!("table {table} has no partitions"))
            })?;
        let mut parts: Vec<String> = plan
            .add
            .iter()
            .filter_map(|p| {
                p.less_than.map(|bound| {
                    format!(
                        "PARTITION {} VALUES LESS THAN ({bound}){options}",
                        quote(&p.name)
                    )
                })
            })
            .collect();
        parts.push(format!(
            "PARTITION {pmax} VALUES LESS THAN MAXVALUE{options}"
        ));
        let sql = format!(
            "ALTER TABLE {table} REORGANIZE PARTITION {pmax} INTO ({})",
            parts.join(", ")
        );
        conn.query_drop(sql).await.map_err(DbError::mysql(format!(
            "adding {} partitions to table {table}",
            plan.add.len()
        )))?;
    }
    if plan.drop.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = plan.drop.iter().map(|p| quote(&p.name)).collect();
    let Some(pmin_to) = plan.pmin_to else {
        let sql = format!("ALTER TABLE {table} DROP PARTITION {}", names.join(", "));
        conn.query_drop(sql).await.map_err(DbError::mysql(format!(
            "dropping partitions {} of table {table}",
            names.join(", ")
        )))?;
        return Ok(());
    };
    // plan_maintenance set pmin_to only when the first partition is pmin.
    let pmin = partitioning
        .partitions
        .first()
        .map(|p| quote(&p.name))
        .ok_or_else(|| {
            DbError::catalog(table.as_str(), format!("table {table} has no partitions"))
        })?;
    names.insert(0, pmin.clone());
    let names = names.join(", ");
    // Emptied first (as fast as dropping), the merge moves no rows but any that arrived since.
    let truncate = format!("ALTER TABLE {table} TRUNCATE PARTITION {names}");
    conn.query_drop(truncate)
        .await
        .map_err(DbError::mysql(format!(
            "emptying partitions {names} of table {table}"
        )))?;
    let merge = format!(
        "ALTER TABLE {table} REORGANIZE PARTITION {names} INTO \
         (PARTITION {pmin} VALUES LESS THAN ({pmin_to}))"
    );
    conn.query_drop(merge)
        .await
        .map_err(DbError::mysql(format!(
            "merging partitions {names} of table {table} into {pmin}"
        )))?;
    Ok(())
}

/// The table's partitions with the time each covers, in order.
pub async fn list(conn: &mut Conn, spec: &TableSpec) -> Result<Vec<PartitionInfo>, DbError> {
    let partitioning = read_partitioning(conn, &spec.table).await?.ok_or_else(|| {
        DbError::catalog(
            spec.table.as_str(),
            format!("table {} does not exist: run logstamp migrate", spec.table),
        )
    })?;
    Ok(describe(&partitioning.partitions, &spec.scheme))
}

/// A partition name read from the catalog, quoted; a backtick inside is doubled.
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Sources};
    use crate::store::partition_plan::{ExistingPartition, PartitionPlan};
    use chrono::NaiveDate;

    fn spec(overrides: &[(&str, &str)]) -> TableSpec {
        let mut sources = Sources {
            env: Some(Default::default()),
            ..Default::default()
        };
        for (k, v) in overrides {
            sources = sources.set(k, v);
        }
        Settings::load(&sources).unwrap().log_table()
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn date(text: &str) -> NaiveDate {
        text.parse().unwrap()
    }

    /// The partitions a table created for `first ..= last` has, with `pmin` and `pmax`.
    fn table(spec: &TableSpec, first: &str, last: &str) -> Vec<ExistingPartition> {
        PartitionPlan::new(
            date(first),
            date(last),
            spec.scheme.period,
            &spec.scheme.zone,
            &spec.scheme.layout,
        )
        .unwrap()
        .partitions
        .into_iter()
        .map(|p| ExistingPartition {
            name: p.name,
            less_than: p.less_than,
            rows: 0,
        })
        .collect()
    }

    /// The same, as made before tables had a `pmin`.
    fn old_table(spec: &TableSpec, first: &str, last: &str) -> Vec<ExistingPartition> {
        let mut partitions = table(spec, first, last);
        assert_eq!(partitions.remove(0).name, "pmin");
        partitions
    }

    fn names_added(m: &Maintenance) -> Vec<&str> {
        m.add.iter().map(|p| p.name.as_str()).collect()
    }

    fn names_dropped(m: &Maintenance) -> Vec<&str> {
        m.drop.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn an_up_to_date_table_needs_nothing() {
        let s = spec(&[("partitions.ahead", "2")]);
        let existing = table(&s, "2040-03-05", "2040-03-07");
        let m = plan_maintenance(&existing, at("2040-03-05T23:59:59Z"), &s.scheme).unwrap();
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn a_new_day_adds_one_partition_exactly_at_midnight() {
        let s = spec(&[("partitions.ahead", "2")]);
        let existing = table(&s, "2040-03-05", "2040-03-07");
        let before = plan_maintenance(&existing, at("2040-03-05T23:59:59Z"), &s.scheme).unwrap();
        assert!(before.add.is_empty());
        let after = plan_maintenance(&existing, at("2040-03-06T00:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&after), ["p20400308"]);
        let bound = after.add[0].less_than.unwrap();
        assert_eq!(bound, (at("2040-03-09T00:00:00Z").timestamp() as u64) << 32);
        assert!(bound > i64::MAX as u64);
    }

    #[test]
    fn months_roll_over_at_the_first_in_the_zone() {
        let s = spec(&[
            ("partitions.period", "month"),
            ("partitions.ahead", "1"),
            ("partitions.time_zone", "+08:00"),
        ]);
        let existing = table(&s, "2040-01-01", "2040-02-01");
        // 2040-02-01 00:00 at +08:00 is 2040-01-31 16:00 UTC.
        let before = plan_maintenance(&existing, at("2040-01-31T15:59:59Z"), &s.scheme).unwrap();
        assert!(before.add.is_empty(), "{before:?}");
        let after = plan_maintenance(&existing, at("2040-01-31T16:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&after), ["p204003"]);
        assert_eq!(
            after.add[0].ends_at.as_deref(),
            Some("2040-03-31T16:00:00Z")
        );
        // December to January crosses the year.
        let dec = table(&s, "2040-11-01", "2040-12-01");
        let m = plan_maintenance(&dec, at("2040-12-15T00:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&m), ["p204101"]);
    }

    #[test]
    fn weeks_start_on_monday_and_cross_iso_years() {
        let s = spec(&[("partitions.period", "week"), ("partitions.ahead", "1")]);
        // 2040-12-24 and 2040-12-31 are Mondays; 2040-12-31 is in ISO week 2041-W01.
        let existing = table(&s, "2040-12-17", "2040-12-24");
        let sunday = plan_maintenance(&existing, at("2040-12-23T23:59:59Z"), &s.scheme).unwrap();
        assert!(sunday.add.is_empty(), "{sunday:?}");
        let monday = plan_maintenance(&existing, at("2040-12-24T00:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&monday), ["p2041w01"]);
        assert_eq!(monday.add[0].period_start, Some(date("2040-12-31")));
    }

    #[test]
    fn days_start_at_midnight_in_the_zone() {
        let s = spec(&[
            ("partitions.time_zone", "+08:00"),
            ("partitions.ahead", "0"),
        ]);
        let existing = table(&s, "2040-03-05", "2040-03-05");
        // 2040-03-06 00:00 at +08:00 is 2040-03-05 16:00 UTC.
        let before = plan_maintenance(&existing, at("2040-03-05T15:59:59Z"), &s.scheme).unwrap();
        assert!(before.add.is_empty());
        let after = plan_maintenance(&existing, at("2040-03-05T16:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&after), ["p20400306"]);
        assert_eq!(
            after.add[0].ends_at.as_deref(),
            Some("2040-03-06T16:00:00Z")
        );
    }

    #[test]
    fn a_day_that_starts_in_a_daylight_saving_gap() {
        // Sao Paulo skipped 2018-11-04 00:00..01:00: that day began at 03:00 UTC.
        let s = spec(&[
            ("partitions.time_zone", "America/Sao_Paulo"),
            ("partitions.ahead", "1"),
        ]);
        let existing = table(&s, "2018-11-03", "2018-11-03");
        assert_eq!(
            existing[1].less_than,
            Some((at("2018-11-04T03:00:00Z").timestamp() as u64) << 32)
        );
        let before = plan_maintenance(&existing, at("2018-11-04T02:59:59Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&before), ["p20181104"]);
        let after = plan_maintenance(&existing, at("2018-11-04T03:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&after), ["p20181104", "p20181105"]);
    }

    #[test]
    fn a_neglected_table_gets_every_missing_period() {
        let s = spec(&[("partitions.ahead", "1")]);
        let existing = table(&s, "2040-03-01", "2040-03-02");
        let m = plan_maintenance(&existing, at("2040-03-05T10:00:00Z"), &s.scheme).unwrap();
        assert_eq!(
            names_added(&m),
            ["p20400303", "p20400304", "p20400305", "p20400306"]
        );
    }

    #[test]
    fn a_table_with_only_pmax_starts_at_the_current_period() {
        let s = spec(&[("partitions.ahead", "1")]);
        let only_pmax = [ExistingPartition {
            name: "pmax".into(),
            less_than: None,
            rows: 5,
        }];
        let m = plan_maintenance(&only_pmax, at("2040-03-05T10:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_added(&m), ["p20400305", "p20400306"]);
    }

    #[test]
    fn retention_drops_partitions_that_ended_before_the_cutoff() {
        let s = spec(&[("partitions.ahead", "0"), ("partitions.retention", "2days")]);
        let existing = table(&s, "2040-03-01", "2040-03-05");
        // Cutoff 2040-03-03 00:00: p20400302 ends exactly then, p20400303 a day later.
        let m = plan_maintenance(&existing, at("2040-03-05T00:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_dropped(&m), ["p20400301", "p20400302"]);
        let m = plan_maintenance(&existing, at("2040-03-04T23:59:59Z"), &s.scheme).unwrap();
        assert_eq!(names_dropped(&m), ["p20400301"]);
        assert!(m.add.is_empty());
        // pmin is kept, emptied with them, and raised to where the oldest day kept starts.
        assert_eq!(m.pmin_to, existing[1].less_than);
        assert_eq!(m.first_kept_id(), m.pmin_to);
        assert_eq!(
            m.pmin_to,
            Some((at("2040-03-02T00:00:00Z").timestamp() as u64) << 32)
        );
        // pmin alone past the cutoff waits for the first day: nothing to do.
        let m = plan_maintenance(&existing, at("2040-03-03T23:59:59Z"), &s.scheme).unwrap();
        assert!(m.is_empty() && m.pmin_to.is_none(), "{m:?}");
        assert_eq!(m.first_kept_id(), None);

        // A table from before pmin: the same partitions are dropped, and nothing is raised.
        let old = old_table(&s, "2040-03-01", "2040-03-05");
        let m = plan_maintenance(&old, at("2040-03-05T00:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_dropped(&m), ["p20400301", "p20400302"]);
        assert_eq!(m.pmin_to, None);
        // The zone map forgets what lay below the first day kept.
        assert_eq!(
            m.first_kept_id(),
            Some((at("2040-03-03T00:00:00Z").timestamp() as u64) << 32)
        );

        let off = spec(&[("partitions.ahead", "0")]);
        assert!(off.scheme.retention.is_none());
        let m = plan_maintenance(&existing, at("2040-04-05T00:00:00Z"), &off.scheme).unwrap();
        assert!(m.drop.is_empty());
    }

    #[test]
    fn retention_of_weeks_and_months_in_a_zone() {
        let s = spec(&[
            ("partitions.period", "month"),
            ("partitions.time_zone", "+08:00"),
            ("partitions.ahead", "0"),
            ("partitions.retention", "31days"),
        ]);
        let existing = table(&s, "2040-01-01", "2040-03-01");
        // January ends 2040-01-31 16:00 UTC; 31 days later is 2040-03-02 16:00 UTC.
        let m = plan_maintenance(&existing, at("2040-03-02T15:59:59Z"), &s.scheme).unwrap();
        assert!(m.drop.is_empty(), "{m:?}");
        let m = plan_maintenance(&existing, at("2040-03-02T16:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_dropped(&m), ["p204001"]);

        let w = spec(&[
            ("partitions.period", "week"),
            ("partitions.ahead", "0"),
            ("partitions.retention", "1week"),
        ]);
        let weeks = table(&w, "2040-12-17", "2040-12-31");
        let m = plan_maintenance(&weeks, at("2041-01-01T00:00:00Z"), &w.scheme).unwrap();
        // The week of 12-17 ended 12-24, more than a week before; the week of 12-24 did not.
        assert_eq!(names_dropped(&m), ["p2040w51"]);
    }

    #[test]
    fn the_current_partition_is_never_dropped() {
        let s = spec(&[("partitions.ahead", "0"), ("partitions.retention", "0s")]);
        let existing = table(&s, "2040-03-04", "2040-03-05");
        let m = plan_maintenance(&existing, at("2040-03-05T12:00:00Z"), &s.scheme).unwrap();
        assert_eq!(names_dropped(&m), ["p20400304"]);
    }

    #[test]
    fn partitions_added_and_already_past_retention_are_dropped_too() {
        let s = spec(&[("partitions.ahead", "0"), ("partitions.retention", "1day")]);
        let existing = table(&s, "2040-03-01", "2040-03-01");
        let m = plan_maintenance(&existing, at("2040-03-05T12:00:00Z"), &s.scheme).unwrap();
        assert_eq!(
            names_added(&m),
            ["p20400302", "p20400303", "p20400304", "p20400305"]
        );
        assert_eq!(names_dropped(&m), ["p20400301", "p20400302", "p20400303"]);
        assert_eq!(m.pmin_to, m.add[1].less_than);
    }

    #[test]
    fn a_misaligned_last_bound_is_refused() {
        let s = spec(&[]);
        let mut existing = table(&s, "2040-03-01", "2040-03-01");
        existing[1].less_than = existing[1].less_than.map(|b| b + (3600 << 32));
        let error = plan_maintenance(&existing, at("2040-03-05T12:00:00Z"), &s.scheme).unwrap_err();
        assert!(error.contains("not a day start"), "{error}");
    }

    #[test]
    fn too_many_partitions_are_refused() {
        let s = spec(&[("partitions.ahead", "9000")]);
        assert!(plan_maintenance(&[], at("2040-03-05T12:00:00Z"), &s.scheme).is_err());
    }

    #[test]
    fn describe_gives_each_partition_its_time_range() {
        let s = spec(&[
            ("partitions.period", "month"),
            ("partitions.time_zone", "+08:00"),
        ]);
        let existing = table(&s, "2040-01-01", "2040-02-01");
        let shown = describe(&existing, &s.scheme);
        assert_eq!(shown.len(), 4);
        // pmin holds anything older than January.
        assert_eq!(shown[0].name, "pmin");
        assert_eq!(shown[0].from, None);
        assert_eq!(shown[0].to.as_deref(), Some("2039-12-31T16:00:00Z"));
        assert_eq!(shown[1].name, "p204001");
        assert_eq!(shown[1].from.as_deref(), Some("2039-12-31T16:00:00Z"));
        assert_eq!(shown[1].to.as_deref(), Some("2040-01-31T16:00:00Z"));
        assert_eq!(shown[2].from.as_deref(), Some("2040-01-31T16:00:00Z"));
        assert_eq!(shown[3].name, "pmax");
        assert_eq!(shown[3].from.as_deref(), Some("2040-02-29T16:00:00Z"));
        assert_eq!(shown[3].to, None);
        assert_eq!(shown[3].less_than, None);
        // Without pmin the first partition starts with its period (and holds anything older).
        assert_eq!(describe(&existing[1..], &s.scheme), shown[1..]);
    }

    #[test]
    fn partition_names_from_the_catalog_are_quoted() {
        assert_eq!(quote("p1"), "`p1`");
        assert_eq!(quote("p`x"), "`p``x`");
    }
}
