//! What the `logstamp serve` tests share: a database of demo-like log lines over the last
//! hours, with a per-minute rollup by level, and plain-SQL answers to check the server by.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use logstamp::config::Settings;
use mysql_async::prelude::Queryable;

use super::TestDb;

/// The default settings plus a rollup of the log table per minute and level.
pub const CONFIG: &str = r#"
[[rollups]]
name = "per_minute_level"
bucket = "minute"
dimensions = ["level"]
"#;

/// A row's whole document in plain SQL: its residual `payload` with the default columns'
/// values put back where it has none (a null column adds nothing), written apart from the
/// reader's own rejoining, as the oracle of what a line shows.
pub const WHOLE_DOCUMENT: &str = "JSON_MERGE_PATCH(JSON_MERGE_PATCH('{}', JSON_OBJECT(\
     'time', CONCAT(DATE_FORMAT(event_time, '%Y-%m-%dT%H:%i:%s.'), \
       LPAD(FLOOR(MICROSECOND(event_time) / 1000), 3, '0'), 'Z'), \
     'level', level, 'host', host, 'service', service, 'message', message)), payload)";

/// Lines loaded: one per second from `start + 1`.
pub const LINES: u64 = 6_000;

pub struct Loaded {
    pub db: TestDb,
    pub settings: Settings,
    pub config: tempfile::NamedTempFile,
    /// Unix seconds before the first line (a whole minute, three hours ago).
    pub start: u64,
}

/// Line `seq`'s ID: its second, a service ID of 0..=3, the counter `seq`.
pub fn id_of(start: u64, seq: u64) -> u64 {
    ((start + seq) << 32) | ((seq % 4) << 22) | seq
}

/// A migrated database holding [`LINES`] lines, 10% of them errors, with its rollup rebuilt.
pub async fn loaded(hint: &str) -> Loaded {
    let db = TestDb::create(hint).await;
    let mut config = tempfile::NamedTempFile::new().unwrap();
    config.write_all(CONFIG.as_bytes()).unwrap();
    let settings = db.settings_with_file(Some(config.path()), &[]);
    db.migrate(&settings).await;
    let now = chrono::Utc::now().timestamp() as u64;
    let start = (now - 3 * 3_600) / 60 * 60;
    let mut conn = db.conn().await;
    conn.exec_drop(
        "INSERT INTO logs (id, event_time, level, host, service, message, payload) \
         SELECT ((? + seq) << 32) | ((seq % 4) << 22) | seq, \
           DATE_ADD('1970-01-01', INTERVAL (? + seq) SECOND), \
           ELT(1 + seq % 10, 'error', 'warn', 'debug', 'debug', 'info', 'info', 'info', \
               'info', 'info', 'info'), \
           CONCAT('web-', LPAD(seq % 7, 2, '0'), '.eu-west-1.example.com'), \
           ELT(1 + seq % 5, 'auth', 'payments', 'catalog', 'search', 'checkout'), \
           CONCAT('GET /api/v1/orders/', seq, ' 200 in ', seq % 90, 'ms'), \
           JSON_OBJECT('seq', seq, 'trace_id', MD5(seq), 'http', JSON_OBJECT('status', 200)) \
         FROM seq_1_to_6000",
        (start, start),
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    run_logstamp(
        config.path(),
        &db.url,
        &[
            "rollup",
            "rebuild",
            "per_minute_level",
            "--from",
            &logstamp::time::format_utc(start),
            "--to",
            &logstamp::time::format_utc(start + LINES + 60),
        ],
        &[],
    );
    // The lines were inserted with plain SQL, past the writer: their counts are rebuilt.
    run_logstamp(config.path(), &db.url, &["counts", "rebuild"], &[]);
    // Rows put in with SQL: their text filter, as for rows from before it existed.
    run_logstamp(config.path(), &db.url, &["search", "rebuild"], &[]);
    Loaded {
        db,
        settings,
        config,
        start,
    }
}

/// Runs `logstamp --config CONFIG ARGS` on the database at `url`, with more settings in `env`,
/// and asserts it succeeded.
pub fn run_logstamp(config: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env("LOGSTAMP__MYSQL__URL", url)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "logstamp {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `(id, level)` of every line with `from <= id time < to` (Unix seconds), by a plain SELECT.
pub async fn lines_between(db: &TestDb, from: u64, to: u64) -> Vec<(u64, String)> {
    let mut conn = db.conn().await;
    let rows: Vec<(u64, String)> = conn
        .exec(
            "SELECT id, level FROM logs WHERE id >= ? AND id < ? ORDER BY id",
            (from << 32, to << 32),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    rows
}
