//! Schema migrations: the SQL files under `migrations/`, applied in order and recorded in
//! `schema_migrations` (version, name, checksum, applied_at).
//!
//! MySQL DDL is not transactional, so each file holds one statement and is recorded right after
//! it ran; the statements are written to be safe to run again (`IF NOT EXISTS`) in case a run
//! died between the two. A file whose text changed after it was applied is refused: the
//! database would no longer match what the files say.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::Serialize;
use sha2::{Digest, Sha256};

use chrono::{DateTime, Utc};

use super::log_table::{TableOutcome, TableSpec, ensure_table};
use super::rollup;
use crate::mysql::DbError;
use crate::mysql::current_database;
use crate::mysql::lock::{schema_lock, table_lock, with_lock};
use crate::mysql::rows::take;
use crate::store::rollup_plan::RollupPlan;

/// How long `migrate` waits for another run (or a partition maintenance) to finish.
pub const LOCK_WAIT_SECONDS: u32 = 30;

/// The files under `migrations/`, built into the binary so it migrates from any directory.
/// A unit test checks this list against the directory.
const BUILTIN: &[(&str, &str)] = &[
    (
        "0001_ingest_offsets.sql",
        include_str!("../../migrations/0001_ingest_offsets.sql"),
    ),
    (
        "0002_dead_letters.sql",
        include_str!("../../migrations/0002_dead_letters.sql"),
    ),
    (
        "0003_service_leases.sql",
        include_str!("../../migrations/0003_service_leases.sql"),
    ),
    (
        "0004_logstamp_tables.sql",
        include_str!("../../migrations/0004_logstamp_tables.sql"),
    ),
    (
        "0005_relay_checkpoints.sql",
        include_str!("../../migrations/0005_relay_checkpoints.sql"),
    ),
    (
        "0006_relay_applied.sql",
        include_str!("../../migrations/0006_relay_applied.sql"),
    ),
    (
        "0007_relay_published_gtids.sql",
        include_str!("../../migrations/0007_relay_published_gtids.sql"),
    ),
    (
        "0008_relay_applied_gtids.sql",
        include_str!("../../migrations/0008_relay_applied_gtids.sql"),
    ),
    (
        "0009_service_leases_telemetry.sql",
        include_str!("../../migrations/0009_service_leases_telemetry.sql"),
    ),
    (
        "0010_relay_loop_keys.sql",
        include_str!("../../migrations/0010_relay_loop_keys.sql"),
    ),
    (
        "0011_relay_conflicts.sql",
        include_str!("../../migrations/0011_relay_conflicts.sql"),
    ),
    (
        "0012_relay_dead_letters.sql",
        include_str!("../../migrations/0012_relay_dead_letters.sql"),
    ),
    (
        "0013_dead_letters_record_index.sql",
        include_str!("../../migrations/0013_dead_letters_record_index.sql"),
    ),
    (
        "0014_zone_map.sql",
        include_str!("../../migrations/0014_zone_map.sql"),
    ),
    (
        "0015_shard_assignments.sql",
        include_str!("../../migrations/0015_shard_assignments.sql"),
    ),
    (
        "0016_relay_snapshots.sql",
        include_str!("../../migrations/0016_relay_snapshots.sql"),
    ),
    (
        "0017_relay_watermarks.sql",
        include_str!("../../migrations/0017_relay_watermarks.sql"),
    ),
    (
        "0018_line_counts.sql",
        include_str!("../../migrations/0018_line_counts.sql"),
    ),
    (
        "0019_relay_applied_run.sql",
        include_str!("../../migrations/0019_relay_applied_run.sql"),
    ),
    (
        "0020_relay_applied_tables.sql",
        include_str!("../../migrations/0020_relay_applied_tables.sql"),
    ),
    (
        "0021_text_filter.sql",
        include_str!("../../migrations/0021_text_filter.sql"),
    ),
    (
        "0022_text_filter_cover.sql",
        include_str!("../../migrations/0022_text_filter_cover.sql"),
    ),
    (
        "0023_text_filter_format_2.sql",
        include_str!("../../migrations/0023_text_filter_format_2.sql"),
    ),
];

/// logstamp's own tables in the database of `mysql.url`: the migrations' and the runner's.
/// Never relayed: a remote message could then rewrite offsets, leases or the relay's state.
pub fn bookkeeping_tables() -> Vec<&'static str> {
    const CREATE: &str = "CREATE TABLE IF NOT EXISTS `";
    let mut tables = vec![MIGRATIONS_TABLE];
    tables.extend(BUILTIN.iter().filter_map(|(_, sql)| {
        let name = &sql[sql.find(CREATE)? + CREATE.len()..];
        name.split('`').next()
    }));
    tables
}

