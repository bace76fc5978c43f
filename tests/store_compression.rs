//! `store.compression` against real servers: new tables and partitions are made with the
//! setting's algorithm (read back from each partition's file flags), `partitions compress`
//! rebuilds the others one at a time with a JSON line each and keeps every row, and a server
//! that cannot make what the setting asks is refused with what to do. lz4 runs on private
//! servers, since the algorithm is a server-wide variable.

mod support;

use std::time::Duration;

use mysql_async::prelude::Queryable;

use logstamp::store::compression;
use support::TestDb;
use support::mariadb::MariaDb;

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

/// `logstamp ARGS` on the test database with `env` settings; its JSON lines on success.
fn logstamp(db: &TestDb, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = assert_cmd::Command::new(BIN);
    cmd.env_clear()
        .env("LOGSTAMP__MYSQL__URL", &db.url)
        .envs(env.iter().copied())
        .args(args)
        .timeout(Duration::from_secs(120));
    cmd.output().unwrap()
}

/// Each partition's file algorithm, by partition name.
async fn algorithms(db: &TestDb, table: &str) -> Vec<(String, &'static str)> {
    let mut conn = db.conn().await;
    let mut files: Vec<_> = compression::files(&mut conn, table)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.partition, f.algorithm))
        .collect();
    files.sort();
    files
}

/// The rows of the log table, as (count, sum of a hash of every column), by SQL.
async fn fingerprint(db: &TestDb) -> (u64, String) {
    let mut conn = db.conn().await;
    let row: Option<(u64, String)> = conn
        .query_first(
            "SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, event_time, level, host, \
             service, message, payload))), 0) FROM logs",
        )
        .await
        .unwrap();
    row.unwrap()
}

#[tokio::test]
async fn partitions_are_made_and_rebuilt_with_the_settings_algorithm() {
    let db = TestDb::create("compression_zlib").await;
    // Made uncompressed, with rows in today's partition.
    let none = [("LOGSTAMP__STORE__COMPRESSION", "none")];
    let migrate = logstamp(&db, &none, &["migrate"]);
    assert!(migrate.status.success(), "{migrate:?}");
    let files = algorithms(&db, "logs").await;
    assert!(
        files.len() > 2 && files.iter().all(|(_, a)| *a == "none"),
        "{files:?}"
    );
    let mut conn = db.conn().await;
    let now = chrono::Utc::now().timestamp() as u64;
    conn.query_drop(format!(
        "INSERT INTO logs (id, level, host, service, message, payload) \
         SELECT ({now} << 32) + seq, 'info', CONCAT('web-', seq % 7), 'api', \
         REPEAT(CONCAT('GET /api/items/', seq, ' 200 '), 4), JSON_OBJECT('n', seq) \
         FROM seq_1_to_20000"
    ))
    .await
    .unwrap();
    let before = fingerprint(&db).await;

    // The setting now zlib: a dry run says which, the run rebuilds each with a line, in order.
    let zlib = [("LOGSTAMP__STORE__COMPRESSION", "zlib")];
    let dry = support::json_lines(&logstamp(
        &db,
        &zlib,
        &["partitions", "compress", "--dry-run"],
    ));
    let to_do: Vec<&serde_json::Value> = dry
        .iter()
        .filter(|l| l["action"] == "partition_to_compress")
        .collect();
    assert_eq!(to_do.len(), files.len(), "{dry:?}");
    assert_eq!(
        algorithms(&db, "logs").await,
        files,
        "a dry run changes nothing"
    );

    let lines = support::json_lines(&logstamp(&db, &zlib, &["partitions", "compress"]));
    let done: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["action"] == "partition_compressed")
        .collect();
    assert_eq!(done.len(), files.len(), "{lines:?}");
    for (i, line) in done.iter().enumerate() {
        assert_eq!(line["done"], i + 1);
        assert_eq!(line["of"], files.len());
        assert_eq!(
            (&line["from"], &line["to"]),
            (&"none".into(), &"zlib".into())
        );
    }
    let biggest = done
        .iter()
        .max_by_key(|l| l["bytes_before"].as_u64().unwrap())
        .unwrap();
    assert!(
        biggest["bytes_after"].as_u64().unwrap() < biggest["bytes_before"].as_u64().unwrap() / 2,
        "{biggest}"
    );
    let files = algorithms(&db, "logs").await;
    assert!(files.iter().all(|(_, a)| *a == "zlib"), "{files:?}");
    assert_eq!(
        fingerprint(&db).await,
        before,
        "every row is kept as it was"
    );

    // Nothing left to do; partitions added later are made compressed.
    let again = support::json_lines(&logstamp(&db, &zlib, &["partitions", "compress"]));
    assert_eq!(again.last().unwrap()["partitions"], 0, "{again:?}");
    let later = (chrono::Utc::now() + chrono::Duration::days(20)).to_rfc3339();
    let ensure = logstamp(&db, &zlib, &["partitions", "ensure", "--now", &later]);
    assert!(ensure.status.success(), "{ensure:?}");
    let grown = algorithms(&db, "logs").await;
    assert!(grown.len() > files.len(), "{grown:?}");
    assert!(grown.iter().all(|(_, a)| *a == "zlib"), "{grown:?}");
}

#[tokio::test]
async fn lz4_needs_its_provider_and_the_servers_algorithm() {
    // Without the provider: the error names the package.
    let plain = MariaDb::start(3201, &[]).await;
    let server = format!("mysql://root@127.0.0.1:{}", plain.port);
    let db = TestDb::create_on(&server, "compression_no_lz4").await;
    let lz4 = [("LOGSTAMP__STORE__COMPRESSION", "lz4")];
    let refused = logstamp(&db, &lz4, &["migrate"]);
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains(compression::LZ4_PACKAGE), "{stderr}");

    // With it loaded but zlib the server's algorithm: the error says what to set.
    let loaded = MariaDb::start(3202, &["--plugin-load-add=provider_lz4"]).await;
    let server = format!("mysql://root@127.0.0.1:{}", loaded.port);
    let db = TestDb::create_on(&server, "compression_lz4_zlib").await;
    let refused = logstamp(&db, &lz4, &["migrate"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("SET GLOBAL innodb_compression_algorithm = 'lz4'"),
        "{stderr}"
    );

    // With lz4 the server's algorithm: every partition is made with lz4.
    let mut conn = loaded.conn().await;
    conn.query_drop("SET GLOBAL innodb_compression_algorithm = 'lz4'")
        .await
        .unwrap();
    let migrate = logstamp(&db, &lz4, &["migrate"]);
    assert!(migrate.status.success(), "{migrate:?}");
    let files = algorithms(&db, "logs").await;
    assert!(
        !files.is_empty() && files.iter().all(|(_, a)| *a == "lz4"),
        "{files:?}"
    );
    // And a zlib setting now finds the server's algorithm is not its own.
    let zlib = [("LOGSTAMP__STORE__COMPRESSION", "zlib")];
    let refused = logstamp(&db, &zlib, &["partitions", "compress"]);
    assert!(!refused.status.success(), "{refused:?}");
}
