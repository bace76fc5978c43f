//! Ingest test harness: an Apache Kafka broker process, a migrated database, workers run as tasks
//! or as `logstamp ingest` processes, and the exactly-once check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use logstamp::config::Settings;
use logstamp::id::IdGenerator;
use logstamp::ingest::kafka::{Outgoing, produce_all};
use logstamp::ingest::{self, IngestError, IngestStats};
use logstamp::store::schema::{ColumnSpec, ColumnType};
use mysql_async::prelude::Queryable;
use rand::Rng;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::TestDb;
use super::kafka::Kafka;
use super::mariadb::MariaDb;

pub const TOPIC: &str = "logs";

/// A consumer group's protocol: the classic one, or KIP-848's (`group.protocol=consumer`),
/// where the broker assigns partitions and keeps the session settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    Classic,
    Consumer,
}

/// What every test worker runs with, besides its database.
pub fn test_overrides(brokers: &str, protocol: GroupProtocol) -> Vec<(&str, &str)> {
    let mut all = vec![
        ("kafka.brokers", brokers),
        ("kafka.group_id", "ingest-test"),
        ("batch.linger_ms", "50"),
        ("store.give_up_after", "60s"),
        ("ingest.shutdown_timeout", "60s"),
    ];
    match protocol {
        // A worker killed without leaving its group is noticed within a session: a short one
        // keeps the tests that kill workers quick (the default is 45 s).
        GroupProtocol::Classic => all.extend([
            ("kafka.properties.session.timeout.ms", "3000"),
            ("kafka.properties.heartbeat.interval.ms", "300"),
        ]),
        // Its session and heartbeat are the broker's (tests/support/kafka.rs sets them short).
        GroupProtocol::Consumer => all.push(("kafka.properties.group.protocol", "consumer")),
    }
    all
}

/// A database and a cluster with one topic of `partitions` partitions.
pub struct Setup {
    pub db: TestDb,
    /// The broker this setup started, unless it was given the brokers of another.
    kafka: Option<Kafka>,
    pub brokers: String,
    pub settings: Settings,
    /// The `--config` file the settings came from, if any; worker processes are given it with
    /// this setup's own settings as environment variables.
    file: Option<std::path::PathBuf>,
    /// Message `seq` of the stream `feed` and `produce` send.
    pub message: fn(u64) -> Vec<u8>,
}

impl Setup {
    /// With a broker of its own and a database of the shared server.
    pub async fn new(hint: &str, partitions: i32, overrides: &[(&str, &str)]) -> Setup {
        Setup::local(TestDb::create(hint).await, partitions, overrides).await
    }

    /// With a broker of its own and `db`.
    pub async fn local(db: TestDb, partitions: i32, overrides: &[(&str, &str)]) -> Setup {
        let kafka = Kafka::start();
        kafka.create_topic(TOPIC, partitions).await;
        let mut setup = Setup::with_brokers(db, &kafka.bootstrap_servers(), overrides).await;
        setup.kafka = Some(kafka);
        setup
    }

    /// With a broker of its own and a private MariaDB server (see `mariadb`), which the test
    /// may stop and start.
    pub async fn on_private_server(
        server_id: u32,
        hint: &str,
        partitions: i32,
        overrides: &[(&str, &str)],
    ) -> (MariaDb, Setup) {
        let server = MariaDb::start(server_id, &[]).await;
        let db = TestDb::create_on(&format!("mysql://root@127.0.0.1:{}", server.port), hint).await;
        let setup = Setup::local(db, partitions, overrides).await;
        (server, setup)
    }

    /// The broker this setup started.
    pub fn cluster(&self) -> &Kafka {
        self.kafka.as_ref().expect("a broker of this setup's own")
    }

