//! Queries by time against MariaDB: time ranges become ID ranges that read only their
//! partitions, filters are bound values, IDs past 2038 come back exact.

mod support;

use std::ops::ControlFlow;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde_json::{Value, json};

use logstamp::mysql;
use logstamp::store::filter_language::parse_filter;
use logstamp::store::log_table::TableSpec;
use logstamp::store::migrate;
use logstamp::store::query::{self, Record, TimeQuery};
use support::TestDb;

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

fn id_at(time: &str, low_bits: u64) -> u64 {
    ((at(time).timestamp() as u64) << 32) | low_bits
}

/// One row of the fixture.
struct Row {
    id: u64,
    level: &'static str,
    host: &'static str,
    message: &'static str,
    event_time: Option<&'static str>,
    payload: Option<&'static str>,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            id: id_at("2040-03-05T23:59:59Z", 1),
            level: "info",
            host: "web-1",
            message: "day five",
            event_time: None,
            payload: None,
        },
        Row {
            id: id_at("2040-03-06T00:00:00Z", 2),
            level: "error",
            host: "web-1",
            message: "x' OR '1'='1",
            event_time: Some("2040-03-06 00:00:00.125"),
            payload: Some(r#"{"k": "v", "n": [1, 2]}"#),
        },
        Row {
            // Every service and counter bit set: the last ID of its second.
            id: id_at("2040-03-06T12:00:00Z", 0xFFFF_FFFF),
            level: "error",
            host: "db-1",
            message: "disk full",
            event_time: None,
            payload: None,
        },
        Row {
            id: id_at("2040-03-07T00:00:00Z", 3),
            level: "warn",
            host: "web-2",
            message: "slow",
            event_time: None,
            payload: None,
        },
        Row {
            id: id_at("2040-03-08T10:00:00Z", 4),
            level: "error",
            host: "web-1",
            message: "again",
            event_time: None,
            payload: None,
        },
    ]
}

/// A migrated database (daily partitions 2040-03-05 ..= 03-12, UTC) holding `rows()`.
async fn loaded(hint: &str) -> (TestDb, Conn, TableSpec) {
    let test_db = TestDb::create(hint).await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    let spec = test_db.settings(&[]).log_table();
    migrate::run(
        &mut conn,
        &migrate::builtin().unwrap(),
        &spec,
        at("2040-03-05T12:00:00Z"),
        false,
    )
    .await
    .unwrap();
    for r in rows() {
        conn.exec_drop(
            "INSERT INTO logs (id, level, host, service, message, event_time, payload) \
             VALUES (?, ?, ?, 'api', ?, ?, ?)",
            (r.id, r.level, r.host, r.message, r.event_time, r.payload),
        )
        .await
        .unwrap();
    }
    (test_db, conn, spec)
}

async fn select(conn: &mut Conn, spec: &TableSpec, query: &TimeQuery) -> Vec<Record> {
    let mut got = Vec::new();
    query::run(conn, spec, query, |r| {
        got.push(r);
        ControlFlow::Continue(())
    })
    .await
    .unwrap();
    got
}

fn between(spec: &TableSpec, from: &str, to: &str, filter: Option<&str>) -> TimeQuery {
    let mut q = TimeQuery::between(&spec.scheme.layout, at(from), at(to)).unwrap();
    if let Some(f) = filter {
        q.filter = parse_filter(f, &spec.columns).unwrap();
    }
    q
}

