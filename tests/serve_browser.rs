//! The log explorer page in headless Chromium (Debian's `chromium`, driven by `playwright-core`
//! from tests/browser): `logstamp serve` over a database of demo-like lines, the page's
//! histogram total, filter, opened line, zoom, shared URL and live mode checked against SQL.
//! Screenshots are kept under the build directory (`target/tmp/explorer-screenshots`).

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use serde_json::Value;

use logstamp::time::format_utc;
use support::explorer::{LINES, Loaded, WHOLE_DOCUMENT, lines_between, loaded};
use support::ingest::{GroupProtocol, TOPIC, Worker, produce_messages, test_overrides};
use support::kafka::Kafka;
use support::relay::wait_until;
use support::{SET_UP, TestDb};

/// Lines inserted while the page is live, in two batches committed out of ID order.
const LIVE_LINES: u64 = 10;
/// Lines two workers then ingest from Kafka while the page is live, produced in rounds.
const WORKER_LINES: u64 = 120;
const WORKER_ROUNDS: u64 = 4;
/// Partitions of the workers' topic, shared between them.
const WORKER_PARTITIONS: i32 = 4;

/// A log line of service `live`, happening now.
fn worker_line(seq: u64) -> Vec<u8> {
    let level = ["info", "warn", "error"][(seq % 3) as usize];
    serde_json::to_vec(&serde_json::json!({
        "time": chrono::Utc::now().to_rfc3339(),
        "level": level,
        "host": "web-worker",
        "service": "live",
        "message": format!("worker line {seq}"),
    }))
    .unwrap()
}

/// Lines of service `live` in the database, by plain SQL.
async fn live_ids(db: &TestDb) -> Vec<u64> {
    let mut conn = db.conn().await;
    let ids = conn
        .query("SELECT id FROM logs WHERE service = 'live' ORDER BY id")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    ids
}

/// A child process killed (by its own handle) when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `logstamp serve` on a free port, and its address once it listens.
fn serve(loaded: &Loaded, env: &[(&str, &str)]) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .args(["--config", loaded.config.path().to_str().unwrap()])
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("LOGSTAMP__MYSQL__URL", &loaded.db.url)
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let rest = &line[at..];
                let end = rest[7..].find('/').map_or(rest.len(), |i| i + 7);
                let _ = tx.send(rest[..end].to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("logstamp serve did not say where it listens");
    (child, base)
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// `node explorer.mjs`, its reports arriving on the channel line by line.
fn drive(base: &str, from: u64, to: u64, artefacts: &Path) -> (Killed, mpsc::Receiver<Value>) {
    node(
        "explorer.mjs",
        &[
            ("BASE_URL", base),
            ("FROM", &format_utc(from)),
            ("TO", &format_utc(to)),
            ("ARTEFACTS", artefacts.to_str().unwrap()),
            ("LIVE_LINES", &LIVE_LINES.to_string()),
            ("WORKER_LINES", &WORKER_LINES.to_string()),
        ],
    )
}

/// `node SCRIPT` (of tests/browser) with `env`, its reports arriving on the channel line by
/// line.
fn node(script: &str, env: &[(&str, &str)]) -> (Killed, mpsc::Receiver<Value>) {
    assert!(
        browser_dir().join("node_modules/playwright-core").is_dir(),
        "the browser tests need playwright-core in tests/browser (npm ci there) and Debian's \
         chromium; {SET_UP}"
    );
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium; {SET_UP}"
    );
    let mut child = Command::new("node")
        .arg(browser_dir().join(script))
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node: {e}; {SET_UP}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            match serde_json::from_str(&line) {
                Ok(report) => {
                    if tx.send(report).is_err() {
                        break;
                    }
                }
                Err(_) => eprintln!("node: {line}"),
            }
        }
    });
    (Killed(child), rx)
}

/// The next report, which must be `step`. Blocks this runtime thread: the test runs on two,
/// so the workers it starts go on meanwhile.
fn next(reports: &mpsc::Receiver<Value>, step: &str) -> Value {
    let report = reports
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no {step} from the browser: {e}"));
    assert_eq!(report["step"], step, "the browser said {report}");
    report
}

