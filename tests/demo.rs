//! `logstamp demo` end to end: an in-process Kafka cluster, two workers and the test MariaDB.

mod support;

use std::time::Duration;

use assert_cmd::Command;
use mysql_async::prelude::Queryable;
use support::{TestDb, server_url};

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

/// The value after `label` at the start of a summary line, as a number.
fn figure(summary: &str, label: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in {summary}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_stores_every_record_once_and_says_what_to_try_next() {
    let db = TestDb::create("demo").await;
    let run = {
        let (server, name) = (server_url(), db.name.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(BIN)
                .env_clear()
                .env("LOGSTAMP__MYSQL__URL", format!("{server}/unused"))
                .args([
                    "demo",
                    "--records",
                    "20000",
                    "--workers",
                    "2",
                    "--database",
                    &name,
                ])
                .timeout(Duration::from_secs(240))
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(figure(&stdout, "stored"), 20000, "{stdout}");
    assert_eq!(figure(&stdout, "duplicates"), 0, "{stdout}");
    assert!(stdout.contains("partitions read: p"), "{stdout}");
    // "service IDs  0 (12000 rows), 1 (8000 rows)": the rows of each worker add up.
    let per_service: u64 = stdout
        .lines()
        .find(|l| l.starts_with("service IDs"))
        .unwrap_or_else(|| panic!("no service IDs line in {stdout}"))
        .split('(')
        .skip(1)
        .map(|part| {
            part.split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(per_service, 20000, "{stdout}");
    assert!(
        stdout.contains("cargo run --release -- query --from"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cargo run --release -- serve\n  then open http://127.0.0.1:8080/"),
        "{stdout}"
    );

    // The summary agrees with the database it names.
    let mut conn = db.conn().await;
    let (rows, ids): (u64, u64) = conn
        .query_first("SELECT COUNT(*), COUNT(DISTINCT id) FROM logs")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((rows, ids), (20000, 20000));
    conn.disconnect().await.unwrap();
}

#[test]
fn demo_without_mysql_says_so_in_one_line() {
    let run = Command::new(BIN)
        .env_clear()
        .env("LOGSTAMP__MYSQL__URL", "mysql://root@127.0.0.1:1/unused")
        .args(["demo", "--records", "10"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("MySQL is not reachable"), "{stderr}");
    assert!(run.stdout.is_empty());
}
