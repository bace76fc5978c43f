//! Partition maintenance against MariaDB: `partitions ensure` and `partitions list`, with the
//! clock injected, at day, week and month boundaries, in UTC and +08:00, with IDs past 2038.

mod support;

use std::time::Duration;

use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde_json::Value;

use logstamp::mysql::lock::table_lock;
use logstamp::mysql::{self, DbError};
use logstamp::store::log_table::TableSpec;
use logstamp::store::migrate;
use logstamp::store::partition_plan::Maintenance;
use logstamp::store::partitions::{self, EnsureOutcome};
use support::TestDb;

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// An ID stamped at `time` by service 5, counter 7 (default layout: 10 service bits).
fn id_at(time: &str) -> u64 {
    ((at(time).timestamp() as u64) << 32) | (5 << 22) | 7
}

/// The first ID of midnight on `y-m-d` at +08:00.
fn first_id_plus8(y: i32, m: u32, d: u32) -> u64 {
    let t = FixedOffset::east_opt(8 * 3600)
        .unwrap()
        .with_ymd_and_hms(y, m, d, 0, 0, 0)
        .single()
        .unwrap();
    (t.timestamp() as u64) << 32
}

/// A database with the migrations applied and the log table created at `now`.
async fn migrated(hint: &str, overrides: &[(&str, &str)], now: &str) -> (TestDb, Conn, TableSpec) {
    let test_db = TestDb::create(hint).await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    let spec = test_db.settings(overrides).log_table();
    migrate::run(
        &mut conn,
        &migrate::builtin().unwrap(),
        &spec,
        at(now),
        false,
    )
    .await
    .unwrap();
    (test_db, conn, spec)
}

async fn ensure(conn: &mut Conn, spec: &TableSpec, now: &str) -> Maintenance {
    match partitions::ensure(conn, spec, at(now), false)
        .await
        .unwrap()
    {
        EnsureOutcome::Done(m) => m,
        busy => panic!("{busy:?}"),
    }
}

fn added(m: &Maintenance) -> Vec<&str> {
    m.add.iter().map(|p| p.name.as_str()).collect()
}

fn dropped(m: &Maintenance) -> Vec<&str> {
    m.drop.iter().map(|p| p.name.as_str()).collect()
}

async fn partition_names(conn: &mut Conn, table: &str) -> Vec<String> {
    conn.exec(
        "SELECT PARTITION_NAME FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION",
        (table,),
    )
    .await
    .unwrap()
}

async fn ids_in(conn: &mut Conn, table: &str, partition: &str) -> Vec<u64> {
    conn.query(format!(
        "SELECT id FROM `{table}` PARTITION (`{partition}`) ORDER BY id"
    ))
    .await
    .unwrap()
}

