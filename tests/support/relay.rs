//! The relay's end-to-end harness: private MariaDB servers (one per data centre, with a
//! binlog), an Apache Kafka broker process per data centre, and `logstamp relay run` as a child
//! process per data centre, so a test can kill it.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value as Sql};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use logstamp::id::{IdGenerator, Layout};
use logstamp::relay::change::{Change, Resume};
use logstamp::relay::gtid::GtidState;
use logstamp::relay::settings::LoopFilterMode;

use super::http::served_address;
use super::kafka::Kafka;
use super::mariadb::MariaDb;

/// How long relayed changes may take to arrive everywhere.
pub const DEADLINE: Duration = Duration::from_secs(120);

pub const ITEMS: &str = "CREATE TABLE app.items (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  service INT UNSIGNED NOT NULL,
  v INT NOT NULL,
  note VARCHAR(64) NOT NULL,
  amount DECIMAL(18,6) NULL,
  seen DATETIME(6) NOT NULL
) ENGINE=InnoDB";

/// One data centre: its server, its Kafka, and its relay process.
pub struct Dc {
    pub name: String,
    pub server: MariaDb,
    /// Its own Kafka, with its topic; none where it shares `brokers` with others.
    pub kafka: Option<Kafka>,
    pub brokers: String,
    /// `relay.topic_prefix`: the same for every data centre of a test.
    pub topic_prefix: String,
    pub dir: tempfile::TempDir,
    pub relay: Option<Child>,
    /// Where the running relay's lines start in its log (earlier runs wrote what is before).
    pub log_from: usize,
}

impl Dc {
    /// A server with the relay's tables and `ddl` run in it, and its topic on the test binary's
    /// shared Kafka.
    pub async fn new(name: &str, server_id: u32, ddl: &[&str]) -> Dc {
        Dc::with_server(name, MariaDb::start(server_id, &[]).await, ddl).await
    }

    /// [`Dc::new`] with a server of the test's.
    pub async fn with_server(name: &str, server: MariaDb, ddl: &[&str]) -> Dc {
        Dc::with_test_topic(name, server, ddl, None).await
    }

    /// [`Dc::new`] with a Kafka of its own, for a test that stops it.
    pub async fn with_own_kafka(name: &str, server_id: u32, ddl: &[&str]) -> Dc {
        let server = MariaDb::start(server_id, &[]).await;
        Dc::with_test_topic(name, server, ddl, Some(Kafka::start())).await
    }

    /// Its topic under the test's prefix, on `kafka` or else the shared node.
    async fn with_test_topic(
        name: &str,
        server: MariaDb,
        ddl: &[&str],
        kafka: Option<Kafka>,
    ) -> Dc {
        let prefix = test_topic_prefix();
        let node = kafka.as_ref().unwrap_or_else(|| Kafka::shared());
        node.create_topic(&format!("{prefix}{name}"), 1).await;
        let brokers = node.bootstrap_servers();
        let mut dc = Dc::with_kafka(name, server, ddl, brokers, kafka).await;
        dc.topic_prefix = prefix;
        dc
    }

    /// A server with the relay's tables and `ddl` run in it, using the Kafka at `brokers` and
    /// the default topic prefix.
    pub async fn with_kafka(
        name: &str,
        server: MariaDb,
        ddl: &[&str],
        brokers: String,
        kafka: Option<Kafka>,
    ) -> Dc {
        let mut conn = server.conn().await;
        for statement in [
            "CREATE DATABASE logstamp",
            "CREATE DATABASE app",
            "CREATE DATABASE audit",
        ]
        .iter()
        .chain(ddl)
        {
            conn.query_drop(*statement).await.unwrap();
        }
        conn.query_drop("USE logstamp").await.unwrap();
        logstamp::store::migrate::apply(&mut conn, &logstamp::store::migrate::builtin().unwrap())
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        Dc {
            name: name.to_string(),
            server,
            kafka,
            brokers,
            topic_prefix: topic(""),
            dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
            relay: None,
            log_from: 0,
        }
    }