/// The bookkeeping table. Created by the runner itself: it must exist before the first file
/// can be recorded.
/// Where applied migrations are recorded.
const MIGRATIONS_TABLE: &str = "schema_migrations";

const CREATE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS `schema_migrations` (
  `version` INT UNSIGNED NOT NULL,
  `name` VARCHAR(255) NOT NULL,
  `checksum` CHAR(64) NOT NULL,
  `applied_at` DATETIME(6) NOT NULL,
  PRIMARY KEY (`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// One migration: a single DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub version: u32,
    pub name: String,
    pub sql: String,
}

impl Migration {
    /// From a file name `NNNN_name.sql` and its text.
    pub fn from_file(file_name: &str, sql: &str) -> Result<Migration, DbError> {
        let bad = || {
            DbError::Invariant(format!(
                "migration file {file_name:?} is not named NNNN_name.sql"
            ))
        };
        let stem = file_name.strip_suffix(".sql").ok_or_else(bad)?;
        let (number, name) = stem.split_once('_').ok_or_else(bad)?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) || name.is_empty() {
            return Err(bad());
        }
        let version = number.parse().map_err(|_| bad())?;
        Ok(Migration {
            version,
            name: name.to_string(),
            sql: sql.to_string(),
        })
    }

    /// SHA-256 of the text, hex. Line endings are normalized so a checkout with CRLF line
    /// endings does not look like a changed file.
    pub fn checksum(&self) -> String {
        let text = self.sql.replace("\r\n", "\n");
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The migrations shipped with this build, in order.
pub fn builtin() -> Result<Vec<Migration>, DbError> {
    BUILTIN
        .iter()
        .map(|(file, sql)| Migration::from_file(file, sql))
        .collect()
}

/// A migration as recorded in `schema_migrations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub version: u32,
    pub name: String,
    pub checksum: String,
}

/// A migration this run applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub version: u32,
    pub name: String,
    pub checksum: String,
}

/// What to apply, given what the database has recorded: the known migrations not yet
/// recorded, in order. Refuses when a recorded one changed, is unknown to this build (the
/// database is newer), or when a missing one is older than a recorded one (applying it now
/// would run it out of order).
pub fn pending<'a>(
    known: &'a [Migration],
    recorded: &[Recorded],
) -> Result<Vec<&'a Migration>, DbError> {
    if let Some(pair) = known.windows(2).find(|w| w[0].version >= w[1].version) {
        return Err(DbError::Invariant(format!(
            "migrations are not in strictly increasing version order: {} then {}",
            pair[0].version, pair[1].version
        )));
    }
    for r in recorded {
        let Some(m) = known.iter().find(|m| m.version == r.version) else {
            return Err(DbError::catalog(
                MIGRATIONS_TABLE,
                format!(
                    "the database has migration {} ({}) applied, which this logstamp does not \
                 know: it was migrated by a newer version",
                    r.version, r.name
                ),
            ));
        };
        let checksum = m.checksum();
        if checksum != r.checksum {
            return Err(DbError::catalog(
                MIGRATIONS_TABLE,
                format!(
                    "migration {} ({}) changed after it was applied: checksum {} recorded, {} now; \
                 restore the file and add a new migration for the change",
                    r.version, r.name, r.checksum, checksum
                ),
            ));
        }
    }
    let newest = recorded.iter().map(|r| r.version).max();
    let todo: Vec<&Migration> = known
        .iter()
        .filter(|m| !recorded.iter().any(|r| r.version == m.version))
        .collect();
    if let (Some(newest), Some(first)) = (newest, todo.first())
        && first.version < newest
    {
        return Err(DbError::catalog(
            MIGRATIONS_TABLE,
            format!(
                "migration {} ({}) was never applied, but the later migration {newest} was: \
             refusing to run migrations out of order",
                first.version, first.name
            ),
        ));
    }
    Ok(todo)
}

/// Refuses unless every known migration is applied: workers use the schema, `logstamp migrate`
/// makes it.
pub async fn check_up_to_date(conn: &mut Conn, known: &[Migration]) -> Result<(), DbError> {
    const NO_SUCH_TABLE: u16 = 1146;
    let recorded = match recorded(conn).await {
        Err(e) if e.server_code() == Some(NO_SUCH_TABLE) => Vec::new(),
        other => other?,
    };
    match pending(known, &recorded)?.as_slice() {
        [] => Ok(()),
        [first, rest @ ..] => Err(DbError::catalog(
            MIGRATIONS_TABLE,
            format!(
                "database {} lacks migration {} ({}){}: run logstamp migrate first",
                current_database(conn).await?,
                first.version,
                first.name,
                match rest.len() {
                    0 => String::new(),
                    n => format!(" and {n} later"),
                }
            ),
        )),
    }
}

