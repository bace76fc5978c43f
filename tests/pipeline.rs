//! The whole pipeline of `config/examples/pipeline.toml` against the real MariaDB and the
//! in-process cluster: normalize, fan out with one shared ID, and exact rollups, including
//! under SIGKILL and while `rollup rebuild` runs.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use mysql_async::prelude::Queryable;
use serde_json::json;

use logstamp::mysql;
use logstamp::store::rollup;
use support::TestDb;
use support::ingest::{SUM_OFFSETS, Setup};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/examples/pipeline.toml")
}

/// 2026-11-21T10:00:00.123Z, which every valid message's time is, in one of three formats.
const EVENT_TIME: &str = "2026-11-21 10:00:00.123";

/// Message `seq`: fields named and spelled in several ways, times in three formats, some HTTP
/// records, some errors; every 50th from 7 lacks its message and every 50th from 13 has a time
/// no format reads (both dead letters).
fn message(seq: u64) -> Vec<u8> {
    let service = ["checkout", "search", "auth"][(seq % 3) as usize];
    let mut m = json!({
        "seq": seq,
        "service": service,
        "host": format!("web-{}", seq % 5),
        "message": format!("request {seq}"),
    });
    m["time"] = match seq % 3 {
        0 => json!("2026-11-21T10:00:00.123Z"),
        1 => json!("2026-11-21 18:00:00.123"),
        _ => json!(1_795_255_200_123u64),
    };
    match seq % 6 {
        0 => m["level"] = json!("INFO"),
        1 => m["lvl"] = json!("warning"),
        2 => m["level"] = json!("ERROR"),
        3 => {}
        4 => m["level"] = json!("fatal"),
        _ => m["level"] = json!("debug"),
    }
    if is_error(seq) {
        m["error"] = json!({"code": format!("E{}", seq % 5), "stack": "at main.rs:1"});
    }
    if is_http(seq) {
        let method = ["GET", "POST"][(seq / 4 % 2) as usize];
        let status = [200, 404, 500][(seq / 4 % 3) as usize];
        // Every 100th path is longer than its column, which truncates it.
        let path = if seq.is_multiple_of(100) {
            format!("/{}", "x".repeat(299))
        } else {
            format!("/api/items/{}", seq % 10)
        };
        m["http"] = json!({
            "request": {"method": method},
            "path": path,
            "status": status,
            "latency_ms": seq % 250,
        });
    }
    if seq % 50 == 7 {
        m.as_object_mut().map(|o| o.remove("message"));
    }
    if seq % 50 == 13 {
        m["time"] = json!("yesterday");
    }
    serde_json::to_vec(&m).unwrap()
}

fn is_error(seq: u64) -> bool {
    matches!(seq % 6, 2 | 4)
}

fn is_http(seq: u64) -> bool {
    seq.is_multiple_of(4)
}

fn is_dead(seq: u64) -> bool {
    matches!(seq % 50, 7 | 13)
}

fn stored_count(n: u64) -> u64 {
    (0..n).filter(|s| !is_dead(*s)).count() as u64
}

async fn rows<T: mysql_async::prelude::FromRow + Send + 'static>(db: &TestDb, sql: &str) -> Vec<T> {
    let mut conn = db.conn().await;
    let rows = conn.query(sql).await.unwrap();
    conn.disconnect().await.unwrap();
    rows
}