    /// Writes this data centre's settings: its server and Kafka, and every other as a remote.
    /// `checkpoint_interval`: how often capture records its position (a long one leaves more
    /// to publish again after a kill).
    pub fn configure(
        &self,
        remotes: &[(&str, String)],
        mode: LoopFilterMode,
        checkpoint_interval: &str,
    ) {
        let mut text = format!(
            "[mysql]\nurl = \"{}\"\n[kafka]\nbrokers = \"{}\"\n[relay]\ndc = \"{}\"\n\
             server_id = {}\ntables = [\"app.*\"]\nloop_filter = \"{mode}\"\n\
             checkpoint_interval = \"{checkpoint_interval}\"\ntopic_prefix = \"{}\"\n\
             [telemetry]\nlisten = \"127.0.0.1:0\"\n",
            self.server.url("logstamp"),
            self.brokers,
            self.name,
            9000 + self.server.server_id,
            self.topic_prefix,
        );
        for (dc, brokers) in remotes {
            text.push_str(&format!(
                "[[relay.remotes]]\ndc = \"{dc}\"\nbrokers = \"{brokers}\"\n"
            ));
        }
        std::fs::write(self.dir.path().join("relay.toml"), text).unwrap();
    }

    pub fn start_relay(&mut self) {
        assert!(self.relay.is_none(), "the relay of {} runs", self.name);
        self.log_from = self.log().len();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("relay.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .arg("--config")
            .arg(self.dir.path().join("relay.toml"))
            .args(["relay", "run"])
            .env("RUST_LOG", "logstamp=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.relay = Some(child);
    }

    /// Kills the relay the hard way: nothing is flushed or recorded.
    pub fn kill_relay(&mut self) {
        let mut child = self.relay.take().expect("a running relay");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops the relay with SIGTERM and checks it exits cleanly.
    pub async fn stop_relay(&mut self) {
        let mut child = self.relay.take().expect("a running relay");
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the relay of {} did not stop",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            status.success(),
            "the relay of {} exited with {status}: {}",
            self.name,
            self.log()
        );
    }

    /// `logstamp relay ARGS` with this data centre's settings, to be run.
    pub fn relay_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_logstamp"));
        command
            .arg("--config")
            .arg(self.dir.path().join("relay.toml"))
            .arg("relay")
            .args(args);
        command
    }

    /// `logstamp relay status` as JSON lines.
    pub fn status(&self) -> Vec<serde_json::Value> {
        let output = self.relay_command(&["status"]).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
            .stdout
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            .collect()
    }

    /// Where the running relay serves its metrics and health (it takes a free port).
    pub async fn telemetry(&self) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(address) = served_address(&self.log()[self.log_from..]) {
                return address;
            }
            assert!(
                Instant::now() < deadline,
                "the relay of {} names no telemetry address",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("relay.log")).unwrap_or_default()
    }