async fn insert(conn: &mut Conn, table: &str, ids: &[u64]) {
    for id in ids {
        conn.exec_drop(
            format!("INSERT INTO `{table}` (id, level) VALUES (?, 'info')"),
            (*id,),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn ensure_splits_new_days_off_pmax_and_rows_waiting_there_move_in() {
    let (_db, mut conn, spec) = migrated(
        "part_split",
        &[("partitions.ahead", "2")],
        "2040-03-05T12:00:00Z",
    )
    .await;
    let (older, today, later, much_later) = (
        id_at("2040-03-04T23:59:59Z"),
        id_at("2040-03-05T12:00:00Z"),
        id_at("2040-03-08T01:00:00Z"),
        id_at("2040-03-10T23:59:59Z"),
    );
    insert(
        &mut conn,
        "logs",
        &[older, today, later, much_later, u64::MAX],
    )
    .await;
    // What is older than the first day waits in pmin, not in the first day's partition.
    assert_eq!(ids_in(&mut conn, "logs", "pmin").await, [older]);
    assert_eq!(
        ids_in(&mut conn, "logs", "pmax").await,
        [later, much_later, u64::MAX]
    );

    // Nothing to do the same day; three new days three days later.
    assert!(
        ensure(&mut conn, &spec, "2040-03-05T23:59:59Z")
            .await
            .is_empty()
    );
    let m = ensure(&mut conn, &spec, "2040-03-08T00:00:00Z").await;
    assert_eq!(added(&m), ["p20400308", "p20400309", "p20400310"]);
    assert!(m.drop.is_empty());
    assert_eq!(
        partition_names(&mut conn, "logs").await,
        [
            "pmin",
            "p20400305",
            "p20400306",
            "p20400307",
            "p20400308",
            "p20400309",
            "p20400310",
            "pmax"
        ]
    );
    assert_eq!(ids_in(&mut conn, "logs", "p20400305").await, [today]);
    assert_eq!(ids_in(&mut conn, "logs", "p20400308").await, [later]);
    assert_eq!(ids_in(&mut conn, "logs", "p20400310").await, [much_later]);
    assert_eq!(ids_in(&mut conn, "logs", "pmax").await, [u64::MAX]);
    // IDs above i64::MAX read back exactly.
    let all: Vec<u64> = conn.query("SELECT id FROM logs ORDER BY id").await.unwrap();
    assert_eq!(all, [older, today, later, much_later, u64::MAX]);
    assert!(today > i64::MAX as u64);

    // Again at the same time: nothing.
    assert!(
        ensure(&mut conn, &spec, "2040-03-08T00:00:00Z")
            .await
            .is_empty()
    );
}

/// A table migrated at 2040-03-05 12:00 UTC keeping a day ahead, and its settings with a
/// retention of two days.
async fn retained(hint: &str) -> (TestDb, Conn, TableSpec) {
    let (test_db, conn, _) =
        migrated(hint, &[("partitions.ahead", "1")], "2040-03-05T12:00:00Z").await;
    let spec = test_db
        .settings(&[("partitions.ahead", "1"), ("partitions.retention", "2days")])
        .log_table();
    (test_db, conn, spec)
}

#[tokio::test]
async fn retention_drops_whole_old_periods_with_their_rows() {
    let (_db, mut conn, spec) = retained("part_retain").await;
    let (older, old, kept) = (
        id_at("2040-03-04T12:00:00Z"),
        id_at("2040-03-05T23:00:00Z"),
        id_at("2040-03-06T00:00:00Z"),
    );
    insert(&mut conn, "logs", &[older, old, kept]).await;

    // Cutoff 2040-03-06 00:00 minus a second: p20400305 ends a second too late. pmin's rows
    // are past the cutoff too, but wait for the first day's.
    let m = ensure(&mut conn, &spec, "2040-03-07T23:59:59Z").await;
    assert_eq!(added(&m), ["p20400307", "p20400308"]);
    assert!(m.drop.is_empty() && m.pmin_to.is_none(), "{m:?}");
    assert_eq!(ids_in(&mut conn, "logs", "pmin").await, [older]);
    let m = ensure(&mut conn, &spec, "2040-03-08T00:00:00Z").await;
    assert_eq!(added(&m), ["p20400309"]);
    assert_eq!(dropped(&m), ["p20400305"]);
    let day6 = id_at("2040-03-06T00:00:00Z") & !0xFFFF_FFFF;
    assert_eq!(m.drop[0].less_than, Some(day6));
    assert_eq!(m.pmin_to, Some(day6));
    // pmin stays first, emptied with p20400305 and merged with it.
    assert_eq!(
        partition_names(&mut conn, "logs").await,
        [
            "pmin",
            "p20400306",
            "p20400307",
            "p20400308",
            "p20400309",
            "pmax"
        ]
    );
    let left: Vec<u64> = conn.query("SELECT id FROM logs").await.unwrap();
    assert_eq!(left, [kept]);
    // pmin now ends where 2040-03-06 starts: a late row of the 5th lands there.
    let late = id_at("2040-03-05T23:59:59Z");
    insert(&mut conn, "logs", &[late]).await;
    assert_eq!(ids_in(&mut conn, "logs", "pmin").await, [late]);
    assert_eq!(ids_in(&mut conn, "logs", "p20400306").await, [kept]);
}

#[tokio::test]
async fn retention_drops_old_periods_of_a_table_made_before_pmin() {
    let (_db, mut conn, spec) = retained("part_retain_old").await;
    // As tables were made before pmin: the first day's partition holds anything older.
    conn.query_drop(format!(
        "ALTER TABLE logs REORGANIZE PARTITION pmin, p20400305 INTO \
         (PARTITION p20400305 VALUES LESS THAN ({}))",
        id_at("2040-03-06T00:00:00Z") & !0xFFFF_FFFF
    ))
    .await
    .unwrap();
    let (older, kept) = (id_at("2040-03-04T12:00:00Z"), id_at("2040-03-06T00:00:00Z"));
    insert(&mut conn, "logs", &[older, kept]).await;
    assert_eq!(ids_in(&mut conn, "logs", "p20400305").await, [older]);

    let m = ensure(&mut conn, &spec, "2040-03-08T00:00:00Z").await;
    assert_eq!(dropped(&m), ["p20400305"]);
    assert_eq!(m.pmin_to, None);
    assert_eq!(
        partition_names(&mut conn, "logs").await,
        ["p20400306", "p20400307", "p20400308", "p20400309", "pmax"]
    );
    let left: Vec<u64> = conn.query("SELECT id FROM logs").await.unwrap();
    assert_eq!(left, [kept]);
}

#[tokio::test]
async fn months_and_weeks_roll_over_in_their_zone() {
    let month = [
        ("partitions.period", "month"),
        ("partitions.time_zone", "+08:00"),
        ("partitions.ahead", "1"),
    ];
    // 2040-02-01 00:00 at +08:00 is 2040-01-31 16:00 UTC.
    let (test_db, mut conn, spec) = migrated("part_zones", &month, "2040-01-31T15:59:59Z").await;
    assert_eq!(
        partition_names(&mut conn, "logs").await,
        ["pmin", "p204001", "p204002", "pmax"]
    );
    let m = ensure(&mut conn, &spec, "2040-01-31T16:00:00Z").await;
    assert_eq!(added(&m), ["p204003"]);
    assert_eq!(m.add[0].less_than, Some(first_id_plus8(2040, 4, 1)));
    // Half an hour into February at +08:00 is still January in UTC.
    let feb = id_at("2040-01-31T16:30:00Z");
    insert(&mut conn, "logs", &[feb]).await;
    assert_eq!(ids_in(&mut conn, "logs", "p204002").await, [feb]);

    // Weekly, in another table of the same database: 2040-12-24 and 12-31 are Mondays.
    let week = [
        ("store.table", "weekly"),
        ("partitions.period", "week"),
        ("partitions.ahead", "0"),
    ];
    let spec = test_db.settings(&week).log_table();
    migrate::run(
        &mut conn,
        &migrate::builtin().unwrap(),
        &spec,
        at("2040-12-23T23:59:59Z"),
        false,
    )
    .await
    .unwrap();
    assert_eq!(
        partition_names(&mut conn, "weekly").await,
        ["pmin", "p2040w51", "pmax"]
    );
    assert!(
        ensure(&mut conn, &spec, "2040-12-23T23:59:59Z")
            .await
            .is_empty()
    );
    assert_eq!(
        added(&ensure(&mut conn, &spec, "2040-12-24T00:00:00Z").await),
        ["p2040w52"]
    );
    assert_eq!(
        added(&ensure(&mut conn, &spec, "2040-12-31T00:00:00Z").await),
        ["p2041w01"]
    );
}

#[tokio::test]
async fn a_held_lock_means_another_process_is_at_it_and_nothing_is_done() {
    let (test_db, mut conn, spec) = migrated("part_lock", &[], "2040-03-05T12:00:00Z").await;
    let before = partition_names(&mut conn, "logs").await;
    let mut other = mysql::connect(&test_db.mysql_url()).await.unwrap();
    let lock = table_lock(&test_db.name, "logs");
    let held: Option<i64> = other
        .exec_first("SELECT GET_LOCK(?, 0)", (lock.as_str(),))
        .await
        .unwrap();
    assert_eq!(held, Some(1));

    let outcome = partitions::ensure(&mut conn, &spec, at("2040-03-09T00:00:00Z"), false)
        .await
        .unwrap();
    assert_eq!(outcome, EnsureOutcome::Busy { lock: lock.clone() });
    assert_eq!(partition_names(&mut conn, "logs").await, before);

    other
        .exec_drop("SELECT RELEASE_LOCK(?)", (lock.as_str(),))
        .await
        .unwrap();
    let m = ensure(&mut conn, &spec, "2040-03-09T00:00:00Z").await;
    assert_eq!(
        added(&m),
        ["p20400313", "p20400314", "p20400315", "p20400316"]
    );
    // ensure released the lock again.
    let free: Option<i64> = other
        .exec_first("SELECT IS_FREE_LOCK(?)", (lock.as_str(),))
        .await
        .unwrap();
    assert_eq!(free, Some(1));
}

#[tokio::test]
async fn a_dry_run_changes_nothing() {
    let (_db, mut conn, spec) = migrated("part_dry", &[], "2040-03-05T12:00:00Z").await;
    let before = partition_names(&mut conn, "logs").await;
    let outcome = partitions::ensure(&mut conn, &spec, at("2040-03-07T00:00:00Z"), true)
        .await
        .unwrap();
    let EnsureOutcome::Done(m) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(added(&m), ["p20400313", "p20400314"]);
    assert_eq!(partition_names(&mut conn, "logs").await, before);
}

#[tokio::test]
async fn ensure_refuses_tables_migrate_did_not_record_or_other_settings() {
    let (test_db, mut conn, _) = migrated("part_refuse", &[], "2040-03-05T12:00:00Z").await;
    let monthly = test_db
        .settings(&[("partitions.period", "month")])
        .log_table();
    let error = partitions::ensure(&mut conn, &monthly, at("2040-03-07T00:00:00Z"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DbError::Catalog { reason, .. } if reason.contains("partitioned by day")),
        "{error}"
    );
    let other = test_db.settings(&[("store.table", "not_made")]).log_table();
    let error = partitions::ensure(&mut conn, &other, at("2040-03-07T00:00:00Z"), false)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("run logstamp migrate first"),
        "{error}"
    );
}

#[tokio::test]
async fn list_shows_time_ranges_bounds_and_row_estimates() {
    let (_db, mut conn, spec) = migrated(
        "part_list",
        &[
            ("partitions.ahead", "1"),
            ("partitions.time_zone", "+08:00"),
        ],
        "2040-03-05T12:00:00Z",
    )
    .await;
    let ids = [
        id_at("2040-03-05T16:00:00Z"),
        id_at("2040-03-05T17:00:00Z"),
        id_at("2040-03-06T15:59:59Z"),
    ];
    insert(&mut conn, "logs", &ids).await;
    conn.query_drop("ANALYZE TABLE logs").await.unwrap();

    let shown = partitions::list(&mut conn, &spec).await.unwrap();
    let names: Vec<&str> = shown.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["pmin", "p20400305", "p20400306", "pmax"]);
    assert_eq!(shown[0].from, None);
    assert_eq!(shown[0].to.as_deref(), Some("2040-03-04T16:00:00Z"));
    assert_eq!(shown[0].less_than, Some(first_id_plus8(2040, 3, 5)));
    assert_eq!(shown[1].from.as_deref(), Some("2040-03-04T16:00:00Z"));
    assert_eq!(shown[1].to.as_deref(), Some("2040-03-05T16:00:00Z"));
    assert_eq!(shown[1].less_than, Some(first_id_plus8(2040, 3, 6)));
    assert_eq!(shown[2].less_than, Some(first_id_plus8(2040, 3, 7)));
    assert_eq!(
        shown.iter().map(|p| p.rows).collect::<Vec<_>>(),
        [0, 0, 3, 0]
    );
    assert_eq!(shown[3].less_than, None);
    assert_eq!(shown[3].to, None);
}

#[tokio::test]
async fn partitions_commands_print_json_lines_and_a_table() {
    let test_db = TestDb::create("part_cli").await;
    let logstamp = |args: &[&str]| {
        let mut cmd = assert_cmd::Command::new(BIN);
        cmd.env_clear()
            .env("LOGSTAMP__MYSQL__URL", &test_db.url)
            .env("LOGSTAMP__PARTITIONS__AHEAD", "1")
            .env("LOGSTAMP__PARTITIONS__RETENTION", "1day")
            .args(args)
            .timeout(Duration::from_secs(60));
        let out = cmd.assert().success().get_output().stdout.clone();
        String::from_utf8(out).unwrap()
    };
    logstamp(&["migrate", "--now", "2040-03-05T12:00:00Z"]);

    let ensured = support::json_lines_in(
        logstamp(&["partitions", "ensure", "--now", "2040-03-07T00:00:00Z"]).as_bytes(),
    );
    let actions: Vec<(&str, &str)> = ensured
        .iter()
        .map(|l| {
            (
                l["action"].as_str().unwrap(),
                l["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("partition_added", "p20400307"),
            ("partition_added", "p20400308"),
            ("partition_dropped", "p20400305"),
            ("pmin_raised", ""),
            ("partitions_ensured", ""),
        ]
    );
    assert_eq!(
        ensured[0]["less_than"],
        id_at("2040-03-08T00:00:00Z") & !0xFFFF_FFFF
    );
    assert_eq!(
        ensured[3]["less_than"],
        id_at("2040-03-06T00:00:00Z") & !0xFFFF_FFFF
    );
    assert_eq!(ensured[4]["added"], 2);
    assert_eq!(ensured[4]["dropped"], 1);

    let listed = support::json_lines_in(logstamp(&["partitions", "list"]).as_bytes());
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0]["name"], "pmin");
    assert_eq!(listed[0]["to"], "2040-03-06T00:00:00Z");
    assert_eq!(listed[1]["name"], "p20400306");
    assert_eq!(listed[1]["to"], "2040-03-07T00:00:00Z");
    assert_eq!(listed[4]["less_than"], Value::Null);

    let table = logstamp(&["partitions", "list", "--format", "table"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(lines[0].starts_with("name "), "{table}");
    assert!(lines[1].starts_with("pmin       -  "), "{table}");
    assert!(
        lines[2].starts_with("p20400306  2040-03-06T00:00:00Z"),
        "{table}"
    );
    assert!(lines[5].contains("MAXVALUE"), "{table}");
}

#[tokio::test]
async fn the_design_notes_plan_gives_each_month_its_own_rows() {
    let test_db = TestDb::create("part_notes").await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    let out = assert_cmd::Command::new(BIN)
        .env_clear()
        .args([
            "partitions",
            "plan",
            "--from",
            "2017-07",
            "--to",
            "2017-09",
            "--period",
            "month",
            "--tz",
            "+08:00",
        ])
        .timeout(Duration::from_secs(60))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let ddl = String::from_utf8(out).unwrap();
    conn.query_drop(ddl.trim_end().trim_end_matches(';'))
        .await
        .unwrap();

    // The server's own clock arithmetic is the oracle: midnight at +08:00, << 32.
    conn.query_drop("SET time_zone = '+08:00'").await.unwrap();
    let bounds: Vec<(String, String)> = conn
        .query(
            "SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'logs' \
             ORDER BY PARTITION_ORDINAL_POSITION",
        )
        .await
        .unwrap();
    let mut expected = Vec::new();
    for start in ["2017-07-01", "2017-08-01", "2017-09-01", "2017-10-01"] {
        let bound: Option<u64> = conn
            .exec_first(
                "SELECT UNIX_TIMESTAMP(CONCAT(?, ' 00:00:00')) << 32",
                (start,),
            )
            .await
            .unwrap();
        expected.push(bound.unwrap().to_string());
    }
    let names = ["pmin", "p201707", "p201708", "p201709", "pmax"];
    let shown: Vec<(&str, &str)> = bounds
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str()))
        .collect();
    let wanted: Vec<(&str, &str)> = names
        .into_iter()
        .zip(expected.iter().map(String::as_str).chain(["MAXVALUE"]))
        .collect();
    assert_eq!(shown, wanted);

    // The last second of June (+08:00) is in pmin, July's first and last in p201707 only.
    let mut in_month = Vec::new();
    for time in [
        "2017-06-30 23:59:59",
        "2017-07-01 00:00:00",
        "2017-07-31 23:59:59",
        "2017-08-01 00:00:00",
    ] {
        conn.exec_drop(
            "INSERT INTO logs (id) VALUES (UNIX_TIMESTAMP(?) << 32 | 4095)",
            (time,),
        )
        .await
        .unwrap();
        let id: Option<u64> = conn
            .exec_first("SELECT UNIX_TIMESTAMP(?) << 32 | 4095", (time,))
            .await
            .unwrap();
        in_month.push(id.unwrap());
    }
    assert_eq!(ids_in(&mut conn, "logs", "pmin").await, in_month[..1]);
    assert_eq!(ids_in(&mut conn, "logs", "p201707").await, in_month[1..3]);
    assert_eq!(ids_in(&mut conn, "logs", "p201708").await, in_month[3..]);
}