/// Applies the migrations not yet recorded, in order, and returns them. The caller serializes
/// concurrent runs (see `lock`).
pub async fn apply(conn: &mut Conn, known: &[Migration]) -> Result<Vec<Applied>, DbError> {
    conn.query_drop(CREATE_SCHEMA_MIGRATIONS)
        .await
        .map_err(DbError::mysql("creating schema_migrations"))?;
    let recorded = recorded(conn).await?;
    let mut applied = Vec::new();
    for m in pending(known, &recorded)? {
        let context = format!("applying migration {} ({})", m.version, m.name);
        conn.query_drop(m.sql.as_str())
            .await
            .map_err(DbError::mysql(context.clone()))?;
        let checksum = m.checksum();
        conn.exec_drop(
            "INSERT INTO `schema_migrations` (`version`, `name`, `checksum`, `applied_at`) \
             VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
            (m.version, m.name.as_str(), checksum.as_str()),
        )
        .await
        .map_err(DbError::mysql(format!("recording: {context}")))?;
        applied.push(Applied {
            version: m.version,
            name: m.name.clone(),
            checksum,
        });
    }
    Ok(applied)
}

/// [`apply`] under the database's schema lock, which concurrent runs take too: what the
/// coordination database of a sharded store gets (its shards get [`run_all`]).
pub async fn apply_locked(conn: &mut Conn, known: &[Migration]) -> Result<Vec<Applied>, DbError> {
    let database = current_database(conn).await?;
    with_lock(
        conn,
        &schema_lock(&database),
        LOCK_WAIT_SECONDS,
        async |conn| apply(conn, known).await,
    )
    .await?
    .ok_or_else(|| {
        DbError::Busy(format!(
            "the schema of database {database} stayed locked by another logstamp for \
             {LOCK_WAIT_SECONDS} s; try again when it is done"
        ))
    })
}

/// What `run` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrateReport {
    /// Applied by this run, in order; empty when the database was up to date.
    pub applied: Vec<Applied>,
    /// The newest migration the database now has.
    pub schema_version: u32,
    pub table: TableOutcome,
}

/// `logstamp migrate`: applies the migrations, then creates or checks the log table (see
/// [`ensure_table`]), holding named locks so concurrent runs across the fleet take turns.
/// `force` allows a change of the number of service bits only.
pub async fn run(
    conn: &mut Conn,
    known: &[Migration],
    spec: &TableSpec,
    now: DateTime<Utc>,
    force: bool,
) -> Result<MigrateReport, DbError> {
    let applied = apply_locked(conn, known).await?;
    let database = current_database(conn).await?;
    let table = ensure_locked(conn, &database, spec, now, force).await?;
    Ok(MigrateReport {
        applied,
        schema_version: known.last().map_or(0, |m| m.version),
        table,
    })
}

/// What [`run_all`] did: the migrations and the log table, then the fan-out and rollup tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullReport {
    pub report: MigrateReport,
    pub tables: Vec<TableOutcome>,
    pub rollups: Vec<RollupOutcome>,
}

/// Everything `logstamp migrate` does: [`run`] for the log table, then [`ensure_fanout`] for
/// the fan-out tables and the rollups.
pub async fn run_all(
    conn: &mut Conn,
    known: &[Migration],
    log_table: &TableSpec,
    fanout: &[TableSpec],
    rollups: &[RollupPlan],
    now: DateTime<Utc>,
    force: bool,
) -> Result<FullReport, DbError> {
    let report = run(conn, known, log_table, now, force).await?;
    let (tables, rollups) = ensure_fanout(conn, fanout, rollups, now, force).await?;
    Ok(FullReport {
        report,
        tables,
        rollups,
    })
}

/// What `migrate` did with a rollup's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum RollupOutcome {
    RollupCreated { rollup: String },
    RollupUnchanged { rollup: String },
}

/// After [`run`]: creates or checks the fan-out tables (`specs`, partitioned like the log
/// table) and the rollups' tables.
pub async fn ensure_fanout(
    conn: &mut Conn,
    specs: &[TableSpec],
    rollups: &[RollupPlan],
    now: DateTime<Utc>,
    force: bool,
) -> Result<(Vec<TableOutcome>, Vec<RollupOutcome>), DbError> {
    let database = current_database(conn).await?;
    let mut tables = Vec::with_capacity(specs.len());
    for spec in specs {
        tables.push(ensure_locked(conn, &database, spec, now, force).await?);
    }
    let mut created = Vec::with_capacity(rollups.len());
    for plan in rollups {
        let rollup = plan.name.as_str().to_string();
        created.push(if rollup::ensure_table(conn, plan, true).await? {
            RollupOutcome::RollupCreated { rollup }
        } else {
            RollupOutcome::RollupUnchanged { rollup }
        });
    }
    Ok((tables, created))
}

