//! `logstamp migrate` against MariaDB: the migration runner, the bookkeeping tables, and the
//! log table's creation, adoption and refusals.

mod support;

use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use logstamp::mysql::{self, DbError};
use logstamp::store::log_table::{TableOutcome, TableSpec};
use logstamp::store::migrate::{self, Migration};
use logstamp::store::schema::create_log_table_sql;
use support::TestDb;

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

/// 2040-03-05 12:00 UTC: IDs of that day are above i64::MAX.
fn now() -> DateTime<Utc> {
    "2040-03-05T12:00:00Z".parse().unwrap()
}

/// The test's database, created, and a connection of its own to it.
async fn fresh(hint: &str) -> (TestDb, Conn) {
    let test_db = TestDb::create(hint).await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    (test_db, conn)
}

fn spec(test_db: &TestDb, overrides: &[(&str, &str)]) -> TableSpec {
    test_db.settings(overrides).log_table()
}

async fn run(
    conn: &mut Conn,
    spec: &TableSpec,
    force: bool,
) -> Result<migrate::MigrateReport, DbError> {
    migrate::run(conn, &migrate::builtin().unwrap(), spec, now(), force).await
}

async fn strings(conn: &mut Conn, sql: &str) -> Vec<String> {
    conn.query(sql).await.unwrap()
}

async fn show_create(conn: &mut Conn, table: &str) -> String {
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW CREATE TABLE `{table}`"))
        .await
        .unwrap();
    row.unwrap().1
}

/// `name type [NOT NULL]` of every column, as the catalog shows them.
async fn columns(conn: &mut Conn, table: &str) -> Vec<String> {
    conn.exec(
        "SELECT CONCAT(COLUMN_NAME, ' ', COLUMN_TYPE, IF(IS_NULLABLE = 'NO', ' NOT NULL', '')) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
         ORDER BY ORDINAL_POSITION",
        (table,),
    )
    .await
    .unwrap()
}

async fn primary_key(conn: &mut Conn, table: &str) -> Vec<String> {
    conn.exec(
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
         ORDER BY ORDINAL_POSITION",
        (table,),
    )
    .await
    .unwrap()
}

/// `(name, PARTITION_DESCRIPTION)` of the log table's partitions, in order.
async fn partitions(conn: &mut Conn, table: &str) -> Vec<(String, String)> {
    conn.exec(
        "SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION",
        (table,),
    )
    .await
    .unwrap()
}

async fn record(conn: &mut Conn, table: &str) -> Option<(u8, u64, String, String)> {
    conn.exec_first(
        "SELECT service_bits, epoch_unix_seconds, period, time_zone FROM logstamp_tables \
         WHERE table_name = ?",
        (table,),
    )
    .await
    .unwrap()
}

fn first_id_of_day(date: &str) -> u64 {
    let day: NaiveDate = date.parse().unwrap();
    (day.and_time(NaiveTime::MIN).and_utc().timestamp() as u64) << 32
}