fn ids(records: &[Record]) -> Vec<u64> {
    records.iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn a_time_range_returns_exactly_its_rows_in_id_order() {
    let (_db, mut conn, spec) = loaded("query_range").await;
    let all = rows();
    let got = select(
        &mut conn,
        &spec,
        &between(&spec, "2040-03-06T00:00:00Z", "2040-03-07T00:00:00Z", None),
    )
    .await;
    // From midnight included to midnight excluded.
    assert_eq!(ids(&got), [all[1].id, all[2].id]);
    assert!(got[1].id > i64::MAX as u64);
    assert_eq!(
        serde_json::to_value(&got[0]).unwrap(),
        json!({
            "id": all[1].id,
            "event_time": "2040-03-06T00:00:00.125Z",
            "level": "error",
            "host": "web-1",
            "service": "api",
            "message": "x' OR '1'='1",
            // The payload column holds what no column holds (store.payload = "residual"): the
            // document comes back with the columns' values in it.
            "payload": {"k": "v", "n": [1, 2], "time": "2040-03-06T00:00:00.125Z",
                        "level": "error", "host": "web-1", "service": "api",
                        "message": "x' OR '1'='1"},
        })
    );
    // The exact ID survives the trip to JSON text and back.
    let text = serde_json::to_string(&got[1]).unwrap();
    assert!(
        text.starts_with(&format!("{{\"id\":{},", all[2].id)),
        "{text}"
    );
    assert_eq!(got[1].columns[0], ("event_time".to_string(), Value::Null));

    // Sub-second bounds widen to whole seconds: the row at 23:59:59 and the one at 00:00:00.
    let got = select(
        &mut conn,
        &spec,
        &between(
            &spec,
            "2040-03-05T23:59:59.500Z",
            "2040-03-06T00:00:00.100Z",
            None,
        ),
    )
    .await;
    assert_eq!(ids(&got), [all[0].id, all[1].id]);

    let mut limited = between(&spec, "2040-03-01T00:00:00Z", "2040-04-01T00:00:00Z", None);
    limited.limit = Some(2);
    assert_eq!(
        ids(&select(&mut conn, &spec, &limited).await),
        [all[0].id, all[1].id]
    );
}

#[tokio::test]
async fn filters_select_rows_by_bound_values() {
    let (_db, mut conn, spec) = loaded("query_where").await;
    let all = rows();
    let week = |filter: &str| {
        between(
            &spec,
            "2040-03-05T00:00:00Z",
            "2040-03-12T00:00:00Z",
            Some(filter),
        )
    };
    let cases: Vec<(&str, Vec<u64>)> = vec![
        ("level = 'error'", vec![all[1].id, all[2].id, all[4].id]),
        (
            r#"level = "error" and host like "web%""#,
            vec![all[1].id, all[4].id],
        ),
        ("host != 'web-1'", vec![all[2].id, all[3].id]),
        ("LEVEL >= 'info' and level < 'warn'", vec![all[0].id]),
        // Text that looks like SQL is only ever a value.
        (r#"message = "x' OR '1'='1""#, vec![all[1].id]),
        (r#"level = "' OR ''='""#, vec![]),
        (r#"message like "%'%""#, vec![all[1].id]),
        ("event_time >= '2040-03-06 00:00:00.100'", vec![all[1].id]),
        ("event_time > '2040-03-06 00:00:00.125'", vec![]),
    ];
    for (filter, expected) in cases {
        let got = select(&mut conn, &spec, &week(filter)).await;
        assert_eq!(ids(&got), expected, "{filter}");
    }
}

#[tokio::test]
async fn a_zone_moves_the_range() {
    let (_db, mut conn, spec) = loaded("query_zone").await;
    let all = rows();
    // 2040-03-06 at +08:00 is 2040-03-05 16:00 to 2040-03-06 16:00 UTC.
    let zone: logstamp::time::Zone = "+08:00".parse().unwrap();
    let from = logstamp::time::parse_time("2040-03-06", &zone).unwrap();
    let to = logstamp::time::parse_time("2040-03-07", &zone).unwrap();
    let query = TimeQuery::between(&spec.scheme.layout, from, to).unwrap();
    assert_eq!(
        ids(&select(&mut conn, &spec, &query).await),
        [all[0].id, all[1].id, all[2].id]
    );
}

#[tokio::test]
async fn explain_shows_only_the_partitions_of_the_range_are_read() {
    let (test_db, mut conn, spec) = loaded("query_explain").await;
    let explain = async |conn: &mut Conn, from: &str, to: &str, filter: Option<&str>| {
        query::explain_partitions(conn, &spec, &between(&spec, from, to, filter))
            .await
            .unwrap()
    };
    assert_eq!(
        explain(
            &mut conn,
            "2040-03-06T00:00:00Z",
            "2040-03-07T00:00:00Z",
            None
        )
        .await,
        ["p20400306"]
    );
    assert_eq!(
        explain(
            &mut conn,
            "2040-03-06T03:00:00Z",
            "2040-03-06T04:00:00Z",
            Some("level = 'error'")
        )
        .await,
        ["p20400306"]
    );
    // Half a second into the next day needs that day's partition too.
    assert_eq!(
        explain(
            &mut conn,
            "2040-03-06T12:00:00Z",
            "2040-03-07T00:00:00.500Z",
            None
        )
        .await,
        ["p20400306", "p20400307"]
    );
    // Past the last day: pmax. Before the first: pmin, which holds all older IDs.
    assert_eq!(
        explain(
            &mut conn,
            "2040-03-12T12:00:00Z",
            "2040-03-14T00:00:00Z",
            None
        )
        .await,
        ["p20400312", "pmax"]
    );
    assert_eq!(
        explain(
            &mut conn,
            "2040-03-01T00:00:00Z",
            "2040-03-02T00:00:00Z",
            None
        )
        .await,
        ["pmin"]
    );

    // The brief's SQL prunes the same way (before 2038: MariaDB 10.11's UNIX_TIMESTAMP stops
    // there, which is why logstamp computes the bounds itself).
    let monthly = test_db
        .settings(&[
            ("store.table", "early"),
            ("partitions.period", "month"),
            ("partitions.time_zone", "+08:00"),
            ("partitions.ahead", "3"),
        ])
        .log_table();
    migrate::run(
        &mut conn,
        &migrate::builtin().unwrap(),
        &monthly,
        at("2030-06-15T00:00:00Z"),
        false,
    )
    .await
    .unwrap();
    conn.query_drop("SET time_zone = '+08:00'").await.unwrap();
    let mut row: mysql_async::Row = conn
        .query_first(
            "EXPLAIN PARTITIONS SELECT * FROM early \
             WHERE id >= (UNIX_TIMESTAMP('2030-08-05 08:00:00') << 32) \
               AND id <  (UNIX_TIMESTAMP('2030-08-06 08:00:00') << 32)",
        )
        .await
        .unwrap()
        .unwrap();
    let partitions: String = row.take("partitions").unwrap();
    assert_eq!(partitions, "p203008");
}

fn logstamp(test_db: &TestDb, args: &[&str]) -> assert_cmd::assert::Assert {
    let mut cmd = assert_cmd::Command::new(BIN);
    cmd.env_clear()
        .env("LOGSTAMP__MYSQL__URL", &test_db.url)
        .args(args)
        .timeout(Duration::from_secs(60));
    cmd.assert()
}

#[tokio::test]
async fn query_command_prints_json_lines_a_table_or_the_partitions() {
    let (test_db, _conn, _spec) = loaded("query_cli").await;
    let all = rows();
    let out = logstamp(
        &test_db,
        &[
            "query",
            "--from",
            "2040-03-06",
            "--to",
            "2040-03-09",
            "--where",
            "level = 'error'",
        ],
    )
    .success();
    let lines = support::json_lines_in(&out.get_output().stdout);
    let got: Vec<u64> = lines.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    assert_eq!(got, [all[1].id, all[2].id, all[4].id]);
    assert_eq!(lines[0]["payload"]["k"], "v");
    assert_eq!(lines[0]["payload"]["level"], "error");

    // --tz, --limit and the table.
    let out = logstamp(
        &test_db,
        &[
            "query",
            "--from",
            "2040-03-06 08:00:00",
            "--to",
            "2040-03-07",
            "--tz",
            "Asia/Shanghai",
            "--limit",
            "5",
            "--format",
            "table",
        ],
    )
    .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("id "), "{text}");
    assert!(
        lines[1].starts_with(&format!("{}  2040-03-06T00:00:00.125Z  error", all[1].id)),
        "{text}"
    );
    assert!(lines[2].starts_with(&all[2].id.to_string()), "{text}");

    let out = logstamp(
        &test_db,
        &[
            "query",
            "--from",
            "2040-03-06",
            "--to",
            "2040-03-08",
            "--explain",
        ],
    )
    .success();
    let explained: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(explained["partitions"], json!(["p20400306", "p20400307"]));
    assert_eq!(explained["start_id"], id_at("2040-03-06T00:00:00Z", 0));
}

#[tokio::test]
async fn hostile_filters_are_refused_before_reaching_the_server() {
    let (test_db, mut conn, _spec) = loaded("query_hostile").await;
    let cases = [
        ("level = 'x'; DROP TABLE logs", "unexpected character ';'"),
        ("level = 'x' OR 1 = 1", "found `OR`"),
        (
            "level = 'x' UNION SELECT user FROM mysql.user",
            "found `UNION`",
        ),
        ("nosuch = 1", "unknown column `nosuch`"),
        ("id > 0", "unknown column `id`"),
        ("level = \"unterminated", "not closed"),
        ("level = 'a' -- ", "unexpected character '-'"),
        ("level = x", "expected a value"),
        ("DROP TABLE logs", "unknown column `DROP`"),
        ("level = 'x' and sleep(1) = 0", "unknown column `sleep`"),
        ("level = (SELECT 1)", "unexpected character '('"),
    ];
    for (filter, needle) in cases {
        let out = logstamp(
            &test_db,
            &[
                "query",
                "--from",
                "2040-03-01",
                "--to",
                "2040-04-01",
                "--where",
                filter,
            ],
        )
        .code(2);
        let output = out.get_output();
        assert!(output.stdout.is_empty(), "{filter}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: --where: "), "{stderr}");
        assert!(
            stderr.contains(needle),
            "{filter}: {needle:?} not in {stderr}"
        );
    }
    let count: Option<u64> = conn.query_first("SELECT COUNT(*) FROM logs").await.unwrap();
    assert_eq!(count, Some(rows().len() as u64));
}