    /// Runs `relay run` until it exits by itself, which it must within [`DEADLINE`]: its exit
    /// code and what it wrote.
    pub async fn run_until_exit(&self) -> (Option<i32>, String) {
        let errors = self.dir.path().join("exit.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .arg("--config")
            .arg(self.dir.path().join("relay.toml"))
            .args(["relay", "run"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the relay of {} did not stop: {}",
                    self.name,
                    std::fs::read_to_string(&errors).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        (status.code(), std::fs::read_to_string(&errors).unwrap())
    }

    /// `logstamp relay reset` here: the line it prints.
    pub fn reset(&self) -> serde_json::Value {
        let output = self.relay_command(&["reset"]).output().unwrap();
        assert!(
            output.status.success(),
            "relay reset in {}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// Waits until `relay status` here shows every applier with nothing left to apply.
    pub async fn wait_appliers_caught_up(&self) {
        wait_until(
            &format!("the appliers of {} catch up", self.name),
            || async {
                let lines = self.status();
                let behind: Vec<_> = lines
                    .iter()
                    .filter(|l| l["part"] == "apply" && l["behind_messages"] != 0)
                    .collect();
                if behind.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{behind:?}"))
                }
            },
        )
        .await;
    }

    /// Waits until `relay status` here shows capture has read all its server wrote.
    pub async fn wait_capture_caught_up(&self) {
        wait_until(
            &format!("the capture of {} catches up", self.name),
            || async {
                let lines = self.status();
                match lines.iter().find(|l| l["part"] == "capture") {
                    Some(c) if c["behind_transactions"] == 0 => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    /// Waits until this data centre applied at least `transactions` of `source`'s.
    pub async fn wait_applied(&self, source: &str, transactions: u64) {
        wait_until(
            &format!("{} applies {transactions} of {source}'s", self.name),
            || async {
                let (applied, _) = self.applied(source).await;
                if applied >= transactions {
                    Ok(())
                } else {
                    Err(format!("{applied} applied"))
                }
            },
        )
        .await;
    }

    pub async fn conn(&self) -> Conn {
        self.server.conn().await
    }

    /// The `id`s of `table` (an INT key), in order.
    pub async fn ids_of(&self, table: &str) -> Vec<i32> {
        self.conn()
            .await
            .query(format!("SELECT id FROM {table} ORDER BY id"))
            .await
            .unwrap()
    }

    /// Waits until capture recorded where it starts: writes before that are not relayed.
    pub async fn wait_capture_started(&self) {
        wait_until(&format!("capture of {} starts", self.name), || async {
            let mut conn = self.conn().await;
            let n: Option<u64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM logstamp.relay_checkpoints WHERE dc = ?",
                    (&self.name,),
                )
                .await
                .map_err(|e| e.to_string())?;
            if n == Some(1) {
                Ok(())
            } else {
                Err("no checkpoint yet".into())
            }
        })
        .await;
    }

    /// Every row of `table`, ordered by its primary key.
    pub async fn rows(&self, table: &str) -> Vec<Vec<Sql>> {
        let mut conn = self.conn().await;
        let rows: Vec<mysql_async::Row> = conn
            .query(format!("SELECT * FROM {table} ORDER BY 1"))
            .await
            .unwrap();
        rows.into_iter().map(|r| r.unwrap()).collect()
    }

    /// `relay_applied` of `source`: (applied transactions, applied changes).
    pub async fn applied(&self, source: &str) -> (u64, u64) {
        let mut conn = self.conn().await;
        let row: Option<(u64, u64)> = conn
            .exec_first(
                "SELECT applied_transactions, applied_changes FROM logstamp.relay_applied \
                 WHERE source_dc = ?",
                (source,),
            )
            .await
            .unwrap();
        row.unwrap_or((0, 0))
    }

    /// This data centre's topic.
    pub fn topic(&self) -> String {
        format!("{}{}", self.topic_prefix, self.name)
    }

    /// The changes in this data centre's topic, by offset, without capture's resume messages.
    pub fn published(&self) -> Vec<Change> {
        self.published_payloads()
            .iter()
            .filter(|payload| Resume::from_json(payload).is_none())
            .map(|payload| Change::from_json(payload).unwrap())
            .collect()
    }

    /// Produces `payload` onto the end of this data centre's topic, as another producer would.
    pub fn produce(&self, payload: Vec<u8>) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .unwrap();
        let topic = self.topic();
        producer
            .send(
                BaseRecord::<(), [u8]>::to(&topic)
                    .partition(0)
                    .payload(&payload),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
    }

    /// Every message in this data centre's topic, as its bytes, by offset.
    pub fn published_payloads(&self) -> Vec<Vec<u8>> {
        self.topic_messages().into_iter().map(|m| m.value).collect()
    }

    /// Every message in this data centre's topic, by offset, with its signature header.
    pub fn topic_messages(&self) -> Vec<TopicMessage> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", "relay-test")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let topic = self.topic();
        let (_, end) = consumer
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .unwrap();
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&topic, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&assignment).unwrap();
        let mut found = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        while (found.len() as i64) < end {
            assert!(Instant::now() < deadline, "reading {topic} stalled");
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                let message = message.unwrap();
                assert_eq!(message.offset(), found.len() as i64, "{topic} has a gap");
                let signature = message.headers().and_then(|headers| {
                    headers
                        .iter()
                        .find(|h| h.key == "logstamp-signature")
                        .map(|h| String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
                });
                found.push(TopicMessage {
                    offset: message.offset(),
                    value: message.payload().unwrap_or_default().to_vec(),
                    signature,
                });
            }
        }
        found
    }
}

/// A message of a data centre's topic as read.
#[derive(Debug)]
pub struct TopicMessage {
    pub offset: i64,
    pub value: Vec<u8>,
    /// Its `logstamp-signature` header.
    pub signature: Option<String>,
}

impl Drop for Dc {
    fn drop(&mut self) {
        if let Some(mut child) = self.relay.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- relay log of {} (last lines) ---", self.name);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Data centres a and b, with `ddl` run in both.
pub async fn two_dcs(ddl: &str) -> Vec<Dc> {
    vec![Dc::new("a", 1, &[ddl]).await, Dc::new("b", 2, &[ddl]).await]
}

/// `dc`'s topic with the default `relay.topic_prefix`.
pub fn topic(dc: &str) -> String {
    format!("logstamp-relay-{dc}")
}

/// The topic prefix of the data centres a test makes on the shared Kafka, apart from other
/// tests': one per test thread (the test harness runs each test on a thread of its own).
fn test_topic_prefix() -> String {
    static THREADS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
    let mut threads = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let this = std::thread::current().id();
    let n = match threads.iter().position(|t| *t == this) {
        Some(n) => n,
        None => {
            threads.push(this);
            threads.len() - 1
        }
    };
    format!("{}t{n}-", topic(""))
}

/// Writes every data centre's settings (each applies all the others) and starts the relays,
/// waiting until each capture has its starting point.
pub async fn start_relays(dcs: &mut [Dc], mode: LoopFilterMode, checkpoint_interval: &str) {
    start_relays_with(dcs, mode, checkpoint_interval, "").await;
}

/// [`start_relays`], with `relay` (TOML lines) added to each data centre's `[relay]` section.
pub async fn start_relays_with(
    dcs: &mut [Dc],
    mode: LoopFilterMode,
    checkpoint_interval: &str,
    relay: &str,
) {
    configure_all(dcs, mode, checkpoint_interval);
    for dc in dcs.iter_mut() {
        add_relay_settings(dc, relay);
        dc.start_relay();
    }
    for dc in dcs.iter() {
        dc.wait_capture_started().await;
    }
}

/// Writes every data centre's settings, each with all the others as its remotes.
pub fn configure_all(dcs: &mut [Dc], mode: LoopFilterMode, checkpoint_interval: &str) {
    let all: Vec<(String, String)> = dcs
        .iter()
        .map(|d| (d.name.clone(), d.brokers.clone()))
        .collect();
    for dc in dcs.iter_mut() {
        let remotes: Vec<(&str, String)> = all
            .iter()
            .filter(|(name, _)| *name != dc.name)
            .map(|(name, brokers)| (name.as_str(), brokers.clone()))
            .collect();
        dc.configure(&remotes, mode, checkpoint_interval);
    }
}

/// Polls `check` until it passes; fails with its last reason after [`DEADLINE`].
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("{what}: still {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// An ingest-like writer with its own service ID: inserts rows with its IDs, updates and
/// deletes its own rows, one transaction per operation (some with several changes), at most
/// one per `pace` if given. Returns the number of transactions it committed.
pub async fn writer(
    url: String,
    service_id: u32,
    transactions: usize,
    seed: u64,
    pace: Option<Duration>,
) -> u64 {
    write_until_error(url, service_id, transactions, seed, pace)
        .await
        .unwrap_or_else(|(n, e)| panic!("writer {service_id} failed after {n} transactions: {e}"))
}

/// [`writer`], stopping at the first statement that fails (its server went away): the
/// transactions committed by then, and the error.
pub async fn write_until_error(
    url: String,
    service_id: u32,
    transactions: usize,
    seed: u64,
    pace: Option<Duration>,
) -> Result<u64, (u64, mysql_async::Error)> {
    let mut ticks = pace.map(tokio::time::interval);
    let ids = IdGenerator::new(Layout::new(10, 0).unwrap(), service_id).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut conn = Conn::from_url(url).await.map_err(|e| (0, e))?;
    let mut live: Vec<u64> = Vec::new();
    let insert = "INSERT INTO app.items (id, service, v, note, amount, seen) \
                  VALUES (?, ?, 0, ?, ?, NOW(6))";
    for n in 0..transactions {
        if let Some(ticks) = &mut ticks {
            ticks.tick().await;
        }
        let failed = |e| (n as u64, e);
        let choice = rng.random_range(0..10);
        let note = format!("w{service_id} n{n} 😀");
        let amount = format!(
            "{}.{:06}",
            rng.random_range(-999..999),
            rng.random_range(0..999_999)
        );
        if live.is_empty() || choice < 4 {
            let id = ids.next_id().unwrap();
            conn.exec_drop(insert, (id, service_id, &note, &amount))
                .await
                .map_err(failed)?;
            live.push(id);
        } else if choice < 7 {
            let id = live[rng.random_range(0..live.len())];
            conn.exec_drop(
                "UPDATE app.items SET v = v + 1, note = ? WHERE id = ?",
                (&note, id),
            )
            .await
            .map_err(failed)?;
        } else if choice < 8 {
            let id = live.swap_remove(rng.random_range(0..live.len()));
            conn.exec_drop("DELETE FROM app.items WHERE id = ?", (id,))
                .await
                .map_err(failed)?;
        } else {
            // Several changes in one transaction.
            let id = ids.next_id().unwrap();
            let other = live[rng.random_range(0..live.len())];
            let mut tx = conn
                .start_transaction(Default::default())
                .await
                .map_err(failed)?;
            tx.exec_drop(insert, (id, service_id, &note, &amount))
                .await
                .map_err(failed)?;
            tx.exec_drop(
                "UPDATE app.items SET v = v + 10, amount = NULL WHERE id = ?",
                (other,),
            )
            .await
            .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            live.push(id);
        }
    }
    conn.disconnect()
        .await
        .map_err(|e| (transactions as u64, e))?;
    Ok(transactions as u64)
}

/// Runs two writers per data centre at once; returns each data centre's transactions.
pub async fn write_everywhere(dcs: &[Dc], per_writer: usize) -> Vec<u64> {
    let mut tasks = Vec::new();
    for (i, dc) in dcs.iter().enumerate() {
        for w in 0..2u32 {
            let service_id = (i as u32) * 10 + w + 1;
            tasks.push((
                i,
                tokio::spawn(writer(
                    dc.server.url("app"),
                    service_id,
                    per_writer,
                    u64::from(service_id),
                    None,
                )),
            ));
        }
    }
    let mut local = vec![0; dcs.len()];
    for (i, task) in tasks {
        local[i] += task.await.unwrap();
    }
    local
}

/// Waits until every data centre applied every other's transactions and all hold the same rows.
pub async fn wait_in_sync(dcs: &[Dc], local: &[u64], table: &str) {
    wait_until("all data centres in sync", || async {
        for dc in dcs {
            for (j, source) in dcs.iter().enumerate() {
                if source.name != dc.name {
                    let (applied, _) = dc.applied(&source.name).await;
                    if applied < local[j] {
                        return Err(format!(
                            "{} applied {applied} of {}'s {}",
                            dc.name, source.name, local[j]
                        ));
                    }
                }
            }
        }
        let first = dcs[0].rows(table).await;
        for dc in &dcs[1..] {
            if dc.rows(table).await != first {
                return Err(format!(
                    "{table} differs between {} and {}",
                    dcs[0].name, dc.name
                ));
            }
        }
        Ok(())
    })
    .await;
}

/// Waits until `a` and `b` hold the same rows in `table`.
pub async fn wait_same_rows(a: &Dc, b: &Dc, table: &str) {
    wait_until(
        &format!("{table} is the same in {} and {}", a.name, b.name),
        || async {
            let (here, there) = (a.rows(table).await, b.rows(table).await);
            if here == there {
                Ok(())
            } else {
                Err(format!("{} rows and {} rows", here.len(), there.len()))
            }
        },
    )
    .await;
}

/// Replaces the rows of `table` in `to` with those of `from`, as a dump loaded after a
/// `TRUNCATE` would.
pub async fn copy_table(from: &Dc, to: &Dc, table: &str) {
    let rows = from.rows(table).await;
    let mut conn = to.conn().await;
    conn.query_drop(format!("TRUNCATE TABLE {table}"))
        .await
        .unwrap();
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    for row in rows {
        let marks = vec!["?"; row.len()].join(", ");
        tx.exec_drop(format!("INSERT INTO {table} VALUES ({marks})"), row)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// The sequence number of a one-domain GTID position (`0-1-42`: 42).
pub fn seq_of(gtid_pos: &str) -> u64 {
    let state: GtidState = gtid_pos.parse().unwrap();
    state.get(0).expect("a GTID in domain 0").seq
}

/// Nothing looped and nothing was applied twice: each topic holds exactly its data centre's
/// own transactions, and each data centre applied exactly the others'.
pub async fn assert_exactly_once(dcs: &[Dc], local: &[u64]) {
    for (i, dc) in dcs.iter().enumerate() {
        let published = dc.published();
        // A transaction's end is on its last message (the others say how far capture had read).
        let positions: BTreeSet<(String, u64)> = published
            .iter()
            .filter(|c| c.txn.is_last())
            .map(|c| (c.position.file.clone(), c.position.pos))
            .collect();
        assert_eq!(
            positions.len() as u64,
            local[i],
            "transactions {} published",
            dc.name
        );
        assert!(
            published
                .iter()
                .all(|c| c.dc == dc.name && c.server_id == dc.server.server_id),
            "{}'s topic holds changes made elsewhere",
            dc.name
        );
        for (j, source) in dcs.iter().enumerate() {
            if j != i {
                let (applied, _) = dc.applied(&source.name).await;
                assert_eq!(
                    applied, local[j],
                    "{} applied from {}",
                    dc.name, source.name
                );
            }
        }
    }
}

pub async fn two_dcs_writing_at_once(mode: LoopFilterMode) {
    let mut dcs = two_dcs(ITEMS).await;
    start_relays(&mut dcs, mode, "100ms").await;
    let local = write_everywhere(&dcs, 120).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    assert_exactly_once(&dcs, &local).await;
    // `relay status` agrees: nothing behind, every transaction applied.
    wait_until("status shows a caught up", || async {
        let lines = dcs[0].status();
        let capture = &lines[0];
        let apply = &lines[1];
        let caught_up = capture["part"] == "capture"
            && capture["behind_transactions"] == 0
            && capture["lag_seconds"] == 0
            && apply["part"] == "apply"
            && apply["source_dc"] == "b"
            && apply["behind_messages"] == 0
            && apply["lag_seconds"] == 0
            && apply["applied_transactions"] == local[1]
            && apply["last_error"].is_null();
        if caught_up {
            Ok(())
        } else {
            Err(format!("{lines:?}"))
        }
    })
    .await;
    // The checkpoints count the same, and a stop is clean.
    for (i, dc) in dcs.iter_mut().enumerate() {
        dc.stop_relay().await;
        let mut conn = dc.conn().await;
        let published: Option<u64> = conn
            .exec_first(
                "SELECT published_transactions FROM logstamp.relay_checkpoints WHERE dc = ?",
                (&dc.name,),
            )
            .await
            .unwrap();
        assert_eq!(published, Some(local[i]), "checkpoint of {}", dc.name);
    }
}

/// What `logstamp relay verify` did: its exit code, its JSON lines and its stderr.
pub struct Verified {
    pub code: Option<i32>,
    pub lines: Vec<serde_json::Value>,
    pub stderr: String,
}

impl Verified {
    /// The lines of one `status` (`diverged`, `in_flight`, `summary`).
    pub fn with_status(&self, status: &str) -> Vec<&serde_json::Value> {
        self.lines
            .iter()
            .filter(|l| l["status"] == status)
            .collect()
    }
}

impl Dc {
    /// Runs `logstamp relay verify ARGS` here, with this data centre's relay settings and each
    /// of `others` as a remote whose database is given by its url; its output is JSON lines.
    pub fn verify(&self, others: &[&Dc], args: &[&str]) -> Verified {
        let output = self.verify_output(others, args);
        Verified {
            code: output.status.code(),
            lines: output
                .stdout
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .map(|line| serde_json::from_slice(line).unwrap())
                .collect(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// [`Dc::verify`]'s process output as it is.
    pub fn verify_output(&self, others: &[&Dc], args: &[&str]) -> std::process::Output {
        self.verify_command(others, args).output().unwrap()
    }

    /// `logstamp relay verify ARGS` as [`Dc::verify`] runs it, to be started.
    pub fn verify_command(&self, others: &[&Dc], args: &[&str]) -> Command {
        let mut text = std::fs::read_to_string(self.dir.path().join("relay.toml")).unwrap();
        for other in others {
            let entry = format!("[[relay.remotes]]\ndc = \"{}\"\n", other.name);
            assert!(
                text.contains(&entry),
                "{} is no remote of {}",
                other.name,
                self.name
            );
            let with_url = format!("{entry}url = \"{}\"\n", other.server.url("logstamp"));
            text = text.replace(&entry, &with_url);
        }
        let config = self.dir.path().join("verify.toml");
        std::fs::write(&config, text).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_logstamp"));
        command
            .arg("--config")
            .arg(&config)
            .args(["relay", "verify"])
            .args(args);
        command
    }
}

/// Adds `lines` (TOML) to the `[relay]` section of the settings [`Dc::configure`] wrote.
pub fn add_relay_settings(dc: &Dc, lines: &str) {
    let path = dc.dir.path().join("relay.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("[relay]\n"), "{text}");
    let text = text.replacen("[relay]\n", &format!("[relay]\n{lines}\n"), 1);
    std::fs::write(path, text).unwrap();
}

/// The rows of `table` in `dc`.
pub async fn count(dc: &Dc, table: &str) -> u64 {
    let mut conn = dc.conn().await;
    let n: Option<u64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {table}"))
        .await
        .unwrap();
    n.unwrap()
}

/// A table with a column of every kind the relay carries.
pub const EVERY_KIND: &str = "CREATE TABLE app.vals (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    i TINYINT NULL, u INT UNSIGNED NULL, m MEDIUMINT NULL,
    d DECIMAL(65,30) NULL, f FLOAT NULL, g DOUBLE NULL,
    dt DATETIME(6) NULL, dt0 DATETIME NULL, ts TIMESTAMP(3) NULL, tm TIME(4) NULL,
    dd DATE NULL, y YEAR NULL, bt BIT(10) NULL,
    e ENUM('red','green') NULL, st SET('x','y','z') NULL,
    j JSON NULL, s VARCHAR(32) NULL, t TEXT NULL, c CHAR(4) NULL,
    l1 VARCHAR(8) CHARACTER SET latin1 NULL,
    b BLOB NULL, vb VARBINARY(8) NULL, bn BINARY(4) NULL
) ENGINE=InnoDB";

/// Inserts row `id` of [`EVERY_KIND`], each column at an edge of its type; `conn` is in UTC,
/// as the relay reads and writes TIMESTAMP values.
pub async fn insert_every_kind(conn: &mut Conn, id: u64) {
    let every_byte: Vec<u8> = (0..=255).collect();
    conn.exec_drop(
        "INSERT INTO app.vals VALUES (?, -128, 4294967295, -8388608, \
         '-12345678901234567890123456789012345.123456789012345678901234567890', 0.1, \
         -1.7976931348623157e308, '2038-01-19 03:14:08.123456', '1000-01-01 00:00:00', \
         '2024-02-29 23:59:59.999', '-838:59:58.9999', '9999-12-31', 2155, b'1000000001', \
         'green', 'x,z', ?, '😀 4-byte', ?, 'ab', 'é', ?, X'000102', X'01000000')",
        (
            id,
            r#"{"a": [1, 2.50, "\u00e9"], "b": null}"#,
            "tab\tnew\nline \\ quote' end",
            every_byte,
        ),
    )
    .await
    .unwrap();
}