    /// With a broker of its own, a database of the shared server, and the settings of
    /// `file` (which maps its own columns: no `seq` column is added), fed with `message`.
    pub async fn with_config(
        hint: &str,
        partitions: i32,
        file: &std::path::Path,
        message: fn(u64) -> Vec<u8>,
    ) -> Setup {
        Setup::with_config_and(hint, partitions, file, message, &[]).await
    }

    /// `with_config` with more settings, `(key, value)`, over the file's.
    pub async fn with_config_and(
        hint: &str,
        partitions: i32,
        file: &std::path::Path,
        message: fn(u64) -> Vec<u8>,
        overrides: &[(&str, &str)],
    ) -> Setup {
        let kafka = Kafka::start();
        kafka.create_topic(TOPIC, partitions).await;
        let brokers = kafka.bootstrap_servers();
        let db = TestDb::create(hint).await;
        let mut all = test_overrides(&brokers, GroupProtocol::Classic);
        all.extend_from_slice(overrides);
        let settings = db.settings_with_file(Some(file), &all);
        let mut setup = Setup::migrated(db, &brokers, settings).await;
        setup.kafka = Some(kafka);
        setup.file = Some(file.to_path_buf());
        setup.message = message;
        setup
    }

    /// With brokers that already hold the topic.
    pub async fn with_brokers(db: TestDb, brokers: &str, overrides: &[(&str, &str)]) -> Setup {
        Setup::with_protocol(db, brokers, GroupProtocol::Classic, overrides).await
    }

    /// [`Setup::with_brokers`], the workers' group under `protocol`.
    pub async fn with_protocol(
        db: TestDb,
        brokers: &str,
        protocol: GroupProtocol,
        overrides: &[(&str, &str)],
    ) -> Setup {
        let mut all = test_overrides(brokers, protocol);
        all.extend_from_slice(overrides);
        let mut settings = db.settings(&all);
        settings.store.columns.push(ColumnSpec {
            name: "seq".into(),
            pointer: "/seq".into(),
            column_type: ColumnType::Uint,
            length: None,
            truncate: false,
        });
        Setup::migrated(db, brokers, settings).await
    }

    /// Creates and migrates the database of `settings`: the log table, the fan-out tables and
    /// the rollups.
    async fn migrated(db: TestDb, brokers: &str, settings: Settings) -> Setup {
        // Logs of the workers, shown for failed tests (filter with RUST_LOG).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        db.migrate(&settings).await;
        Setup {
            db,
            kafka: None,
            brokers: brokers.to_string(),
            settings,
            file: None,
            message: log_line,
        }
    }

    /// Produces log messages with sequence numbers `from..to`, round-robin over `partitions`.
    pub fn produce(&self, from: u64, to: u64, partitions: i32) {
        produce_messages(&self.brokers, from, to, partitions, self.message);
    }

    /// Produces sequence numbers `from..to` from a blocking task, so the workers of this
    /// runtime go on meanwhile.
    pub async fn feed(&self, from: u64, to: u64, partitions: i32) {
        let brokers = self.brokers.clone();
        let message = self.message;
        tokio::task::spawn_blocking(move || {
            produce_messages(&brokers, from, to, partitions, message)
        })
        .await
        .unwrap();
    }

    pub fn produce_raw(&self, messages: Vec<Outgoing>) {
        produce_all(&self.brokers, TOPIC, messages).unwrap();
    }

    /// Starts a worker with service ID `service_id` as a task of this runtime.
    pub fn start_worker(&self, service_id: u32) -> Worker {
        Worker::start(&self.settings, service_id)
    }

    pub async fn count(&self, sql: &str) -> u64 {
        let mut conn = self.db.conn().await;
        let n: Option<u64> = conn.query_first(sql).await.unwrap();
        conn.disconnect().await.unwrap();
        n.unwrap_or(0)
    }

