//! Text search against MariaDB: `contains` and `icontains` answer exactly what a plain `LIKE`
//! over the whole table answers, for rows the writer wrote (its text filter kept in the batch's
//! transaction), rows written around it (read whole until `search rebuild`), and after
//! partitions are dropped; the text filter only narrows what is read.
//!
//! The texts are random: words with ASCII and other letters, digits, separators, the LIKE
//! metacharacters `%`, `_` and `\`, quotes, and characters whose lower case is special (`İ`,
//! the Kelvin sign `K`, `ß`, `ǅ`). Needles are substrings of the texts at random places
//! (so they start and end mid-word), in other cases, and texts no row holds.

mod support;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use logstamp::config::Settings;
use logstamp::id::{IdRange, Layout};
use logstamp::store::filter_language::parse_filter;
use logstamp::store::log_table::TableSpec;
use logstamp::store::query::{self, TimeQuery};
use logstamp::store::{Writer, migrate, partitions, zone_plan};
use logstamp::transform::Mapper;
use support::{Lcg, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

const WORDS: &[&str] = &[
    "GET",
    "get",
    "/api/v1/orders/",
    "6878",
    "68780",
    "timeout",
    "TimeOut",
    "Straße",
    "STRASSE",
    "İstanbul",
    "istanbul",
    "\u{212A}elvin",
    "kelvin",
    "ǅemal",
    "日本語",
    "naïve",
    "ÉCOLE",
    "école",
    "user=",
    "ms",
    "100%",
    "a_b",
    "x\\y",
    "it's",
    "\"q\"",
    "disk",
    "full",
    "503",
    "error",
];
const SEPARATORS: &[&str] = &[" ", "", "/", "=", ", ", "\t", "-", "%", "_", "\\"];

fn text(rng: &mut Lcg) -> String {
    let mut text = String::new();
    for _ in 0..(1 + rng.below(8)) {
        text.push_str(rng.pick(WORDS));
        text.push_str(rng.pick(SEPARATORS));
    }
    text
}

struct Fixture {
    db: TestDb,
    settings: Settings,
    spec: TableSpec,
    writer: Writer,
    mapper: Mapper,
    next_offset: i64,
    /// The next counter per second and service.
    counters: HashMap<(u64, u32), u32>,
}

impl Fixture {
    /// Daily partitions from 2040-03-05 (UTC).
    async fn new(hint: &str) -> Fixture {
        let db = TestDb::create(hint).await;
        let settings = db.settings(&[
            ("store.give_up_after", "30s"),
            ("partitions.retention", "2days"),
            ("store.commit_window", "off"),
        ]);
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
            &[],
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
            counters: HashMap::new(),
        }
    }

    /// `n` rows with random texts over four days from 2040-03-05, in bursts of one service.
    fn rows(&mut self, rng: &mut Lcg, n: usize) -> Vec<Vec<(u64, String)>> {
        let start = at("2040-03-05T00:00:00Z").timestamp() as u64;
        let layout = self.settings.id.layout;
        let mut batches = Vec::new();
        let mut made = 0;
        while made < n {
            let second = start + rng.below(4 * 86_400);
            let service = rng.below(3) as u32;
            let mut batch = Vec::new();
            for _ in 0..(10 + rng.below(60)) {
                let stamped = second + rng.below(200);
                let counter = self.counters.entry((stamped, service)).or_insert(0);
                let id = layout.encode(stamped, service, *counter).unwrap();
                *counter += 1;
                batch.push((id, text(rng)));
                made += 1;
            }
            batch.sort_by_key(|(id, _)| *id);
            batches.push(batch);
        }
        batches
    }

    async fn write(&mut self, batches: &[Vec<(u64, String)>]) {
        for rows in batches {
            let rows: Vec<(u64, serde_json::Value)> = rows
                .iter()
                .map(|(id, message)| {
                    let doc = serde_json::json!({
                        "level": "info", "host": "h", "service": "s", "message": message,
                    });
                    (*id, doc)
                })
                .collect();
            let batch = support::batch(&self.mapper, 0, self.next_offset, &rows);
            self.next_offset = batch.next_offset;
            let outcome = self.writer.write(&batch).await.unwrap();
            assert!(
                matches!(outcome, logstamp::store::WriteOutcome::Committed(_)),
                "{outcome:?}"
            );
        }
    }

    /// Rows put in by plain SQL, past the writer (as rows from before the text filter).
    async fn insert_directly(&self, conn: &mut Conn, batches: &[Vec<(u64, String)>]) {
        for (id, message) in batches.iter().flatten() {
            conn.exec_drop(
                "INSERT INTO logs (id, level, host, service, message) VALUES (?, 'info', 'h', 's', ?)",
                (id, message),
            )
            .await
            .unwrap();
        }
    }
}