/// Unix seconds of an RFC 3339 time in the page's URL, and the ID range the server reads for
/// it (whole seconds covering it).
fn seconds(view: &Value, key: &str) -> (u64, bool) {
    let t: chrono::DateTime<chrono::Utc> = view[key].as_str().unwrap().parse().unwrap();
    (t.timestamp() as u64, t.timestamp_subsec_nanos() > 0)
}

/// The IDs a report says the page shows, in its order.
fn shown_ids(report: &Value) -> Vec<u64> {
    report["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect()
}

/// Inserts live lines with IDs at `second`, service ID `service`, in one transaction.
async fn insert_live(
    db: &TestDb,
    second: u64,
    service: u64,
    seqs: std::ops::Range<u64>,
) -> Vec<u64> {
    let mut conn = db.conn().await;
    let mut ids = Vec::new();
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .unwrap();
    for seq in seqs {
        let id = (second << 32) | (service << 22) | seq;
        tx.exec_drop(
            "INSERT INTO logs (id, level, host, service, message) \
             VALUES (?, 'info', 'web-live', 'live', ?)",
            (id, format!("live line {seq}")),
        )
        .await
        .unwrap();
        ids.push(id);
    }
    tx.commit().await.unwrap();
    conn.disconnect().await.unwrap();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_what_sql_holds_and_follows_new_lines() {
    let loaded = loaded("serve_browser").await;
    let (_server, base) = serve(&loaded, &[]);
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("explorer-screenshots");
    std::fs::create_dir_all(&artefacts).unwrap();
    let (from, to) = (loaded.start + 600, loaded.start + 4_200);
    let (_node, reports) = drive(&base, from, to, &artefacts);
    let expected = lines_between(&loaded.db, from, to).await;

    // The histogram's total is SQL's count of the range.
    let report = next(&reports, "loaded");
    assert_eq!(report["total"], expected.len(), "{report}");
    assert_eq!(report["lines"], 100, "{report}");

    // Filtered: only errors on the page, and as many in the histogram as SQL counts.
    let errors = expected.iter().filter(|(_, l)| l == "error").count();
    let report = next(&reports, "filtered");
    assert_eq!(report["total"], errors, "{report}");
    let levels = report["levels"].as_array().unwrap();
    assert!(!levels.is_empty());
    assert!(levels.iter().all(|l| l == "error"), "{report}");
    assert_eq!(report["view"]["where"], "level = 'error'");

    let report = next(&reports, "filter-error");
    let text = report["text"].as_str().unwrap();
    assert!(text.contains("expected a value"), "{report}");
    // The caret points at the second `=`, character 7 of the filter.
    assert!(text.starts_with("       ^"), "{report}");
    assert_eq!(report["invalid"], "true");

    // Searched: plain text is `message icontains`, answered through the text filter; the
    // lines and the histogram's total are what a LIKE over the range finds.
    let report = next(&reports, "searched");
    let mut conn = loaded.db.conn().await;
    let found: Vec<u64> = conn
        .exec(
            "SELECT id FROM logs WHERE id >= ? AND id < ? \
             AND LOWER(message) LIKE '%orders/123%' ORDER BY id DESC",
            (from << 32, to << 32),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    assert!(!found.is_empty());
    assert_eq!(report["total"], found.len(), "{report}");
    assert_eq!(shown_ids(&report), found, "{report}");
    let messages = report["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .all(|m| m.as_str().unwrap().contains("orders/123")),
        "{report}"
    );
    assert_eq!(report["view"]["where"], "ORDERS/123");

    // The opened line's document is the row as SQL has it.
    let report = next(&reports, "opened");
    let id: u64 = report["id"].as_str().unwrap().parse().unwrap();
    let mut conn = loaded.db.conn().await;
    let (level, payload): (String, String) = conn
        .exec_first(
            format!("SELECT level, {WHOLE_DOCUMENT} FROM logs WHERE id = ?"),
            (id,),
        )
        .await
        .unwrap()
        .unwrap();
    conn.disconnect().await.unwrap();
    let document = &report["document"];
    assert_eq!(document["id"], id.to_string());
    assert_eq!(document["level"], level);
    assert_eq!(
        document["payload"],
        serde_json::from_str::<Value>(&payload).unwrap()
    );
    assert_eq!(report["view"]["open"], id.to_string());

    // Zoomed to a narrower range, the total is SQL's count of that range, still filtered.
    let report = next(&reports, "zoomed");
    let (zoom_from, _) = seconds(&report["view"], "from");
    let (zoom_to, partial) = seconds(&report["view"], "to");
    let zoom_to = zoom_to + u64::from(partial);
    assert!(
        from <= zoom_from && zoom_to <= to && zoom_to - zoom_from < to - from,
        "{report}"
    );
    let zoomed_errors = lines_between(&loaded.db, zoom_from, zoom_to)
        .await
        .into_iter()
        .filter(|(_, l)| l == "error")
        .count();
    assert_eq!(report["total"], zoomed_errors, "{report}");
    assert!(zoomed_errors > 0);

    // The URL carries the view.
    let report = next(&reports, "shared");
    assert_eq!(report["total"], zoomed_errors, "{report}");
    assert_eq!(report["filter"], "level = 'error'");

    // Live: a batch stamped now commits; then one stamped three seconds earlier, by another
    // service ID, commits after the first was shown (as a slower worker's would). Both appear,
    // each line once.
    next(&reports, "live-ready");
    let now = chrono::Utc::now().timestamp() as u64;
    let mut inserted = insert_live(&loaded.db, now, 7, 0..LIVE_LINES / 2).await;
    let report = next(&reports, "live-half");
    assert_eq!(
        report["ids"].as_array().unwrap().len() as u64,
        LIVE_LINES / 2
    );
    inserted.extend(insert_live(&loaded.db, now - 3, 9, LIVE_LINES / 2..LIVE_LINES).await);
    let report = next(&reports, "live");
    let shown = shown_ids(&report);
    assert_eq!(shown.len() as u64, LIVE_LINES, "shown twice? {report}");
    assert_eq!(
        shown.iter().copied().collect::<BTreeSet<_>>(),
        inserted.iter().copied().collect::<BTreeSet<_>>()
    );
    // Newest first.
    assert!(shown.windows(2).all(|w| w[0] > w[1]), "{shown:?}");
    assert_eq!(report["total"], LIVE_LINES);

    // Then two workers ingest from Kafka, each committing its own batches, while the page
    // follows: every line appears, once, as SQL has it.
    next(&reports, "worker-ready");
    let kafka = Kafka::start();
    kafka.create_topic(TOPIC, WORKER_PARTITIONS).await;
    let brokers = kafka.bootstrap_servers();
    let settings = loaded.db.settings_with_file(
        Some(loaded.config.path()),
        &test_overrides(&brokers, GroupProtocol::Classic),
    );
    let workers = [Worker::start(&settings, 21), Worker::start(&settings, 22)];
    let per_round = WORKER_LINES / WORKER_ROUNDS;
    for round in 0..WORKER_ROUNDS {
        let (first, end) = (round * per_round, (round + 1) * per_round);
        let brokers = brokers.clone();
        tokio::task::spawn_blocking(move || {
            produce_messages(&brokers, first, end, WORKER_PARTITIONS, worker_line)
        })
        .await
        .unwrap();
        // The next round once this one is stored, so lines arrive over several refreshes.
        wait_until("the workers store the round", || async {
            let stored = live_ids(&loaded.db).await.len() as u64;
            match stored >= LIVE_LINES + end {
                true => Ok(()),
                false => Err(format!("{stored} lines stored")),
            }
        })
        .await;
    }
    let report = next(&reports, "worker");
    let shown = shown_ids(&report);
    let mut stored = live_ids(&loaded.db).await;
    assert_eq!(stored.len() as u64, LIVE_LINES + WORKER_LINES);
    stored.reverse();
    // Newest first, none twice, none missing.
    assert_eq!(shown, stored, "{report}");
    assert_eq!(report["total"], LIVE_LINES + WORKER_LINES);
    for worker in workers {
        worker.stop().await.unwrap();
    }
    next(&reports, "done");
    for shot in [
        "range",
        "errors",
        "filter-error",
        "opened",
        "zoomed",
        "live",
    ] {
        assert!(
            artefacts.join(format!("{shot}.png")).is_file(),
            "{shot}.png"
        );
    }
}

/// A payload with integers past 2^53: exact in the API, and so on the page.
const BIG_PAYLOAD: &str =
    r#"{"big": 9007199254740993, "u64": 18446744073709551615, "i64": -9223372036854775807}"#;
/// Times "Older lines" is clicked: past the 2,000 lines a page holds.
const CLICKS: usize = 25;
/// Lines one page of the explorer reads, and the most it holds.
const PAGE: usize = 100;
const HOLDS: usize = 2_000;

/// The opened line shows the stored document digit for digit; "Older lines" pages back past
/// the lines a page holds; a URL with `open=ID` (and the view's start) opens the same view in a
/// new tab; the URL takes the CLI's relative times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_pages_back_shows_exact_numbers_and_shares_deep_lines() {
    let loaded = loaded("serve_paging").await;
    // One more line, after the others, with big integers in its payload.
    let big_second = loaded.start + LINES + 100;
    let big_id = big_second << 32;
    let mut conn = loaded.db.conn().await;
    conn.exec_drop(
        "INSERT INTO logs (id, level, host, service, message, payload) \
         VALUES (?, 'info', 'web-big', 'big', 'big numbers', ?)",
        (big_id, BIG_PAYLOAD),
    )
    .await
    .unwrap();
    let stored: String = conn
        .exec_first(
            format!("SELECT {WHOLE_DOCUMENT} FROM logs WHERE id = ?"),
            (big_id,),
        )
        .await
        .unwrap()
        .unwrap();
    conn.disconnect().await.unwrap();
    let (_server, base) = serve(&loaded, &[]);
    let (_node, reports) = node(
        "paging.mjs",
        &[
            ("BASE_URL", &base),
            ("BIG_FROM", &format_utc(big_second)),
            ("BIG_TO", &format_utc(big_second + 1)),
            ("RANGE", "from=-7d&to=now"),
            ("CLICKS", &CLICKS.to_string()),
        ],
    );
    // Every line, newest first, as SQL has them.
    let mut all: Vec<String> = lines_between(&loaded.db, 0, big_second + 1)
        .await
        .into_iter()
        .map(|(id, _)| id.to_string())
        .collect();
    all.reverse();
    assert_eq!(all.len() as u64, LINES + 1);

    // The opened document, read as JSON by serde_json (exact for 64-bit integers), is the row.
    let report = next(&reports, "big");
    let text = report["text"].as_str().unwrap();
    let document: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        document["payload"],
        serde_json::from_str::<Value>(&stored).unwrap(),
        "{text}"
    );
    for digits in [
        "9007199254740993",
        "18446744073709551615",
        "-9223372036854775807",
    ] {
        assert!(text.contains(digits), "{digits} not in {text}");
    }

    // `from=-7d&to=now` reads as the CLI reads it: the newest 100 lines.
    let report = next(&reports, "first");
    let ids = |report: &Value| -> Vec<String> {
        report["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&report), all[..PAGE], "{}", report["status"]);

    // Line 151 opened after one "Older lines": its URL opens it in a new tab, in the same view.
    let report = next(&reports, "opened-151");
    assert_eq!(report["opened"], serde_json::json!([all[150]]));
    assert_eq!(report["view"]["open"], all[150]);
    let shared = next(&reports, "shared-151");
    assert_eq!(shared["opened"], serde_json::json!([all[150]]), "{shared}");
    assert_eq!(ids(&shared), all[..2 * PAGE]);

    // Each click moves the view back by a page; past 2,000 lines the newest leave it.
    for click in 1..=CLICKS {
        let report = next(&reports, "older");
        assert_eq!(report["click"], click);
        let end = (click + 2) * PAGE;
        let start = end.saturating_sub(HOLDS);
        assert_eq!(report["count"], end - start, "{report}");
        assert_eq!(report["newest"], all[start], "click {click}: {report}");
        assert_eq!(report["oldest"], all[end - 1], "click {click}: {report}");
        assert_eq!(report["more"], true);
        if start > 0 {
            let status = report["status"].as_str().unwrap();
            assert!(status.contains("2,000 lines"), "{status}");
        }
    }
    let end = (CLICKS + 2) * PAGE;
    let report = next(&reports, "paged");
    assert_eq!(ids(&report), all[end - HOLDS..end]);
    assert_eq!(report["view"]["before"], all[end - HOLDS - 1]);

    // A line deep in the paged view, opened and shared: the new tab shows the same lines, and
    // that one open.
    let opened = next(&reports, "opened-deep");
    let deep = &all[end - HOLDS + 1_500];
    assert_eq!(opened["opened"], serde_json::json!([deep]));
    let shared = next(&reports, "shared-deep");
    assert_eq!(shared["opened"], serde_json::json!([deep]), "{shared}");
    assert_eq!(shared["view"], opened["view"]);
    let shown = ids(&shared);
    assert_eq!(shown[0], all[end - HOLDS], "{}", shared["status"]);
    assert_eq!(shown, all[end - HOLDS..end - HOLDS + shown.len()]);
    assert!(shown.contains(deep));
    next(&reports, "done");
}

/// A table with an event time opens in it: the histogram counts the range's event times and
/// the lines show them; the switch turns the same range to ID time, and the URL says which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_opens_in_event_time_and_switches_to_id_time() {
    let loaded = loaded("serve_browser_event").await;
    // A third of the lines happened two days before they arrived.
    let mut conn = loaded.db.conn().await;
    conn.query_drop(
        "UPDATE logs SET event_time = event_time - INTERVAL 2 DAY WHERE (id & 0x3FFFFF) % 3 = 0",
    )
    .await
    .unwrap();
    let event_time = [("LOGSTAMP__STORE__EVENT_TIME", "event_time")];
    for command in [["zonemap", "rebuild"], ["counts", "rebuild"]] {
        support::explorer::run_logstamp(
            loaded.config.path(),
            &loaded.db.url,
            &command,
            &event_time,
        );
    }
    let (from, to) = (
        loaded.start - 2 * 86_400 + 600,
        loaded.start - 2 * 86_400 + 4_200,
    );
    let by_event: Vec<u64> = conn
        .exec(
            "SELECT id FROM logs WHERE event_time >= DATE_ADD('1970-01-01', INTERVAL ? SECOND) \
             AND event_time < DATE_ADD('1970-01-01', INTERVAL ? SECOND) ORDER BY id DESC",
            (from, to),
        )
        .await
        .unwrap();
    assert!(by_event.len() > 1_000, "{}", by_event.len());
    let (_server, base) = serve(&loaded, &event_time);
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("explorer-screenshots");
    std::fs::create_dir_all(&artefacts).unwrap();
    let (_node, reports) = node(
        "event_time.mjs",
        &[
            ("BASE_URL", &base),
            ("FROM", &format_utc(from)),
            ("TO", &format_utc(to)),
            ("ARTEFACTS", artefacts.to_str().unwrap()),
        ],
    );

    // Event time: SQL's count of the event range, the newest line first with its event time.
    let report = next(&reports, "event");
    assert_eq!(report["total"], by_event.len(), "{report}");
    assert_eq!(report["time"], "event", "{report}");
    assert_eq!(report["switchVisible"], true, "{report}");
    assert_eq!(report["view"]["time"], "event", "{report}");
    assert_eq!(report["heading"], "event time (UTC)", "{report}");
    let first = &report["first"][0];
    assert_eq!(first["id"], by_event[0].to_string(), "{report}");
    let shown: String = conn
        .exec_first(
            "SELECT DATE_FORMAT(event_time, '%Y-%m-%d %H:%i:%s') FROM logs WHERE id = ?",
            (by_event[0],),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["time"], shown, "{report}");

    // ID time: the same range holds no line by arrival (every ID is from the last hours).
    let by_id = lines_between(&loaded.db, from, to).await;
    assert!(by_id.is_empty());
    let report = next(&reports, "id");
    assert_eq!(report["total"], 0, "{report}");
    assert_eq!(report["time"], "id", "{report}");
    assert_eq!(report["view"]["time"], "id", "{report}");
    assert_eq!(report["heading"], "arrival time (UTC)", "{report}");

    let report = next(&reports, "back");
    assert_eq!(report["total"], by_event.len(), "{report}");
    assert_eq!(report["time"], "event", "{report}");
    next(&reports, "done");
    conn.disconnect().await.unwrap();
}