    /// Waits until `sql` counts at least `least`, failing after `within`.
    pub async fn wait_until_at_least(&self, sql: &str, least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.count(sql).await;
            if n >= least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{sql} counted {n}, not yet {least}, after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `sql` counts `expected`, failing after `within`.
    pub async fn wait_for(&self, sql: &str, expected: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.count(sql).await;
            if n == expected {
                return;
            }
            assert!(
                n < expected,
                "{sql} counted {n}, more than the {expected} expected"
            );
            assert!(
                Instant::now() < deadline,
                "{sql} counted {n} of {expected} after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every sequence number in `0..n` is stored exactly once, IDs are unique, and each ID's
    /// service ID is one of `service_ids`.
    pub async fn assert_exactly_once(&self, n: u64, service_ids: &[u32]) {
        let mut conn = self.db.conn().await;
        let (rows, seqs, low, high, ids): (u64, u64, Option<u64>, Option<u64>, u64) = conn
            .query_first(
                "SELECT COUNT(*), COUNT(DISTINCT seq), MIN(seq), MAX(seq), COUNT(DISTINCT id) FROM logs",
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (rows, seqs, ids),
            (n, n, n),
            "rows, distinct sequence numbers, distinct IDs"
        );
        if n > 0 {
            assert_eq!((low, high), (Some(0), Some(n - 1)));
        }
        let layout = self.settings.id.layout;
        let services: Vec<u64> = conn
            .query(format!(
                "SELECT DISTINCT (id >> {}) & {} FROM logs",
                layout.counter_bits(),
                (1u64 << layout.service_bits()) - 1
            ))
            .await
            .unwrap();
        for s in &services {
            assert!(
                service_ids.contains(&(*s as u32)),
                "service ID {s} is not one of {service_ids:?}"
            );
        }
        conn.disconnect().await.unwrap();
    }
}

pub const COUNT_ALL: &str = "SELECT COUNT(*) FROM logs";

/// The next offsets stored in MySQL, summed: with offsets from 0 and no gaps, the messages
/// committed (rows, dead letters and tombstones).
pub const SUM_OFFSETS: &str =
    "SELECT CAST(COALESCE(SUM(next_offset), 0) AS UNSIGNED) FROM ingest_offsets";

/// Produces log lines with sequence numbers `from..to`, round-robin over `partitions`.
pub fn produce_logs(brokers: &str, from: u64, to: u64, partitions: i32) {
    produce_messages(brokers, from, to, partitions, log_line);
}

/// Produces `message(seq)` for `seq` in `from..to`, round-robin over `partitions`.
pub fn produce_messages(
    brokers: &str,
    from: u64,
    to: u64,
    partitions: i32,
    message: fn(u64) -> Vec<u8>,
) {
    let messages = (from..to).map(|seq| Outgoing {
        partition: Some((seq % partitions as u64) as i32),
        key: None,
        payload: Some(message(seq)),
    });
    produce_all(brokers, TOPIC, messages).unwrap();
}

/// A JSON log line carrying its sequence number.
pub fn log_line(seq: u64) -> Vec<u8> {
    let level = ["info", "warn", "error"][(seq % 3) as usize];
    serde_json::to_vec(&json!({
        "seq": seq,
        "time": "2026-11-21T10:00:00.123Z",
        "level": level,
        "host": format!("host-{}", seq % 7),
        "service": "checkout",
        "message": format!("request {seq} served"),
    }))
    .unwrap()
}

/// A `logstamp ingest` process.
pub struct Process {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl Setup {
    /// A settings file for worker processes: this setup's database, cluster and columns.
    pub fn config_file(&self, name: &str) -> std::path::PathBuf {
        let s = &self.settings;
        let mut text = format!(
            "[mysql]\nurl = {:?}\n\n[kafka]\nbrokers = {:?}\ngroup_id = {:?}\n\n\
             [batch]\nlinger_ms = {}\nmax_rows = {}\n\n\
             [id]\nlease_ttl = \"10s\"\nauto_range = \"2-20\"\n\n\
             [store]\ngive_up_after = \"60s\"\n\n\
             [telemetry]\nlisten = \"127.0.0.1:0\"\n",
            s.mysql.url.expose(),
            s.kafka.brokers,
            s.kafka.group_id,
            s.batch.linger_ms,
            s.batch.max_rows,
        );
        text.push_str("\n[kafka.properties]\n");
        for (name, value) in &s.kafka.properties.0 {
            text.push_str(&format!("{name:?} = {value:?}\n"));
        }
        for c in &s.store.columns {
            text.push_str(&format!(
                "\n[[store.columns]]\nname = {:?}\npointer = {:?}\ntype = {:?}\n",
                c.name,
                c.pointer,
                serde_json::to_value(c.column_type)
                    .unwrap()
                    .as_str()
                    .unwrap()
            ));
            if let Some(length) = c.length {
                text.push_str(&format!("length = {length}\n"));
            }
        }
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&self.db.name);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.toml"));
        // Written aside and renamed into place: a worker started a moment ago may be reading
        // the file now, and must see the old text or the new, never half of one.
        let fresh = dir.join(format!("{name}.toml.new"));
        std::fs::write(&fresh, text).unwrap();
        std::fs::rename(&fresh, &path).unwrap();
        path
    }

    /// `logstamp ARGS` with this setup's `--config` file and settings (from `with_config`).
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"));
        if let Some(file) = &self.file {
            command.arg("--config").arg(file);
        }
        for (key, value) in self.process_overrides() {
            command.env(logstamp::config::env_var(&key), value);
        }
        command.args(args);
        command
    }

    /// Runs `logstamp ARGS` (see `command`) to its end, requiring success; its stdout.
    pub fn run_ok(&self, args: &[&str]) -> Vec<u8> {
        let output = self.command(args).output().unwrap();
        assert!(
            output.status.success(),
            "logstamp {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    /// Starts `logstamp ingest` (auto service ID, see `spawn_process`) and waits until it holds
    /// partitions, so it is past its start-up (a signal before then would find no handler).
    pub async fn spawn_process_holding_partitions(&self, run: usize) -> Process {
        let process = self.spawn_process("auto", run);
        process
            .wait_for_log(
                "assigned; reading from the offsets stored in MySQL partitions=logs/",
                Duration::from_secs(60),
            )
            .await;
        process
    }

    /// `kills` times: starts a `logstamp ingest` process (auto service ID), waits until it
    /// holds partitions, lets `sql` count a few thousand more, and kills it with SIGKILL.
    pub async fn kill_processes_at_random_points(&self, kills: usize, sql: &str, n: u64) {
        let mut rng = rand::rng();
        for run in 0..kills {
            let process = self.spawn_process_holding_partitions(run).await;
            // Somewhere within the next few batches.
            let now = self.count(sql).await;
            let target = (now + rng.random_range(500..6_000)).min(n);
            self.wait_until_at_least(sql, target, Duration::from_secs(60))
                .await;
            process.kill();
        }
    }

    /// The settings `config_file` writes, as `(key, value)` pairs for environment variables.
    fn process_overrides(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let mut all = vec![
            ("mysql.url".to_string(), s.mysql.url.expose().to_string()),
            ("kafka.brokers".into(), s.kafka.brokers.clone()),
            ("kafka.group_id".into(), s.kafka.group_id.clone()),
            ("kafka.topics".into(), s.kafka.topics.join(",")),
            (
                "ingest.format".into(),
                serde_json::to_value(s.ingest.format)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
            ),
            ("batch.linger_ms".into(), s.batch.linger_ms.to_string()),
            ("batch.max_rows".into(), s.batch.max_rows.to_string()),
            ("id.lease_ttl".into(), "10s".into()),
            ("id.auto_range".into(), "2-20".into()),
            ("store.give_up_after".into(), "60s".into()),
            ("telemetry.listen".into(), "127.0.0.1:0".into()),
        ];
        for (name, value) in &s.kafka.properties.0 {
            all.push((format!("kafka.properties.{name}"), value.clone()));
        }
        all
    }

    /// Starts `logstamp ingest` with `--service-id service_id` (a number or auto, which leases
    /// one of 2-20); its log goes to a file beside the settings.
    pub fn spawn_process(&self, service_id: &str, run: usize) -> Process {
        self.spawn_process_with(service_id, run, &[])
    }

    /// `spawn_process` with more settings, `(key, value)`, over the others.
    pub fn spawn_process_with(
        &self,
        service_id: &str,
        run: usize,
        overrides: &[(&str, &str)],
    ) -> Process {
        let written = self.config_file("worker");
        let log = written.with_file_name(format!("worker-{service_id}-{run}.log"));
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"));
        match &self.file {
            // The file's own settings, with this setup's database and cluster on top.
            Some(file) => {
                command.arg("--config").arg(file);
                for (key, value) in self.process_overrides() {
                    command.env(logstamp::config::env_var(&key), value);
                }
            }
            None => {
                command.arg("--config").arg(&written);
            }
        }
        for (key, value) in overrides {
            command.env(logstamp::config::env_var(key), value);
        }
        let child = command
            .args(["ingest", "--service-id", service_id])
            .env("RUST_LOG", "logstamp=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Process { child, log }
    }
}

impl Process {
    /// SIGTERM, then the exit status, within `within`.
    pub fn terminate(self, within: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        self.exit_within(within, "of SIGTERM")
    }

    /// The exit status, within `within` (`since` says of what, for the failure).
    pub fn exit_within(mut self, within: Duration, since: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "worker did not exit within {within:?} {since}; log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the log has a line containing `text`.
    pub async fn wait_for_log(&self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.lines().any(|line| line.contains(text)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {text:?} after {within:?}; log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no chance to flush or commit.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// A process still running when its test ends, as when the test fails, is killed with it,
/// not left writing to servers that are gone.
impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker running as a task.
pub struct Worker {
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), IngestError>>,
    pub stats: Arc<IngestStats>,
}

impl Worker {
    pub fn start(settings: &Settings, service_id: u32) -> Worker {
        let generator = Arc::new(IdGenerator::new(settings.id.layout, service_id).unwrap());
        let settings = settings.worker();
        let stats = Arc::new(IngestStats::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let stats = stats.clone();
            async move {
                ingest::run(&settings, generator, stats, async {
                    let _ = stopped.await;
                })
                .await
            }
        });
        Worker {
            stop: Some(stop),
            task,
            stats,
        }
    }

    /// Waits until the worker has partitions assigned, failing after `within`.
    pub async fn wait_for_partitions(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.stats.snapshot().partitions == 0 {
            assert!(
                Instant::now() < deadline,
                "no partition assigned after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asks for a graceful shutdown and waits for it.
    pub async fn stop(mut self) -> Result<(), IngestError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap()
    }
}

/// The first `count` messages of partition 0 of `topic`: (key, `reason` header).
pub fn read_topic(brokers: &str, topic: &str, count: usize) -> Vec<(String, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "read-topic")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = Vec::new();
    while read.len() < count {
        assert!(Instant::now() < deadline, "read {} of {count}", read.len());
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.unwrap();
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            let reason = message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "reason"))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            read.push((key, reason));
        }
    }
    read
}

/// The offsets `group` committed to Kafka for partitions `0..partitions` of the topic, in
/// partition order; 0 where none.
pub fn committed_in_kafka(brokers: &str, group: &str, partitions: i32) -> Vec<(i32, i64)> {
    committed_in_topic(brokers, group, TOPIC, partitions)
}

/// [`committed_in_kafka`] for `topic`.
pub fn committed_in_topic(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(i32, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => (e.partition(), o),
            _ => (e.partition(), 0),
        })
        .collect()
}