/// A filter's text, quoted for the filter language.
fn quoted(text: &str) -> String {
    let mut q = String::from("'");
    for c in text.chars() {
        if c == '\'' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('\'');
    q
}

/// The oracle: IDs whose message holds `needle`, by a plain LIKE over the whole table.
async fn oracle(conn: &mut Conn, needle: &str, ignore_case: bool) -> Vec<u64> {
    let mut pattern = String::from("%");
    for c in needle.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    let sql = if ignore_case {
        "SELECT id FROM logs WHERE LOWER(message) LIKE LOWER(?) ORDER BY id"
    } else {
        "SELECT id FROM logs WHERE message LIKE ? ORDER BY id"
    };
    conn.exec(sql, (pattern,)).await.unwrap()
}

/// The IDs a search answers over the whole table, and the ranges it read.
async fn search(
    conn: &mut Conn,
    (layout, spec): &(Layout, TableSpec),
    needle: &str,
    ignore_case: bool,
) -> (Vec<u64>, Vec<IdRange>) {
    let op = if ignore_case { "icontains" } else { "contains" };
    let mut query = TimeQuery::between(
        layout,
        at("2040-03-04T00:00:00Z"),
        at("2040-03-12T00:00:00Z"),
    )
    .unwrap();
    query.filter =
        parse_filter(&format!("message {op} {}", quoted(needle)), &spec.columns).unwrap();
    let read = query::ranges_to_read(conn, spec, query.range, &query.filter)
        .await
        .unwrap();
    let mut got = Vec::new();
    query::run(conn, spec, &query, |r| {
        got.push(r.id);
        ControlFlow::Continue(())
    })
    .await
    .unwrap();
    (got, read)
}

/// Needles: substrings of stored texts (any start and length, so mid-word at either end), the
/// same in upper and lower case, and texts no row holds.
fn needles_of(rng: &mut Lcg, texts: &[String], n: usize) -> Vec<String> {
    let mut needles = vec![
        String::new(),
        "%".into(),
        "_".into(),
        "\\".into(),
        "100%".into(),
        "a_b".into(),
        "x\\y".into(),
        "it's".into(),
        "orders/6878".into(),
        "no row holds this".into(),
        "timeout/99".into(),
    ];
    while needles.len() < n {
        let text: Vec<char> = texts[rng.below(texts.len() as u64) as usize]
            .chars()
            .collect();
        let start = rng.below(text.len() as u64 + 1) as usize;
        let len = rng.below(14) as usize;
        let needle: String = text[start..(start + len).min(text.len())].iter().collect();
        needles.push(match rng.below(4) {
            0 => needle.to_uppercase(),
            1 => needle.to_lowercase(),
            _ => needle,
        });
    }
    needles
}

/// Every needle both ways against the oracle; every match lies in what was read. Returns how
/// many searches read less than the whole range. The needles are checked by a few tasks at
/// once, each on its connection: one at a time, the searches' CPU and round trips made most
/// of the test's time.
async fn check(fixture: &Fixture, needles: &[String], stage: &str) -> usize {
    const TASKS: usize = 4;
    let table = Arc::new((fixture.settings.id.layout, fixture.spec.clone()));
    let share = needles.len().div_ceil(TASKS);
    let tasks: Vec<_> = needles
        .chunks(share)
        .map(|needles| {
            let (url, table) = (fixture.db.url.clone(), table.clone());
            let (needles, stage) = (needles.to_vec(), stage.to_string());
            tokio::spawn(async move {
                let mut conn = Conn::from_url(url).await.unwrap();
                let narrowed = check_on(&mut conn, &table, &needles, &stage).await;
                conn.disconnect().await.unwrap();
                narrowed
            })
        })
        .collect();
    let mut narrowed = 0;
    for task in tasks {
        narrowed += task.await.unwrap();
    }
    narrowed
}

/// [`check`] on one connection.
async fn check_on(
    conn: &mut Conn,
    table: &(Layout, TableSpec),
    needles: &[String],
    stage: &str,
) -> usize {
    let mut narrowed = 0;
    for needle in needles {
        for ignore_case in [false, true] {
            let expected = oracle(conn, needle, ignore_case).await;
            let (got, read) = search(conn, table, needle, ignore_case).await;
            assert_eq!(
                got, expected,
                "{stage}: {needle:?} (ignore case: {ignore_case})"
            );
            for id in &expected {
                assert!(
                    read.iter().any(|r| r.start <= *id && *id < r.end),
                    "{stage}: {needle:?} matched {id}, outside the ranges read"
                );
            }
            if read.len() != 1 || read[0].end - read[0].start < (4 << 32) * 86_400 {
                narrowed += 1;
            }
        }
    }
    narrowed
}

async fn filter_rows(conn: &mut Conn) -> Vec<mysql_async::Row> {
    conn.query("SELECT * FROM logstamp_text_filter WHERE table_name = 'logs' ORDER BY bucket_start, service_id, block")
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_equal_a_like_over_the_whole_table() {
    let mut fixture = Fixture::new("text_search").await;
    let mut conn = fixture.db.conn().await;
    let mut rng = Lcg(35);

    // Rows the writer writes: its filter is complete from the table's creation.
    let written = fixture.rows(&mut rng, 3_000);
    fixture.write(&written).await;
    let texts: Vec<String> = written.iter().flatten().map(|(_, t)| t.clone()).collect();
    let written_rows = texts.len();
    let needles = needles_of(&mut rng, &texts, 120);
    let narrowed = check(&fixture, &needles, "written").await;
    assert!(
        narrowed > needles.len(),
        "the filter narrowed only {narrowed} of {} searches",
        2 * needles.len()
    );

    // The rebuild computes the filter the writer kept.
    let before = filter_rows(&mut conn).await;
    let out = std::process::Command::new(BIN)
        .env_clear()
        .env("LOGSTAMP__MYSQL__URL", fixture.db.url.clone())
        .args(["search", "rebuild"])
        .output()
        .unwrap();
    let report = support::json_lines(&out);
    assert_eq!(report[0]["rows"], written_rows, "{report:?}");
    assert_eq!(report[0]["covered"], true);
    assert_eq!(filter_rows(&mut conn).await, before);

    // Rows from before the filter existed: without a cover, searches read everything.
    conn.query_drop("DELETE FROM logstamp_text_filter_cover")
        .await
        .unwrap();
    let old = fixture.rows(&mut rng, 1_000);
    fixture.insert_directly(&mut conn, &old).await;
    let texts: Vec<String> = old.iter().flatten().map(|(_, t)| t.clone()).collect();
    let all_rows = written_rows + texts.len();
    let old_needles = needles_of(&mut rng, &texts, 60);
    assert_eq!(check(&fixture, &old_needles, "uncovered").await, 0);
    let out = std::process::Command::new(BIN)
        .env_clear()
        .env("LOGSTAMP__MYSQL__URL", fixture.db.url.clone())
        .args(["search", "rebuild"])
        .output()
        .unwrap();
    assert_eq!(support::json_lines(&out)[0]["rows"], all_rows);
    assert!(check(&fixture, &old_needles, "rebuilt").await > 0);
    check(&fixture, &needles, "rebuilt, written").await;

    // A worker of a version before (filter format 1, blocks below 128) writes rows and their
    // filter rows, in minutes this version's filter covers: read as "may hold anything", its
    // rows are all found, where reading its rows as format 2 would miss them.
    let by_old_worker = fixture.rows(&mut rng, 500);
    fixture.insert_directly(&mut conn, &by_old_worker).await;
    let mut minutes: Vec<u64> = by_old_worker
        .iter()
        .flatten()
        .map(|(id, _)| zone_plan::bucket_start(*id))
        .collect();
    minutes.dedup();
    let words = ["0"; 32].join(", ");
    for minute in minutes {
        conn.exec_drop(
            format!("INSERT IGNORE INTO logstamp_text_filter VALUES ('logs', ?, 9, 5, {words})"),
            (minute,),
        )
        .await
        .unwrap();
    }
    let texts: Vec<String> = by_old_worker
        .iter()
        .flatten()
        .map(|(_, t)| t.clone())
        .collect();
    let old_worker_needles = needles_of(&mut rng, &texts, 40);
    check(&fixture, &old_worker_needles, "format 1").await;

    // Dropping the first two days' partitions forgets their filter rows.
    let dropped = partitions::ensure(&mut conn, &fixture.spec, at("2040-03-09T00:00:00Z"), false)
        .await
        .unwrap();
    assert!(matches!(dropped, partitions::EnsureOutcome::Done(_)));
    let lowest: Option<u64> = conn.query_first("SELECT MIN(id) FROM logs").await.unwrap();
    let first_bucket: Option<u64> = conn
        .query_first("SELECT MIN(bucket_start) FROM logstamp_text_filter")
        .await
        .unwrap();
    assert!(first_bucket.unwrap() + (60 << 32) > lowest.unwrap());
    check(&fixture, &needles, "after drops").await;
    conn.disconnect().await.unwrap();
    let _ = fixture.db;
}