/// [`ensure_table`] under the table's lock, which concurrent runs and partition maintenance
/// take too.
async fn ensure_locked(
    conn: &mut Conn,
    database: &str,
    spec: &TableSpec,
    now: DateTime<Utc>,
    force: bool,
) -> Result<TableOutcome, DbError> {
    with_lock(
        conn,
        &table_lock(database, spec.table.as_str()),
        LOCK_WAIT_SECONDS,
        async |conn| ensure_table(conn, spec, now, force).await,
    )
    .await?
    .ok_or_else(|| {
        DbError::Busy(format!(
            "table {} of database {database} stayed locked by another logstamp for \
             {LOCK_WAIT_SECONDS} s; try again when it is done",
            spec.table
        ))
    })
}

/// The migrations recorded as applied, in version order.
pub async fn recorded(conn: &mut Conn) -> Result<Vec<Recorded>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .query("SELECT `version`, `name`, `checksum` FROM `schema_migrations` ORDER BY `version`")
        .await
        .map_err(DbError::mysql("reading schema_migrations"))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(Recorded {
                version: take(&mut row, 0, "schema_migrations.version")?,
                name: take(&mut row, 1, "schema_migrations.name")?,
                checksum: take(&mut row, 2, "schema_migrations.checksum")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(version: u32, sql: &str) -> Migration {
        Migration {
            version,
            name: format!("m{version}"),
            sql: sql.to_string(),
        }
    }

    fn rec(m: &Migration) -> Recorded {
        Recorded {
            version: m.version,
            name: m.name.clone(),
            checksum: m.checksum(),
        }
    }

    #[test]
    fn file_names_give_version_and_name() {
        let m = Migration::from_file("0012_add_things.sql", "SELECT 1").unwrap();
        assert_eq!((m.version, m.name.as_str()), (12, "add_things"));
        for bad in [
            "12.sql",
            "_x.sql",
            "0012_.sql",
            "0012_x.txt",
            "x1_y.sql",
            "1a_b.sql",
        ] {
            assert!(Migration::from_file(bad, "").is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn checksum_is_sha256_and_ignores_line_endings() {
        assert_eq!(
            m(1, "").checksum(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(m(1, "a\r\nb").checksum(), m(1, "a\nb").checksum());
        assert_ne!(m(1, "a b").checksum(), m(1, "a  b").checksum());
    }

    #[test]
    fn pending_is_what_is_not_recorded() {
        let known = [m(1, "a"), m(2, "b"), m(3, "c")];
        let todo = pending(&known, &[]).unwrap();
        assert_eq!(
            todo.iter().map(|m| m.version).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let todo = pending(&known, &[rec(&known[0])]).unwrap();
        assert_eq!(todo.iter().map(|m| m.version).collect::<Vec<_>>(), [2, 3]);
        let all: Vec<_> = known.iter().map(rec).collect();
        assert!(pending(&known, &all).unwrap().is_empty());
    }

    #[test]
    fn a_changed_file_is_refused() {
        let known = [m(1, "a"), m(2, "b")];
        let error = pending(&known, &[rec(&m(1, "a changed"))]).unwrap_err();
        assert!(
            error.to_string().contains("migration 1 (m1) changed"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_recorded_version_is_refused() {
        let known = [m(1, "a")];
        let error = pending(&known, &[rec(&known[0]), rec(&m(2, "b"))]).unwrap_err();
        assert!(error.to_string().contains("newer version"), "{error}");
    }

    #[test]
    fn a_gap_is_refused() {
        let known = [m(1, "a"), m(2, "b"), m(3, "c")];
        let error = pending(&known, &[rec(&known[0]), rec(&known[2])]).unwrap_err();
        assert!(error.to_string().contains("out of order"), "{error}");
    }

    #[test]
    fn unordered_lists_are_refused() {
        assert!(pending(&[m(2, "a"), m(1, "b")], &[]).is_err());
        assert!(pending(&[m(1, "a"), m(1, "b")], &[]).is_err());
    }

    #[test]
    fn builtin_lists_every_file_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|f| f.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = BUILTIN.iter().map(|(f, _)| *f).collect();
        assert_eq!(files, listed, "add new files under migrations/ to BUILTIN");
        for (file, sql) in BUILTIN {
            assert_eq!(std::fs::read_to_string(dir.join(file)).unwrap(), *sql);
        }
        let versions: Vec<u32> = builtin().unwrap().iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=versions.len() as u32).collect::<Vec<_>>());
    }

    #[test]
    fn each_file_is_one_statement() {
        for (file, sql) in BUILTIN {
            let code: String = sql
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            let statements = code.split(';').filter(|s| !s.trim().is_empty()).count();
            assert_eq!(statements, 1, "{file} must hold exactly one statement");
        }
    }
}