/// Every rollup row equals a `GROUP BY` over its raw table, computed here independently of the
/// product's own rebuild statement, for every bucket and dimension.
async fn assert_rollups_match_raw(db: &TestDb) {
    let bucket = |width: u64| {
        format!(
            "DATE_FORMAT(TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ((id >> 32) DIV {width} * {width}) SECOND, '%Y-%m-%d %H:%i:%s')"
        )
    };
    type PerMinute = (String, String, String, u64);
    let rollup: Vec<PerMinute> = rows(
        db,
        "SELECT DATE_FORMAT(bucket, '%Y-%m-%d %H:%i:%s'), service, level, n \
         FROM logs_per_minute ORDER BY 1, 2, 3",
    )
    .await;
    let raw: Vec<PerMinute> = rows(
        db,
        &format!(
            "SELECT {}, COALESCE(service, ''), COALESCE(level, ''), COUNT(*) FROM logs \
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            bucket(60)
        ),
    )
    .await;
    assert!(!raw.is_empty());
    assert_eq!(rollup, raw, "logs_per_minute against logs");
    type PerHour = (String, String, u64, u64, String, Option<u64>, Option<u64>);
    let rollup: Vec<PerHour> = rows(
        db,
        "SELECT DATE_FORMAT(bucket, '%Y-%m-%d %H:%i:%s'), method, status, n, \
         CAST(sum_latency_ms AS CHAR), min_latency_ms, max_latency_ms \
         FROM http_per_hour ORDER BY 1, 2, 3",
    )
    .await;
    let raw: Vec<PerHour> = rows(
        db,
        &format!(
            "SELECT {}, COALESCE(method, ''), COALESCE(status, 0), COUNT(*), \
             CAST(COALESCE(SUM(latency_ms), 0) AS CHAR), MIN(latency_ms), MAX(latency_ms) \
             FROM log_http GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            bucket(3600)
        ),
    )
    .await;
    assert!(!raw.is_empty());
    assert_eq!(rollup, raw, "http_per_hour against log_http");
}

/// Every table's line counts equal a `COUNT(*) GROUP BY` over it (see `support::line_counts`).
async fn assert_line_counts_match_raw(setup: &Setup, stage: &str) {
    let layout = setup.settings.id.layout;
    let layout = (layout.epoch_unix_seconds(), layout.counter_bits());
    let mut conn = setup.db.conn().await;
    let tables = [
        ("logs", Some("level"), Some("event_time")),
        ("log_errors", None, None),
        ("log_http", None, None),
    ];
    for table in tables {
        let counted = support::line_counts::assert_exact(&mut conn, table, layout, stage).await;
        assert!(counted > 0, "{table:?}");
    }
    conn.disconnect().await.unwrap();
}