fn refused(result: Result<impl std::fmt::Debug, DbError>, needles: &[&str]) {
    match result {
        Err(DbError::Catalog {
            reason: message, ..
        }) => {
            for needle in needles {
                assert!(message.contains(needle), "{needle:?} not in {message:?}");
            }
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn a_fresh_database_gets_every_migration_and_the_log_table() {
    let (test_db, mut conn) = fresh("mig_fresh").await;
    let spec = spec(&test_db, &[]);
    let report = run(&mut conn, &spec, false).await.unwrap();

    let known = migrate::builtin().unwrap();
    let applied: Vec<(u32, &str)> = report
        .applied
        .iter()
        .map(|a| (a.version, a.name.as_str()))
        .collect();
    assert_eq!(
        applied,
        [
            (1, "ingest_offsets"),
            (2, "dead_letters"),
            (3, "service_leases"),
            (4, "logstamp_tables"),
            (5, "relay_checkpoints"),
            (6, "relay_applied"),
            (7, "relay_published_gtids"),
            (8, "relay_applied_gtids"),
            (9, "service_leases_telemetry"),
            (10, "relay_loop_keys"),
            (11, "relay_conflicts"),
            (12, "relay_dead_letters"),
            (13, "dead_letters_record_index"),
            (14, "zone_map"),
            (15, "shard_assignments"),
            (16, "relay_snapshots"),
            (17, "relay_watermarks"),
            (18, "line_counts"),
            (19, "relay_applied_run"),
            (20, "relay_applied_tables"),
            (21, "text_filter"),
            (22, "text_filter_cover"),
            (23, "text_filter_format_2")
        ]
    );
    assert_eq!(report.schema_version, 23);
    let recorded: Vec<(u32, String, String)> = conn
        .query("SELECT version, name, checksum FROM schema_migrations ORDER BY version")
        .await
        .unwrap();
    let expected: Vec<(u32, String, String)> = known
        .iter()
        .map(|m| (m.version, m.name.clone(), m.checksum()))
        .collect();
    assert_eq!(recorded, expected);

    // The writer relies on these exact columns.
    assert_eq!(
        columns(&mut conn, "ingest_offsets").await,
        [
            "consumer_group varchar(255) NOT NULL",
            "topic varchar(255) NOT NULL",
            "kafka_partition int(11) NOT NULL",
            "next_offset bigint(20) NOT NULL",
            "updated_at datetime(6) NOT NULL",
        ]
    );
    assert_eq!(
        primary_key(&mut conn, "ingest_offsets").await,
        ["consumer_group", "topic", "kafka_partition"]
    );
    assert_eq!(
        columns(&mut conn, "dead_letters").await,
        [
            "id bigint(20) unsigned NOT NULL",
            "topic varchar(255) NOT NULL",
            "kafka_partition int(11) NOT NULL",
            "kafka_offset bigint(20) NOT NULL",
            "record_index int(10) unsigned",
            "reason text NOT NULL",
            "raw longblob",
            "created_at datetime(6) NOT NULL",
        ]
    );
    assert_eq!(
        columns(&mut conn, "service_leases").await,
        [
            "service_id int(10) unsigned NOT NULL",
            "host varchar(255) NOT NULL",
            "pid int(10) unsigned NOT NULL",
            "telemetry_address varchar(255)",
            "instance_token varchar(64) NOT NULL",
            "expires_at datetime(6) NOT NULL",
            "issued_seconds_mark bigint(20) unsigned NOT NULL",
            "created_at datetime(6) NOT NULL",
            "updated_at datetime(6) NOT NULL",
        ]
    );
    assert_eq!(
        primary_key(&mut conn, "logstamp_tables").await,
        ["table_name"]
    );

    // The log table: pmin, today (2040-03-05, UTC) and 7 days ahead, then pmax; bounds above
    // i64::MAX read back exactly.
    assert_eq!(
        report.table,
        TableOutcome::TableCreated {
            table: "logs".into(),
            partitions: ["pmin".to_string()]
                .into_iter()
                .chain((5..=12).map(|d| format!("p204003{d:02}")))
                .chain(["pmax".to_string()])
                .collect(),
        }
    );
    let shown = show_create(&mut conn, "logs").await;
    for (name, ends) in [("pmin", "2040-03-05"), ("p20400305", "2040-03-06")] {
        assert!(
            shown.contains(&format!(
                "PARTITION `{name}` VALUES LESS THAN ({})",
                first_id_of_day(ends)
            )),
            "{shown}"
        );
    }
    assert!(
        shown.contains("`id` bigint(20) unsigned NOT NULL"),
        "{shown}"
    );
    assert_eq!(
        record(&mut conn, "logs").await,
        Some((10, 0, "day".into(), "UTC".into()))
    );

    // Bookkeeping timestamps are UTC whatever the server's zone.
    let zone: Vec<String> = strings(&mut conn, "SELECT @@session.time_zone").await;
    assert_eq!(zone, ["+00:00"]);
}

#[tokio::test]
async fn a_second_run_changes_nothing() {
    let (test_db, mut conn) = fresh("mig_rerun").await;
    let spec = spec(&test_db, &[]);
    run(&mut conn, &spec, false).await.unwrap();
    let ddl = show_create(&mut conn, "logs").await;
    let snapshot = "SELECT CONCAT_WS(' ', version, checksum, applied_at) FROM schema_migrations \
                    UNION ALL SELECT CONCAT_WS(' ', table_name, service_bits, updated_at) \
                    FROM logstamp_tables";
    let before = strings(&mut conn, snapshot).await;

    let again = run(&mut conn, &spec, false).await.unwrap();
    assert!(again.applied.is_empty(), "{again:?}");
    assert_eq!(
        again.table,
        TableOutcome::TableUnchanged {
            table: "logs".into()
        }
    );
    assert_eq!(show_create(&mut conn, "logs").await, ddl);
    assert_eq!(strings(&mut conn, snapshot).await, before);
}

#[tokio::test]
async fn concurrent_runs_take_turns() {
    let (test_db, mut a) = fresh("mig_race").await;
    let mut b = mysql::connect(&test_db.mysql_url()).await.unwrap();
    let spec = spec(&test_db, &[]);
    let (ra, rb) = tokio::join!(run(&mut a, &spec, false), run(&mut b, &spec, false));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    // One applied the migrations and created the table; the other found them done.
    let known = migrate::builtin().unwrap().len();
    assert_eq!(ra.applied.len() + rb.applied.len(), known);
    let mut outcomes = [ra.table, rb.table].map(|t| match t {
        TableOutcome::TableCreated { .. } => "created",
        TableOutcome::TableUnchanged { .. } => "unchanged",
        other => panic!("{other:?}"),
    });
    outcomes.sort();
    assert_eq!(outcomes, ["created", "unchanged"]);
}

fn migration(version: u32, name: &str, sql: &str) -> Migration {
    Migration {
        version,
        name: name.into(),
        sql: sql.into(),
    }
}

#[tokio::test]
async fn a_migration_changed_after_it_was_applied_is_refused() {
    let (_test_db, mut conn) = fresh("mig_checksum").await;
    let first = migration(1, "first", "CREATE TABLE IF NOT EXISTS a (x INT)");
    let second = migration(2, "second", "CREATE TABLE IF NOT EXISTS b (x INT)");
    let applied = migrate::apply(&mut conn, &[first.clone(), second.clone()])
        .await
        .unwrap();
    assert_eq!(applied.len(), 2);

    let edited = migration(1, "first", "CREATE TABLE IF NOT EXISTS a (x BIGINT)");
    let third = migration(3, "third", "CREATE TABLE IF NOT EXISTS c (x INT)");
    refused(
        migrate::apply(&mut conn, &[edited, second.clone(), third.clone()]).await,
        &[
            "migration 1 (first) changed after it was applied",
            &first.checksum(),
        ],
    );
    // Nothing after the refusal ran.
    let tables = strings(
        &mut conn,
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         ORDER BY TABLE_NAME",
    )
    .await;
    assert_eq!(tables, ["a", "b", "schema_migrations"]);

    // The original files plus a new one are fine.
    let applied = migrate::apply(&mut conn, &[first, second, third])
        .await
        .unwrap();
    assert_eq!(applied.iter().map(|a| a.version).collect::<Vec<_>>(), [3]);
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_logstamp_is_refused() {
    let (_test_db, mut conn) = fresh("mig_newer").await;
    let first = migration(1, "first", "CREATE TABLE IF NOT EXISTS a (x INT)");
    let second = migration(2, "second", "CREATE TABLE IF NOT EXISTS b (x INT)");
    migrate::apply(&mut conn, &[first.clone(), second])
        .await
        .unwrap();
    refused(
        migrate::apply(&mut conn, &[first]).await,
        &["migration 2 (second)", "newer version"],
    );
}

#[tokio::test]
async fn a_failed_statement_is_not_recorded_and_runs_again() {
    let (_test_db, mut conn) = fresh("mig_fail").await;
    let bad = migration(1, "bad", "CREATE TABLE IF NOT EXISTS a (x NOSUCHTYPE)");
    let error = migrate::apply(&mut conn, &[bad]).await.unwrap_err();
    assert!(
        error.to_string().contains("applying migration 1 (bad)"),
        "{error}"
    );
    assert!(!error.is_transient());
    let fixed = migration(1, "bad", "CREATE TABLE IF NOT EXISTS a (x INT)");
    assert_eq!(migrate::apply(&mut conn, &[fixed]).await.unwrap().len(), 1);
}

#[tokio::test]
async fn changing_service_bits_is_refused_unless_forced() {
    let (test_db, mut conn) = fresh("mig_bits").await;
    run(&mut conn, &spec(&test_db, &[]), false).await.unwrap();
    let twelve = spec(&test_db, &[("id.service_bits", "12")]);
    refused(
        run(&mut conn, &twelve, false).await,
        &["10 service bits", "say 12", "--force"],
    );
    assert_eq!(record(&mut conn, "logs").await.unwrap().0, 10);

    let forced = run(&mut conn, &twelve, true).await.unwrap();
    assert_eq!(
        forced.table,
        TableOutcome::ServiceBitsChanged {
            table: "logs".into(),
            from: 10,
            to: 12
        }
    );
    assert_eq!(record(&mut conn, "logs").await.unwrap().0, 12);
    let after = run(&mut conn, &twelve, false).await.unwrap();
    assert!(matches!(after.table, TableOutcome::TableUnchanged { .. }));
}

#[tokio::test]
async fn changing_epoch_period_or_zone_is_refused_even_when_forced() {
    let (test_db, mut conn) = fresh("mig_layout").await;
    run(&mut conn, &spec(&test_db, &[]), false).await.unwrap();
    let before = partitions(&mut conn, "logs").await;
    for (key, value, needle) in [
        ("id.epoch", "2020-01-01", "ID epoch 0"),
        (
            "partitions.period",
            "month",
            "by day in UTC, the settings say month in UTC",
        ),
        (
            "partitions.time_zone",
            "+08:00",
            "the settings say day in +08:00",
        ),
    ] {
        let changed = spec(&test_db, &[(key, value)]);
        refused(
            run(&mut conn, &changed, true).await,
            &[needle, "even with --force"],
        );
    }
    assert_eq!(partitions(&mut conn, "logs").await, before);
    assert_eq!(
        record(&mut conn, "logs").await,
        Some((10, 0, "day".into(), "UTC".into()))
    );
}

#[tokio::test]
async fn an_existing_table_that_fits_is_adopted() {
    let (test_db, mut conn) = fresh("mig_adopt").await;
    let spec = spec(
        &test_db,
        &[
            ("partitions.period", "week"),
            ("partitions.time_zone", "+08:00"),
        ],
    );
    migrate::apply(&mut conn, &migrate::builtin().unwrap())
        .await
        .unwrap();
    // Made by hand (or by `partitions plan`) from an older plan, before tables had a pmin.
    let mut plan = spec
        .scheme
        .initial_plan(now() - chrono::Duration::days(60))
        .unwrap();
    assert_eq!(plan.partitions.remove(0).name, "pmin");
    let ddl = create_log_table_sql(&spec.table, &spec.columns, spec.payload, &plan);
    conn.query_drop(ddl.trim_end().trim_end_matches(';'))
        .await
        .unwrap();

    let report = run(&mut conn, &spec, false).await.unwrap();
    assert_eq!(
        report.table,
        TableOutcome::TableAdopted {
            table: "logs".into(),
            partitions: 9
        }
    );
    assert_eq!(
        record(&mut conn, "logs").await,
        Some((10, 0, "week".into(), "+08:00".into()))
    );
    assert!(matches!(
        run(&mut conn, &spec, false).await.unwrap().table,
        TableOutcome::TableUnchanged { .. }
    ));
}

#[tokio::test]
async fn tables_logstamp_cannot_maintain_are_refused() {
    let (test_db, mut conn) = fresh("mig_refuse").await;
    let spec = spec(&test_db, &[("store.payload", "false")]);
    migrate::apply(&mut conn, &migrate::builtin().unwrap())
        .await
        .unwrap();
    let columns = "level VARCHAR(16), host VARCHAR(255), service VARCHAR(255), \
                   message MEDIUMTEXT, event_time DATETIME(3)";
    let day = first_id_of_day("2040-03-06");
    let cases = [
        (
            format!("CREATE TABLE logs (id BIGINT UNSIGNED PRIMARY KEY, {columns})"),
            "is not partitioned",
        ),
        (
            format!(
                "CREATE TABLE logs (id BIGINT UNSIGNED PRIMARY KEY, {columns}) \
                 PARTITION BY HASH (id) PARTITIONS 4"
            ),
            "partitioned by HASH",
        ),
        (
            format!(
                "CREATE TABLE logs (id BIGINT UNSIGNED, n BIGINT UNSIGNED, {columns}, \
                 PRIMARY KEY (id, n)) PARTITION BY RANGE (n) \
                 (PARTITION p1 VALUES LESS THAN ({day}), PARTITION pmax VALUES LESS THAN MAXVALUE)"
            ),
            "RANGE (id)",
        ),
        (
            format!(
                "CREATE TABLE logs (id BIGINT UNSIGNED PRIMARY KEY, {columns}) \
                 PARTITION BY RANGE (id) (PARTITION p1 VALUES LESS THAN ({day}))"
            ),
            "MAXVALUE",
        ),
        (
            format!(
                "CREATE TABLE logs (id BIGINT UNSIGNED PRIMARY KEY, {columns}) \
                 PARTITION BY RANGE (id) (PARTITION p1 VALUES LESS THAN ({}), \
                 PARTITION pmax VALUES LESS THAN MAXVALUE)",
                day + (3600 << 32)
            ),
            "not the start of a day in UTC",
        ),
        (
            format!(
                "CREATE TABLE logs (id BIGINT PRIMARY KEY, {columns}) PARTITION BY RANGE (id) \
                 (PARTITION p1 VALUES LESS THAN ({}), \
                 PARTITION pmax VALUES LESS THAN MAXVALUE)",
                first_id_of_day("2020-01-01")
            ),
            "not BIGINT UNSIGNED",
        ),
        (
            "CREATE TABLE logs (id BIGINT UNSIGNED PRIMARY KEY, level VARCHAR(16)) \
             PARTITION BY RANGE (id) (PARTITION pmax VALUES LESS THAN MAXVALUE)"
                .to_string(),
            "lacks the columns event_time, host, service, message",
        ),
    ];
    for (ddl, needle) in cases {
        conn.query_drop("DROP TABLE IF EXISTS logs").await.unwrap();
        conn.query_drop(&ddl).await.unwrap();
        refused(run(&mut conn, &spec, false).await, &[needle]);
        assert_eq!(record(&mut conn, "logs").await, None, "{ddl}");
    }
}

#[tokio::test]
async fn migrate_command_creates_the_database_and_says_what_it_did() {
    let test_db = TestDb::create("mig_cli").await;
    let migrate = |extra_env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = assert_cmd::Command::new(BIN);
        cmd.env_clear()
            .env("LOGSTAMP__MYSQL__URL", &test_db.url)
            .env("LOGSTAMP__PARTITIONS__AHEAD", "2")
            .args(["migrate", "--now", "2040-03-05T12:00:00Z"])
            .args(args)
            .timeout(Duration::from_secs(60));
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.assert()
    };

    let first = migrate(&[], &[]).success();
    let first = support::json_lines_in(&first.get_output().stdout);
    let known = migrate::builtin().unwrap().len();
    assert_eq!(first.len(), known + 1, "{first:?}");
    assert_eq!(first[0]["action"], "migration_applied");
    assert_eq!(first[0]["name"], "ingest_offsets");
    assert_eq!(
        first[known],
        serde_json::json!({"action": "table_created", "table": "logs",
            "partitions": ["pmin", "p20400305", "p20400306", "p20400307", "pmax"]})
    );

    let second = migrate(&[], &[]).success();
    assert_eq!(
        support::json_lines_in(&second.get_output().stdout),
        [
            serde_json::json!({"action": "migrations_up_to_date", "schema_version": 23}),
            serde_json::json!({"action": "table_unchanged", "table": "logs"}),
        ]
    );

    let bits = [("LOGSTAMP__ID__SERVICE_BITS", "12")];
    let refused = migrate(&bits, &[]).code(1);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).to_string();
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("10 service bits, the settings say 12"),
        "{stderr}"
    );
    assert!(refused.get_output().stdout.is_empty());

    let forced = migrate(&bits, &["--force"]).success();
    assert_eq!(
        support::json_lines_in(&forced.get_output().stdout)[1],
        serde_json::json!({"action": "service_bits_changed", "table": "logs", "from": 10, "to": 12})
    );
}
