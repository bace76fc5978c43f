//! Shared by the tests that need MariaDB: each test gets its own database, dropped afterwards,
//! so tests run in parallel and leave nothing behind. A missing server fails the test loudly.
#![allow(dead_code)]

pub mod dev_broker;
pub mod explorer;
pub mod http;
pub mod ingest;
pub mod kafka;
pub mod line_counts;
pub mod mariadb;
pub mod python;
pub mod relay;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use logstamp::config::{Settings, Sources};
use logstamp::mysql::MysqlUrl;
use mysql_async::prelude::Queryable;

/// A writer of the settings' tables.
pub fn writer(settings: &Settings) -> logstamp::store::Writer {
    logstamp::store::Writer::new(
        &settings.mysql.url,
        &settings.store,
        &settings.rollup_plans,
        settings.id.layout,
    )
    .unwrap()
}

/// A command's JSON lines on stdout, once it has exited successfully (else its stderr is the
/// failure's message).
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    json_lines_in(&out.stdout)
}

/// The JSON value on each line of `text`: what the commands print, one object a line.
pub fn json_lines_in(text: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

/// What a test that misses a service it needs says to do: the README's test command installs
/// and starts every one.
pub const SET_UP: &str = "scripts/test installs and starts what the tests need, then runs them";

/// The server the tests use; `LOGSTAMP_TEST_MYSQL` points them elsewhere.
pub fn server_url() -> String {
    std::env::var("LOGSTAMP_TEST_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// A database of its own for one test.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// `mysql://user@host:port` of the server it is on.
    server: String,
}

impl TestDb {
    /// Names the database after the test (`hint`), the process and a counter.
    pub async fn create(hint: &str) -> TestDb {
        TestDb::create_on(&server_url(), hint).await
    }

    /// On the server at `server` (`mysql://user@host:port`).
    pub async fn create_on(server: &str, hint: &str) -> TestDb {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lst_{hint}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut conn = mysql_async::Conn::from_url(format!("{server}/"))
            .await
            .unwrap_or_else(|e| {
                panic!("these tests need MariaDB at {server} (root, empty password): {e}; {SET_UP}")
            });
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        TestDb {
            url: format!("{server}/{name}"),
            name,
            server: server.to_string(),
        }
    }

    pub fn mysql_url(&self) -> MysqlUrl {
        MysqlUrl::try_from(self.url.clone()).unwrap()
    }

    /// Settings pointing at this database, with extra `(key, value)` overrides.
    pub fn settings(&self, overrides: &[(&str, &str)]) -> Settings {
        self.settings_with_file(None, overrides)
    }

    /// Settings from `file` (a `--config` file) pointing at this database, with overrides.
    pub fn settings_with_file(
        &self,
        file: Option<&std::path::Path>,
        overrides: &[(&str, &str)],
    ) -> Settings {
        let mut sources = Sources {
            file: file.map(|f| f.to_path_buf()),
            env: Some(HashMap::new()),
            ..Sources::default()
        }
        .set("mysql.url", &self.url);
        for (key, value) in overrides {
            sources = sources.set(key, value);
        }
        Settings::load(&sources).unwrap()
    }

    /// Creates this database and migrates it for `settings`: the log table, the fan-out
    /// tables and the rollups.
    pub async fn migrate(&self, settings: &Settings) {
        use logstamp::mysql;
        use logstamp::store::migrate;
        mysql::create_database(&self.mysql_url()).await.unwrap();
        let mut conn = self.conn().await;
        let now = chrono::Utc::now();
        migrate::run_all(
            &mut conn,
            &migrate::builtin().unwrap(),
            &settings.log_table(),
            &settings.fanout_tables(),
            &settings.rollup_plans,
            now,
            false,
        )
        .await
        .unwrap();
        conn.disconnect().await.unwrap();
    }

    /// A connection to this database (which must exist by then).
    pub async fn conn(&self) -> mysql_async::Conn {
        mysql_async::Conn::from_url(self.url.as_str())
            .await
            .unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop runs outside any runtime guarantee: use a thread with its own small runtime.
        let (url, name) = (format!("{}/", self.server), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut conn = mysql_async::Conn::from_url(url).await?;
                // A test that failed may leave connections with open transactions on its tables
                // (their runtime is gone); DROP DATABASE would wait for them forever.
                let leftover: Vec<u64> = conn
                    .exec(
                        "SELECT ID FROM information_schema.PROCESSLIST \
                         WHERE DB = ? AND ID <> CONNECTION_ID()",
                        (name.as_str(),),
                    )
                    .await?;
                for id in leftover {
                    // Gone already is fine.
                    let _ = conn.query_drop(format!("KILL CONNECTION {id}")).await;
                }
                conn.query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
                    .await?;
                conn.disconnect().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("could not drop test database {}", self.name);
        }
    }
}

/// A batch of partition `partition` of topic `logs` (group `g`) from `start_offset`: one row
/// per `(ID, message)`, mapped by `mapper`, at consecutive offsets.
pub fn batch(
    mapper: &logstamp::transform::Mapper,
    partition: i32,
    start_offset: i64,
    rows: &[(u64, serde_json::Value)],
) -> logstamp::store::Batch {
    let rows: Vec<logstamp::store::Row> = rows
        .iter()
        .zip(start_offset..)
        .map(|((id, message), offset)| logstamp::store::Row {
            id: *id,
            offset,
            mapped: mapper.map(message.to_string().as_bytes()).unwrap(),
        })
        .collect();
    logstamp::store::Batch {
        consumer_group: "g".into(),
        topic: "logs".into(),
        partition,
        start_offset,
        next_offset: start_offset + rows.len() as i64,
        rows,
        dead_letters: Vec::new(),
    }
}

/// A small deterministic generator, so a failure can be replayed.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}
