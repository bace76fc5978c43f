//! Queries by event time against MariaDB: the zone map the writer keeps, `query --by event`
//! against a full-scan oracle, the partitions it reads, and the same after partitions are
//! dropped and after the zone map is rebuilt.
//!
//! The data is a backlog: records stamped over four days whose event times lie seconds, hours
//! or days before their stamp time (and some have none). Every expectation comes from the
//! generated records, plain SQL over the whole table, or the server's own EXPLAIN and catalog.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;

use chrono::{DateTime, Duration, NaiveDateTime, SecondsFormat, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use logstamp::config::Settings;
use logstamp::id::{IdRange, Layout};
use logstamp::store::line_count_plan;
use logstamp::store::line_counts;
use logstamp::store::log_table::TableSpec;
use logstamp::store::query::{self, EventQuery};
use logstamp::store::rollup;
use logstamp::store::rollup_plan::{Bucket, BucketBy, RollupPlan, RollupSettings, SourceTable};
use logstamp::store::settings::InsertMethod;
use logstamp::store::{Batch, Writer, migrate, partitions};
use logstamp::transform::Mapper;
use support::{Lcg, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// One generated record.
#[derive(Debug, Clone)]
struct Record {
    id: u64,
    event: Option<NaiveDateTime>,
}

/// Batches of records: each a burst of stamp times with a service ID, whose event times are
/// current (seconds before the stamp), hours before, days before, or missing.
fn backlog(layout: &Layout, seed: u64, bursts: usize, first_service: u32) -> Vec<Vec<Record>> {
    let mut rng = Lcg(seed);
    let start = at("2040-03-05T00:00:00Z").timestamp() as u64;
    let mut counters: HashMap<(u64, u32), u32> = HashMap::new();
    let mut batches = Vec::new();
    for _ in 0..bursts {
        let second = start + rng.below(4 * 86_400);
        let service = first_service + rng.below(3) as u32;
        let kind = rng.below(4);
        let mut batch = Vec::new();
        for _ in 0..(20 + rng.below(120)) {
            let stamped = second + rng.below(150);
            let counter = counters.entry((stamped, service)).or_insert(0);
            let id = layout.encode(stamped, service, *counter).unwrap();
            *counter += 1;
            let lag = match (kind, rng.below(20)) {
                (_, 0) => None,
                (0, _) => Some(rng.below(5_000) as i64),
                (1, _) => Some(3_600_000 + rng.below(12 * 3_600_000) as i64),
                _ => Some(86_400_000 + rng.below(3 * 86_400_000) as i64),
            };
            let event = lag.map(|ms| {
                DateTime::<Utc>::from_timestamp(stamped as i64, 0)
                    .unwrap()
                    .naive_utc()
                    - Duration::milliseconds(ms)
            });
            batch.push(Record { id, event });
        }
        batch.sort_by_key(|r| r.id);
        batches.push(batch);
    }
    batches
}

struct Fixture {
    db: TestDb,
    settings: Settings,
    spec: TableSpec,
    writer: Writer,
    mapper: Mapper,
    next_offset: i64,
}

impl Fixture {
    /// Daily partitions from 2040-03-05 (UTC), the zone map kept for `event_time`.
    async fn new(hint: &str, method: InsertMethod) -> Fixture {
        let db = TestDb::create(hint).await;
        let method = serde_json::to_value(method).unwrap();
        let mut settings = db.settings(&[
            ("store.event_time", "event_time"),
            ("store.insert_method", method.as_str().unwrap()),
            ("store.give_up_after", "30s"),
            ("partitions.retention", "2days"),
            // The backlog is stamped in 2040, long before this clock.
            ("store.commit_window", "off"),
        ]);
        // Records per hour of event time and level.
        let per_hour = RollupSettings {
            name: "events_per_hour".into(),
            source: String::new(),
            bucket: Bucket::Hour,
            bucket_by: BucketBy::Event,
            dimensions: vec!["level".into()],
            sums: vec![],
            mins: vec![],
            maxs: vec![],
        };
        let source = SourceTable {
            name: &settings.store.table,
            columns: &settings.store.columns,
            event_time: &settings.store.event_time,
        };
        settings.rollup_plans = vec![RollupPlan::compile(&per_hour, &[source]).unwrap()];
        logstamp::mysql::create_database(&db.mysql_url())
            .await
            .unwrap();
        let mut conn = db.conn().await;
        let spec = settings.log_table();
        migrate::run_all(
            &mut conn,
            &migrate::builtin().unwrap(),
            &spec,
            &[],
            &settings.rollup_plans,
            at("2040-03-05T00:00:00Z"),
            false,
        )
        .await
        .unwrap();
        conn.disconnect().await.unwrap();
        Fixture {
            writer: support::writer(&settings),
            mapper: Mapper::new(&settings.store.columns),
            db,
            spec,
            settings,
            next_offset: 0,
        }
    }

    fn batch(&mut self, records: &[Record]) -> Batch {
        let rows: Vec<(u64, serde_json::Value)> = records
            .iter()
            .map(|r| {
                let time = r
                    .event
                    .map(|t| t.and_utc().to_rfc3339_opts(SecondsFormat::Millis, true));
                let level = ["info", "warn", "error"][(r.id % 3) as usize];
                let message = serde_json::json!({
                    "time": time, "level": level, "host": "h", "service": "s",
                    "message": format!("record {}", r.id),
                });
                (r.id, message)
            })
            .collect();
        let batch = support::batch(&self.mapper, 0, self.next_offset, &rows);
        self.next_offset = batch.next_offset;
        batch
    }

    async fn write(&mut self, batches: &[Vec<Record>]) {
        for records in batches {
            let batch = self.batch(records);
            let outcome = self.writer.write(&batch).await.unwrap();
            assert!(
                matches!(outcome, logstamp::store::WriteOutcome::Committed(_)),
                "{outcome:?}"
            );
        }
    }
}

/// The zone map as stored: (bucket start, service ID) → (min, max, rows).
type Zones = BTreeMap<(u64, u32), (NaiveDateTime, NaiveDateTime, u64)>;

async fn stored_zones(conn: &mut Conn) -> Zones {
    let rows: Vec<(u64, u32, String, String, u64)> = conn
        .query(
            "SELECT bucket_start, service_id, CAST(min_event AS CHAR), CAST(max_event AS CHAR), n \
             FROM logstamp_zone_map WHERE table_name = 'logs'",
        )
        .await
        .unwrap();
    let time = |text: &str| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap();
    rows.into_iter()
        .map(|(b, s, min, max, n)| ((b, s), (time(&min), time(&max), n)))
        .collect()
}

/// The zone map the records call for, computed here: per minute of ID seconds and service ID.
fn expected_zones(layout: &Layout, records: &[Record]) -> Zones {
    let mut zones = Zones::new();
    for r in records {
        let Some(event) = r.event else { continue };
        let seconds = r.id >> 32;
        let key = ((seconds / 60 * 60) << 32, layout.decode(r.id).service_id);
        let zone = zones.entry(key).or_insert((event, event, 0));
        zone.0 = zone.0.min(event);
        zone.1 = zone.1.max(event);
        zone.2 += 1;
    }
    zones
}

/// A time as DATETIME text, to the microsecond.
fn sql_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

/// The rollup by event time as stored: (hour, level) → records.
async fn stored_rollup(conn: &mut Conn) -> BTreeMap<(String, String), u64> {
    let rows: Vec<(String, String, u64)> = conn
        .query("SELECT CAST(bucket AS CHAR), level, n FROM events_per_hour")
        .await
        .unwrap();
    rows.into_iter().map(|(b, l, n)| ((b, l), n)).collect()
}

/// The same counted with plain SQL over the whole table.
async fn rollup_oracle(conn: &mut Conn) -> BTreeMap<(String, String), u64> {
    let rows: Vec<(String, String, u64)> = conn
        .query(
            "SELECT DATE_FORMAT(event_time, '%Y-%m-%d %H:00:00'), level, COUNT(*) FROM logs \
             WHERE event_time IS NOT NULL GROUP BY 1, 2",
        )
        .await
        .unwrap();
    rows.into_iter().map(|(b, l, n)| ((b, l), n)).collect()
}

/// The oracle: every row of the whole table whose event time is in `[from, to)`.
async fn full_scan(conn: &mut Conn, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<u64> {
    conn.exec(
        "SELECT id FROM logs IGNORE INDEX (PRIMARY) \
         WHERE event_time >= ? AND event_time < ? ORDER BY id",
        (sql_time(from), sql_time(to)),
    )
    .await
    .unwrap()
}

async fn by_event(
    conn: &mut Conn,
    spec: &TableSpec,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<u64> {
    let mut ids = Vec::new();
    query::run_by_event(conn, spec, &EventQuery::between(from, to), |r| {
        ids.push(r.id);
        ControlFlow::Continue(())
    })
    .await
    .unwrap();
    ids
}

/// The table's partitions from the catalog: name and exclusive upper bound (None: MAXVALUE).
async fn partition_bounds(conn: &mut Conn) -> Vec<(String, Option<u64>)> {
    let rows: Vec<(String, String)> = conn
        .query(
            "SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'logs' \
             ORDER BY PARTITION_ORDINAL_POSITION",
        )
        .await
        .unwrap();
    rows.into_iter()
        .map(|(name, bound)| {
            // The catalog shows bounds past 2^63 as negative (signed) numbers.
            let upper = bound
                .parse::<u64>()
                .ok()
                .or_else(|| bound.parse::<i64>().ok().map(|b| b as u64));
            (name, upper)
        })
        .collect()
}

/// The partitions that the zone map names for `[from, to)`: those holding a bucket whose event
/// times overlap it, read with plain SQL and mapped to partitions here.
async fn partitions_named(
    conn: &mut Conn,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> BTreeSet<String> {
    let starts: Vec<u64> = conn
        .exec(
            "SELECT bucket_start FROM logstamp_zone_map \
             WHERE table_name = 'logs' AND min_event < ? AND max_event >= ?",
            (sql_time(to), sql_time(from)),
        )
        .await
        .unwrap();
    let bounds = partition_bounds(conn).await;
    let mut named = BTreeSet::new();
    for start in starts {
        let end = start + (60 << 32);
        let mut lower = 0;
        for (name, upper) in &bounds {
            if end > lower && upper.is_none_or(|u| start < u) {
                named.insert(name.clone());
            }
            lower = upper.unwrap_or(u64::MAX);
        }
    }
    named
}

/// Event-time ranges over the whole span, from days before the first stamp to after the last:
/// short and long, aligned and not.
fn ranges(seed: u64, count: usize) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let mut rng = Lcg(seed);
    let first = at("2040-03-01T00:00:00Z");
    let mut ranges = vec![
        (first, at("2040-03-10T00:00:00Z")),
        (at("2040-03-06T00:00:00Z"), at("2040-03-07T00:00:00Z")),
        (at("2040-03-03T10:00:00Z"), at("2040-03-03T10:05:00Z")),
        (at("2040-03-20T00:00:00Z"), at("2040-03-21T00:00:00Z")),
    ];
    for _ in 0..count {
        let from = first + Duration::milliseconds(rng.below(9 * 86_400_000) as i64);
        let length = match rng.below(3) {
            0 => rng.below(600_000),
            1 => rng.below(6 * 3_600_000),
            _ => rng.below(3 * 86_400_000),
        };
        ranges.push((from, from + Duration::milliseconds(length as i64)));
    }
    ranges
}

/// Every range: the query equals the full scan, and MySQL reads exactly the partitions the
/// zone map names (all of them holding a row of the range).
async fn check_ranges(conn: &mut Conn, spec: &TableSpec, seed: u64, stage: &str) -> usize {
    let mut found = 0;
    for (from, to) in ranges(seed, 40) {
        let expected = full_scan(conn, from, to).await;
        let got = by_event(conn, spec, from, to).await;
        assert_eq!(got, expected, "{stage}: rows of [{from}, {to})");
        found += got.len();
        let (id_ranges, read) = query::explain_by_event(conn, spec, &EventQuery::between(from, to))
            .await
            .unwrap();
        let read: BTreeSet<String> = read.into_iter().collect();
        let named = partitions_named(conn, from, to).await;
        assert_eq!(read, named, "{stage}: partitions read for [{from}, {to})");
        // Every row found lies in an ID range read.
        assert!(
            got.iter()
                .all(|id| id_ranges.iter().any(|r: &IdRange| r.contains(*id))),
            "{stage}: a row outside the ranges read"
        );
    }
    found
}

#[tokio::test]
async fn queries_by_event_time_equal_a_full_scan_before_and_after_drops_and_rebuilds() {
    let mut f = Fixture::new("event_time", InsertMethod::Batch).await;
    let layout = f.settings.id.layout;
    let batches = backlog(&layout, 7, 60, 1);
    f.write(&batches).await;
    let records: Vec<Record> = batches.concat();
    let mut conn = f.db.conn().await;

    // The writer's zone map is exactly the records' buckets.
    assert_eq!(
        stored_zones(&mut conn).await,
        expected_zones(&layout, &records)
    );
    let found = check_ranges(&mut conn, &f.spec, 11, "as written").await;
    let written = counts_exact(&mut conn, &layout, "as written").await;
    assert_eq!(written, records.len() as u64);
    assert!(found > 1_000, "the ranges found only {found} rows");

    // A range of event times long before any stamp time: the query reads the minutes stamped
    // days later, which a query by ID time over the same range would never look at.
    let (from, to) = (at("2040-03-03T00:00:00Z"), at("2040-03-04T00:00:00Z"));
    let backlog_rows = full_scan(&mut conn, from, to).await;
    assert!(!backlog_rows.is_empty());
    assert!(
        backlog_rows
            .iter()
            .all(|id| layout.decode(*id).unix_seconds
                >= at("2040-03-05T00:00:00Z").timestamp() as u64)
    );
    assert_eq!(by_event(&mut conn, &f.spec, from, to).await, backlog_rows);

    // The command line says the same, and --explain names the ranges and partitions.
    let url = f.db.url.clone();
    let env = [
        ("LOGSTAMP__MYSQL__URL", url.as_str()),
        ("LOGSTAMP__STORE__EVENT_TIME", "event_time"),
    ];
    let out = std::process::Command::new(BIN)
        .env_clear()
        .envs(env)
        .args([
            "query",
            "--by",
            "event",
            "--from",
            "2040-03-03",
            "--to",
            "2040-03-04",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, backlog_rows);
    let out = std::process::Command::new(BIN)
        .env_clear()
        .envs(env)
        .args([
            "query",
            "--by",
            "event",
            "--from",
            "2040-03-03",
            "--to",
            "2040-03-04",
            "--explain",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explained: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: BTreeSet<String> = explained["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, partitions_named(&mut conn, from, to).await);
    assert!(!explained["ranges"].as_array().unwrap().is_empty());

    // The rollup by event time equals a count of the table, also after a rebuild of every
    // bucket that ran while another batch writer added more of the backlog.
    assert_eq!(
        stored_rollup(&mut conn).await,
        rollup_oracle(&mut conn).await
    );
    let more = backlog(&layout, 8, 20, 4);
    let plan = f.settings.rollup_plans[0].clone();
    let mut rebuild_conn = f.db.conn().await;
    let retry = f.settings.store.retry_policy();
    let bound = f.settings.mysql.bound_on(&f.settings.mysql.url);
    let span = (
        at("2040-03-01T00:00:00Z").timestamp() as u64,
        at("2040-03-10T00:00:00Z").timestamp() as u64,
    );
    // The line counts are rebuilt at the same time, through another connection.
    let mut counts_conn = f.db.conn().await;
    let count_plan = line_count_plan::plans(&f.settings.store).remove(0);
    let columns: Vec<String> = f.spec.columns.iter().map(|c| c.name.clone()).collect();
    let (_, rebuilt, recounted) = tokio::join!(
        f.write(&more),
        rollup::rebuild(
            &mut rebuild_conn,
            &plan,
            &layout,
            span,
            (retry, &bound),
            |_, _| {}
        ),
        line_counts::rebuild(
            &mut counts_conn,
            (&count_plan, &columns),
            &layout,
            span,
            (retry, &bound),
            |_, _| {}
        )
    );
    let rebuilt = rebuilt.unwrap();
    assert!(rebuilt.counted > 0);
    assert!(recounted.unwrap().counted > 0);
    counts_conn.disconnect().await.unwrap();
    counts_exact(&mut conn, &layout, "rebuilt while written").await;
    assert_eq!(
        stored_rollup(&mut conn).await,
        rollup_oracle(&mut conn).await
    );
    let records: Vec<Record> = records.into_iter().chain(more.concat()).collect();
    assert_eq!(
        stored_zones(&mut conn).await,
        expected_zones(&layout, &records)
    );
    rebuild_conn.disconnect().await.unwrap();

    // Retention drops the first two days' partitions (and pmin's rows): the zone map forgets
    // their buckets, and queries still equal the full scan of what is left.
    let now = at("2040-03-09T12:00:00Z");
    let spec = f.spec.clone();
    let outcome = partitions::ensure(&mut conn, &spec, now, false)
        .await
        .unwrap();
    let partitions::EnsureOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        done.drop
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["p20400305", "p20400306"]
    );
    let first_kept = (at("2040-03-07T00:00:00Z").timestamp() as u64) << 32;
    let kept: Vec<Record> = records
        .iter()
        .filter(|r| r.id >= first_kept)
        .cloned()
        .collect();
    assert!(kept.len() < records.len() && !kept.is_empty());
    assert_eq!(
        stored_zones(&mut conn).await,
        expected_zones(&layout, &kept)
    );
    check_ranges(&mut conn, &f.spec, 12, "after dropping partitions").await;
    let left = counts_exact(&mut conn, &layout, "after dropping partitions").await;
    assert_eq!(left, kept.len() as u64);
    let before: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM logstamp_line_counts WHERE minute < ?",
            (at("2040-03-07T00:00:00Z").timestamp(),),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before, 0, "count rows of dropped partitions are deleted");

    // `query --count`: a day by event time, per hour, equals plain SQL over the table.
    let out = std::process::Command::new(BIN)
        .env_clear()
        .envs(env)
        .args([
            "query",
            "--count",
            "--by",
            "event",
            "--interval",
            "3600",
            "--from",
            "2040-03-06",
            "--to",
            "2040-03-07",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: BTreeMap<(String, String), u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let start = v["start"].as_str().unwrap().to_string();
            (
                (start, v["level"].as_str().unwrap().to_string()),
                v["n"].as_u64().unwrap(),
            )
        })
        .collect();
    let oracle: Vec<(String, String, u64)> = conn
        .query(
            "SELECT DATE_FORMAT(event_time, '%Y-%m-%dT%H:00:00Z'), level, COUNT(*) FROM logs              WHERE event_time >= '2040-03-06' AND event_time < '2040-03-07' GROUP BY 1, 2",
        )
        .await
        .unwrap();
    let oracle: BTreeMap<(String, String), u64> =
        oracle.into_iter().map(|(h, l, n)| ((h, l), n)).collect();
    assert!(!oracle.is_empty());
    assert_eq!(printed, oracle);

    // The zone map rebuilt from the rows (emptied first, and with a stale row) is the same,
    // through the command, and queries still equal the full scan.
    conn.query_drop("DELETE FROM logstamp_zone_map")
        .await
        .unwrap();
    conn.exec_drop(
        "INSERT INTO logstamp_zone_map VALUES ('logs', ?, 1, '2000-01-01', '2000-01-01', 1)",
        (first_kept,),
    )
    .await
    .unwrap();
    let out = std::process::Command::new(BIN)
        .env_clear()
        .envs(env)
        .args(["zonemap", "rebuild"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let with_time = kept.iter().filter(|r| r.event.is_some()).count() as u64;
    assert_eq!(report["counted"].as_u64(), Some(with_time), "{report}");
    assert_eq!(
        stored_zones(&mut conn).await,
        expected_zones(&layout, &kept)
    );
    check_ranges(&mut conn, &f.spec, 13, "after a rebuild").await;

    // The line counts rebuilt by the command (emptied first, and with a stale row).
    conn.query_drop("DELETE FROM logstamp_line_counts")
        .await
        .unwrap();
    conn.exec_drop(
        "INSERT INTO logstamp_line_counts VALUES ('logs', ?, 1, 0, 'stale', 5)",
        (at("2040-03-08T00:00:00Z").timestamp(),),
    )
    .await
    .unwrap();
    let out = std::process::Command::new(BIN)
        .env_clear()
        .envs(env)
        .args(["counts", "rebuild", "--table", "logs"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["counted"].as_u64(),
        Some(kept.len() as u64),
        "{report}"
    );
    counts_exact(&mut conn, &layout, "after `counts rebuild`").await;
    conn.disconnect().await.unwrap();
}

/// The line counts of `logs` against plain SQL over it; returns the lines counted.
async fn counts_exact(conn: &mut Conn, layout: &Layout, stage: &str) -> u64 {
    support::line_counts::assert_exact(
        conn,
        ("logs", Some("level"), Some("event_time")),
        (layout.epoch_unix_seconds(), layout.counter_bits()),
        stage,
    )
    .await
}

/// Every insert method keeps the same zone map.
async fn every_method_keeps_the_zone_map(method: InsertMethod) {
    let mut f = Fixture::new("zone_method", method).await;
    let layout = f.settings.id.layout;
    let batches = backlog(&layout, 3, 6, 1);
    f.write(&batches).await;
    let mut conn = f.db.conn().await;
    assert_eq!(
        stored_zones(&mut conn).await,
        expected_zones(&layout, &batches.concat()),
        "{method:?}"
    );
    counts_exact(&mut conn, &layout, &format!("{method:?}")).await;
    conn.disconnect().await.unwrap();
}

mod every_method {
    use super::*;

    #[tokio::test]
    async fn text() {
        every_method_keeps_the_zone_map(InsertMethod::Text).await
    }

    #[tokio::test]
    async fn prepared() {
        every_method_keeps_the_zone_map(InsertMethod::Prepared).await
    }

    #[tokio::test]
    async fn load_data() {
        every_method_keeps_the_zone_map(InsertMethod::LoadData).await
    }
}