/// Each stored message once (by its sequence number in the payload), each fan-out row with
/// exactly one log row of the same ID, and each table holding exactly the records routed to it.
async fn assert_fanout_exact(setup: &Setup, n: u64) {
    let expected = stored_count(n);
    let counted: Vec<(u64, u64, u64)> = rows(
        &setup.db,
        "SELECT COUNT(*), COUNT(DISTINCT JSON_VALUE(payload, '$.seq')), COUNT(DISTINCT id) FROM logs",
    )
    .await;
    assert_eq!(
        counted,
        vec![(expected, expected, expected)],
        "rows, distinct seq, distinct IDs"
    );
    let errors = (0..n).filter(|s| !is_dead(*s) && is_error(*s)).count() as u64;
    let http = (0..n).filter(|s| !is_dead(*s) && is_http(*s)).count() as u64;
    for (table, want) in [("log_errors", errors), ("log_http", http)] {
        let joined: Vec<(u64, u64, u64)> = rows(
            &setup.db,
            &format!(
                "SELECT COUNT(*), COUNT(l.id), COUNT(DISTINCT t.id) FROM {table} t \
                 LEFT JOIN logs l ON l.id = t.id"
            ),
        )
        .await;
        assert_eq!(
            joined,
            vec![(want, want, want)],
            "{table} joined to logs on id"
        );
    }
    // The routing agrees with the normalized level and with the record's own fields.
    let misrouted: Vec<u64> = rows(
        &setup.db,
        "SELECT COUNT(*) FROM logs l LEFT JOIN log_errors e ON e.id = l.id \
         WHERE (l.level = 'error') <> (e.id IS NOT NULL) \
            OR (e.id IS NOT NULL AND e.error_code <> JSON_VALUE(l.payload, '$.error.code'))",
    )
    .await;
    assert_eq!(misrouted, vec![0]);
    let http_mismatch: Vec<u64> = rows(
        &setup.db,
        "SELECT COUNT(*) FROM log_http h JOIN logs l ON l.id = h.id \
         WHERE h.method <> JSON_VALUE(l.payload, '$.http.request.method') \
            OR h.status <> JSON_VALUE(l.payload, '$.http.status') \
            OR h.latency_ms <> JSON_VALUE(l.payload, '$.http.latency_ms')",
    )
    .await;
    assert_eq!(http_mismatch, vec![0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn normalized_records_fan_out_with_one_id_and_rollups_match_the_raw_rows() {
    let setup = Setup::with_config("pipeline_fanout", 4, &example(), message).await;
    let n = 20_000;
    let workers: Vec<_> = (1..=2).map(|s| setup.start_worker(s)).collect();
    setup.feed(0, n, 4).await;
    setup
        .wait_for(SUM_OFFSETS, n, Duration::from_secs(120))
        .await;
    for worker in workers {
        worker.stop().await.unwrap();
    }
    assert_fanout_exact(&setup, n).await;
    assert_rollups_match_raw(&setup.db).await;
    assert_line_counts_match_raw(&setup, "as written").await;

    // Normalization: the three time formats give one instant, levels are renamed, defaulted,
    // lower-cased and mapped, and the extracted method reached log_http.
    let times: Vec<String> = rows(
        &setup.db,
        "SELECT DISTINCT DATE_FORMAT(event_time, '%Y-%m-%d %H:%i:%s.%f') FROM logs",
    )
    .await;
    assert_eq!(times, vec![format!("{EVENT_TIME}000")]);
    let levels: Vec<(String, u64)> = rows(
        &setup.db,
        "SELECT level, COUNT(*) FROM logs GROUP BY level ORDER BY level",
    )
    .await;
    let count =
        |keep: &dyn Fn(u64) -> bool| (0..n).filter(|s| !is_dead(*s) && keep(*s)).count() as u64;
    assert_eq!(
        levels,
        vec![
            ("debug".to_string(), count(&|s| s % 6 == 5)),
            ("error".to_string(), count(&|s| matches!(s % 6, 2 | 4))),
            ("info".to_string(), count(&|s| matches!(s % 6, 0 | 3))),
            ("warn".to_string(), count(&|s| s % 6 == 1)),
        ]
    );
    // Dead letters: each bad message at its place, with the rule that failed.
    let dead: Vec<(String, u64)> = rows(
        &setup.db,
        "SELECT reason, COUNT(*) FROM dead_letters GROUP BY reason ORDER BY reason",
    )
    .await;
    let missing = (0..n).filter(|s| s % 50 == 7).count() as u64;
    let unreadable = (0..n).filter(|s| s % 50 == 13).count() as u64;
    assert_eq!(dead.len(), 2, "{dead:?}");
    let total: u64 = dead.iter().map(|(_, c)| c).sum();
    assert_eq!(total, missing + unreadable);
    assert!(
        dead.iter()
            .any(|(r, c)| r.contains("require") && r.contains("/message") && *c == missing),
        "{dead:?}"
    );
    assert!(
        dead.iter()
            .any(|(r, c)| r.contains("time") && r.contains("/time") && *c == unreadable),
        "{dead:?}"
    );
}

/// Worker processes killed at random points: every message still counts once in every table
/// and every rollup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollups_stay_exact_when_workers_are_killed() {
    let setup = Setup::with_config("pipeline_kill", 4, &example(), message).await;
    let n = 60_000;
    let steady = setup.start_worker(1);
    let kills = 4;
    let killing = setup.kill_processes_at_random_points(kills, SUM_OFFSETS, n);
    tokio::join!(setup.feed(0, n, 4), killing);
    let last = setup.spawn_process_holding_partitions(kills).await;
    setup
        .wait_for(SUM_OFFSETS, n, Duration::from_secs(120))
        .await;
    assert!(last.terminate(Duration::from_secs(60)).success());
    steady.stop().await.unwrap();
    assert_fanout_exact(&setup, n).await;
    assert_rollups_match_raw(&setup.db).await;
    assert_line_counts_match_raw(&setup, "after workers were killed").await;
}

/// `rollup rebuild` over the range being written, again and again while workers write: the
/// totals come out the same as the raw rows'. Then a rollup emptied (as if added later) is
/// rebuilt from the raw rows by the command, and `query --rollup` reads it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuilding_while_ingesting_neither_loses_nor_double_counts() {
    let setup = Setup::with_config("pipeline_rebuild", 4, &example(), message).await;
    let n = 60_000;
    let workers: Vec<_> = (1..=2).map(|s| setup.start_worker(s)).collect();
    let now = Utc::now().timestamp() as u64;
    let range = (now - 3_600, now + 3_600);
    let layout = setup.settings.id.layout;
    let feeding = setup.feed(0, n, 4);
    let rebuilding = async {
        let mut conn = mysql::connect(&setup.settings.mysql.url).await.unwrap();
        let mut rounds = 0;
        while setup.count(SUM_OFFSETS).await < n {
            for plan in &setup.settings.rollup_plans {
                rollup::rebuild(
                    &mut conn,
                    plan,
                    &layout,
                    range,
                    (
                        setup.settings.store.retry_policy(),
                        &setup.settings.mysql.bound_on(&setup.settings.mysql.url),
                    ),
                    |_, _| {},
                )
                .await
                .unwrap();
            }
            rounds += 1;
        }
        conn.disconnect().await.unwrap();
        rounds
    };
    let ((), rounds) = tokio::join!(feeding, rebuilding);
    assert!(rounds >= 2, "only {rounds} rebuilds ran during the ingest");
    for worker in workers {
        worker.stop().await.unwrap();
    }
    assert_fanout_exact(&setup, n).await;
    assert_rollups_match_raw(&setup.db).await;

    // As if http_per_hour had been added after the data: empty, then rebuilt by the command.
    let mut conn = setup.db.conn().await;
    conn.query_drop("DELETE FROM http_per_hour").await.unwrap();
    conn.disconnect().await.unwrap();
    let from = chrono::DateTime::from_timestamp(range.0 as i64, 0)
        .unwrap()
        .to_rfc3339();
    let to = chrono::DateTime::from_timestamp(range.1 as i64, 0)
        .unwrap()
        .to_rfc3339();
    let output = setup.run_ok(&[
        "rollup",
        "rebuild",
        "http_per_hour",
        "--from",
        &from,
        "--to",
        &to,
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let http = (0..n).filter(|s| !is_dead(*s) && is_http(*s)).count() as u64;
    assert_eq!(report["counted"], http, "{report}");
    assert_rollups_match_raw(&setup.db).await;

    let output = setup.run_ok(&[
        "query",
        "--rollup",
        "http_per_hour",
        "--from",
        &from,
        "--to",
        &to,
    ]);
    let lines = support::json_lines_in(&output);
    let total: u64 = lines.iter().map(|l| l["n"].as_u64().unwrap()).sum();
    assert_eq!(total, http);
    let latency: u64 = lines
        .iter()
        .map(|l| l["sum_latency_ms"].as_u64().unwrap())
        .sum();
    let expected: u64 = (0..n)
        .filter(|s| !is_dead(*s) && is_http(*s))
        .map(|s| s % 250)
        .sum();
    assert_eq!(latency, expected);
    assert!(
        lines
            .iter()
            .all(|l| l["bucket"].as_str().unwrap().ends_with(":00:00+00:00"))
    );
}

/// A record the database refuses in one of its tables (here a CHECK constraint on `log_http`)
/// is stored in none: it becomes a dead letter with the server's reason, and no rollup counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_refused_in_one_table_is_stored_in_none_and_counted_nowhere() {
    let setup = Setup::with_config("pipeline_refused", 2, &example(), message).await;
    let mut conn = setup.db.conn().await;
    conn.query_drop("ALTER TABLE log_http ADD CONSTRAINT latency_not_16 CHECK (latency_ms <> 16)")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let n = 3_000;
    let refused = |s: u64| !is_dead(s) && is_http(s) && s % 250 == 16;
    let worker = setup.start_worker(1);
    setup.feed(0, n, 2).await;
    setup
        .wait_for(SUM_OFFSETS, n, Duration::from_secs(120))
        .await;
    worker.stop().await.unwrap();

    let expected = (0..n).filter(|s| refused(*s)).count() as u64;
    assert!(expected > 0);
    let letters: Vec<u64> = rows(&setup.db,
        "SELECT COUNT(*) FROM dead_letters WHERE reason LIKE 'the database refused the row:%latency_not_16%'",
    )
    .await;
    assert_eq!(letters, vec![expected]);
    let stored: Vec<u64> = rows(
        &setup.db,
        "SELECT COUNT(*) FROM logs WHERE JSON_VALUE(payload, '$.http.latency_ms') = 16",
    )
    .await;
    assert_eq!(
        stored,
        vec![0],
        "the refused records' log rows were rolled back too"
    );
    let total: Vec<u64> = rows(&setup.db, "SELECT COUNT(*) FROM logs").await;
    assert_eq!(total, vec![stored_count(n) - expected]);
    assert_rollups_match_raw(&setup.db).await;
}

/// Settings of a log table with a DOUBLE column summed per day.
const DAILY_SUM_TOML: &str = r#"
[store]
table = "logs"

[[store.columns]]
name = "seq"
pointer = "/seq"
type = "uint"

[[store.columns]]
name = "value"
pointer = "/value"
type = "double"

[[rollups]]
name = "value_per_day"
bucket = "day"
sums = ["value"]
"#;

/// Message `seq` of the daily sum's stream: every 300th from 150 has a value of 1e308, two of
/// which overflow a DOUBLE sum; the rest are multiples of 1/4, summed exactly in any order.
fn daily_sum_message(seq: u64) -> Vec<u8> {
    let value = if seq % 300 == 150 {
        1e308
    } else {
        seq as f64 / 4.0
    };
    serde_json::to_vec(&json!({"seq": seq, "value": value})).unwrap()
}

/// A poison value never halts a worker: a record whose share pushes a rollup's DOUBLE sum out
/// of range is dead-lettered naming the rollup and the server's error, and everything else is
/// stored and counted. Stamped in one day (or two, across midnight), three values of 1e308
/// leave at most one stored per day.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollup_sum_out_of_range_dead_letters_its_records_and_the_worker_goes_on() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("daily_sum.toml");
    std::fs::write(&file, DAILY_SUM_TOML).unwrap();
    let setup = Setup::with_config("pipeline_overflow", 2, &file, daily_sum_message).await;
    let n = 1_000;
    let worker = setup.start_worker(1);
    setup.feed(0, n, 2).await;
    setup
        .wait_for(SUM_OFFSETS, n, Duration::from_secs(120))
        .await;
    worker.stop().await.unwrap();

    let huge = (0..n).filter(|s| s % 300 == 150).count() as u64;
    let stored_huge: Vec<u64> = rows(
        &setup.db,
        "SELECT COUNT(*) FROM logs WHERE value = 1e308 GROUP BY (id >> 32) DIV 86400",
    )
    .await;
    assert!(stored_huge.iter().all(|&k| k == 1), "{stored_huge:?}");
    let refused = huge - stored_huge.len() as u64;
    assert!(refused >= 1);
    let letters: Vec<u64> = rows(
        &setup.db,
        "SELECT COUNT(*) FROM dead_letters WHERE reason LIKE \
         'the database refused adding the record to rollup `value_per_day`: %(error 1690)' \
         AND JSON_VALUE(raw, '$.value') = 1e308",
    )
    .await;
    assert_eq!(letters, vec![refused]);
    let total: Vec<u64> = rows(&setup.db, "SELECT COUNT(*) FROM logs").await;
    assert_eq!(total, vec![n - refused]);
    type Day = (String, u64, f64);
    let rollup: Vec<Day> = rows(
        &setup.db,
        "SELECT DATE_FORMAT(bucket, '%Y-%m-%d'), n, sum_value FROM value_per_day ORDER BY 1",
    )
    .await;
    let raw: Vec<Day> = rows(
        &setup.db,
        "SELECT DATE_FORMAT(TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ((id >> 32) DIV 86400) DAY, \
         '%Y-%m-%d'), COUNT(*), SUM(value) FROM logs GROUP BY 1 ORDER BY 1",
    )
    .await;
    assert_eq!(rollup, raw);
}

/// The writer alone, with each insert method: one batch of the worked example's records lands
/// in every table it is routed to (same IDs) and in the rollups, which equal the raw rows.
async fn every_insert_method_writes_fan_out_and_rollups(method: &str) {
    use logstamp::store::{Batch, Row, WriteOutcome};
    use logstamp::transform::Pipeline;

    let db = TestDb::create(&format!("pipeline_{method}")).await;
    let settings = db.settings_with_file(Some(&example()), &[("store.insert_method", method)]);
    db.migrate(&settings).await;
    let pipeline =
        Pipeline::from_settings(settings.ingest.format, &settings.normalize, &settings.store);
    let layout = settings.id.layout;
    let second = Utc::now().timestamp() as u64;
    let n = 600;
    let (mut rows_, mut dead_letters) = (Vec::new(), Vec::new());
    for seq in 0..n {
        let offset = seq as i64;
        match pipeline.map("logs", &message(seq)) {
            Ok(mapped) => rows_.push(Row {
                // Spread over a few minutes, so the minute rollup has several buckets.
                id: layout.encode(second - seq % 240, 1, seq as u32).unwrap(),
                offset,
                mapped,
            }),
            Err(e) => dead_letters.push(logstamp::store::DeadLetter {
                offset,
                record: None,
                reason: e.to_string(),
                raw: message(seq),
            }),
        }
    }
    assert_eq!(rows_.len() as u64, stored_count(n));
    let writer = support::writer(&settings);
    let batch = Batch {
        consumer_group: "g".into(),
        topic: "logs".into(),
        partition: 0,
        start_offset: 0,
        next_offset: n as i64,
        rows: rows_,
        dead_letters,
    };
    match writer.write(&batch).await.unwrap() {
        WriteOutcome::Committed(committed) => {
            assert_eq!(committed.rows as u64, stored_count(n));
            assert_eq!(committed.dead_letters as u64, n - stored_count(n));
        }
        other => panic!("not committed: {other:?}"),
    }
    writer.close().await.unwrap();
    let http = (0..n).filter(|s| !is_dead(*s) && is_http(*s)).count() as u64;
    let errors = (0..n).filter(|s| !is_dead(*s) && is_error(*s)).count() as u64;
    let joined: Vec<(u64, u64)> = rows(
        &db,
        "SELECT (SELECT COUNT(*) FROM log_http JOIN logs USING (id)), \
                (SELECT COUNT(*) FROM log_errors JOIN logs USING (id))",
    )
    .await;
    assert_eq!(joined, vec![(http, errors)]);
    assert_rollups_match_raw(&db).await;
}

mod each_insert_method {
    #[tokio::test]
    async fn text() {
        super::every_insert_method_writes_fan_out_and_rollups("text").await
    }

    #[tokio::test]
    async fn prepared() {
        super::every_insert_method_writes_fan_out_and_rollups("prepared").await
    }

    #[tokio::test]
    async fn batch() {
        super::every_insert_method_writes_fan_out_and_rollups("batch").await
    }

    #[tokio::test]
    async fn load_data() {
        super::every_insert_method_writes_fan_out_and_rollups("load_data").await
    }
}
