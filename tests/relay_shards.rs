//! The relay with shards: two data centres of two shards each (four private MariaDB servers),
//! each with its own Apache Kafka, its own coordination database and a `logstamp ingest`
//! worker, and one `logstamp relay run --shard N` per shard. Shard N of one data centre sends
//! its changes to shard N of the other. A partition is moved between shards in one data centre
//! while a relay of it is SIGKILLed; then, checked with plain SQL on the servers: each pair of
//! shards holds the same rows, each data centre's shards hold every message of both once, no
//! applier met a conflict (a change applied twice, or sent back, would meet its own row), and
//! `relay verify` and `relay status` cover every shard.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use support::ingest::{Process, Setup};
use support::mariadb::MariaDb;

const PARTITIONS: i32 = 4;
/// The shards' database, named alike in both data centres: the relay applies a change to the
/// table of the same schema and name.
const SHARD_DB: &str = "logstamp_shard";
/// Messages each data centre's worker ingests.
const PER_DC: u64 = 3_000;

/// One data centre: its shards, Kafka, coordination database and settings file.
struct Dc {
    name: &'static str,
    servers: Vec<MariaDb>,
    setup: Setup,
    config: PathBuf,
    /// Its IDs' service range, apart from the other data centre's so IDs never collide.
    auto_range: &'static str,
    relays: Vec<Option<Process>>,
}

impl Dc {
    async fn start(name: &'static str, first_server_id: u32, auto_range: &'static str) -> Dc {
        let mut servers = Vec::new();
        for i in 0..2 {
            servers.push(MariaDb::start(first_server_id + i, &[]).await);
        }
        let shards = shard_urls(&servers).join(",");
        let db = support::TestDb::create(&format!("relay_shards_{name}")).await;
        let setup = Setup::local(db, PARTITIONS, &[("store.shards", shards.as_str())]).await;
        let config = setup.config_file("fleet");
        Dc {
            name,
            servers,
            setup,
            config,
            auto_range,
            relays: Vec::new(),
        }
    }

    /// Adds the relay's settings, with `remote` as the other data centre, to the settings file.
    fn add_relay_settings(&self, remote: &Dc) {
        let remote_shards = shard_urls(&remote.servers)
            .iter()
            .map(|u| format!("{u:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let relay = format!(
            "\n[relay]\ndc = {:?}\nserver_id = {}\ntables = [\"{SHARD_DB}.logs\"]\n\
             checkpoint_interval = \"200ms\"\n\n\
             [[relay.remotes]]\ndc = {:?}\nbrokers = {:?}\nshards = [{remote_shards}]\n",
            self.name,
            9000 + self.servers[0].server_id,
            remote.name,
            remote.setup.brokers,
        );
        let mut text = std::fs::read_to_string(&self.config).unwrap();
        text.push_str(&relay);
        std::fs::write(&self.config, text).unwrap();
    }

    /// `logstamp ARGS` with this data centre's settings.
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"));
        command
            .arg("--config")
            .arg(&self.config)
            .env(
                logstamp::config::env_var("store.shards"),
                shard_urls(&self.servers).join(","),
            )
            .env(logstamp::config::env_var("id.auto_range"), self.auto_range)
            .args(args);
        command
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        self.command(args).output().unwrap()
    }

    fn run_ok(&self, args: &[&str]) -> Vec<u8> {
        let output = self.output(args);
        assert!(
            output.status.success(),
            "{}: logstamp {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    /// A long-running `logstamp ARGS`, its log in a file named `log`.
    fn spawn(&self, args: &[&str], log: &str) -> Process {
        let log = self.config.with_file_name(log);
        let child = self
            .command(args)
            .env("RUST_LOG", "logstamp=info")
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        Process { child, log }
    }

    fn start_relay(&mut self, shard: usize) {
        let relay = self.spawn(
            &["relay", "run", "--shard", &shard.to_string()],
            &format!("relay-{shard}.log"),
        );
        if self.relays.len() <= shard {
            self.relays.resize_with(shard + 1, || None);
        }
        assert!(self.relays[shard].replace(relay).is_none());
    }

    async fn shard_conn(&self, shard: usize) -> mysql_async::Conn {
        mysql_async::Conn::from_url(self.servers[shard].url(SHARD_DB))
            .await
            .unwrap()
    }

    /// Each shard's `(id, seq)` rows, in ID order.
    async fn rows(&self, shard: usize) -> Vec<(u64, u64)> {
        let mut conn = self.shard_conn(shard).await;
        let rows = conn
            .query("SELECT id, seq FROM logs ORDER BY id")
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        rows
    }

    async fn stored(&self) -> u64 {
        let mut total = 0;
        for shard in 0..self.servers.len() {
            total += self.rows(shard).await.len() as u64;
        }
        total
    }

    async fn wait_stored(&self, least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let stored = self.stored().await;
            if stored >= least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {stored} rows over the shards, not yet {least}, after {within:?}; {}",
                self.name,
                self.relay_logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn relay_logs(&self) -> String {
        self.relays
            .iter()
            .flatten()
            .map(|r| {
                format!(
                    "{}:\n{}",
                    r.log.display(),
                    std::fs::read_to_string(&r.log).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `relay status`: a JSON object a line, for every shard.
    fn status(&self) -> Vec<serde_json::Value> {
        support::json_lines_in(&self.run_ok(&["relay", "status"]))
    }
}

fn shard_urls(servers: &[MariaDb]) -> Vec<String> {
    servers.iter().map(|s| s.url(SHARD_DB)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_data_centres_of_two_shards_stay_identical_through_a_move_and_a_relay_kill() {
    let mut a = Dc::start("a", 401, "2-20").await;
    let mut b = Dc::start("b", 411, "30-50").await;
    a.add_relay_settings(&b);
    b.add_relay_settings(&a);
    for dc in [&a, &b] {
        let migrated = String::from_utf8(dc.run_ok(&["migrate"])).unwrap();
        assert_eq!(
            migrated.matches("\"role\":\"shard\"").count(),
            2,
            "{migrated}"
        );
    }
    // A relay per shard is required, and named by position or name.
    let unnamed = a.output(&["relay", "run"]);
    assert!(!unnamed.status.success());
    let said = String::from_utf8_lossy(&unnamed.stderr);
    assert!(
        said.contains("--shard") && said.contains("each runs a relay of its own"),
        "{said}"
    );
    for dc in [&mut a, &mut b] {
        for shard in 0..2 {
            dc.start_relay(shard);
        }
    }
    // A capture's first start begins at its server's position then: what is written before
    // it would be for a snapshot to copy.
    for dc in [&a, &b] {
        for relay in dc.relays.iter().flatten() {
            relay
                .wait_for_log("capture started", Duration::from_secs(60))
                .await;
        }
    }

    // Each data centre's worker ingests its own messages (sequence numbers apart).
    let mut workers = Vec::new();
    for (dc, first) in [(&a, 0), (&b, PER_DC)] {
        dc.setup.produce(first, first + PER_DC / 2, PARTITIONS);
        let worker = dc.spawn(&["ingest", "--service-id", "auto"], "worker.log");
        workers.push(worker);
    }
    a.wait_stored(PER_DC / 4, Duration::from_secs(120)).await;

    // A partition moves to the other shard in a, while a's relay of that shard is killed.
    let assigned = support::json_lines_in(&a.run_ok(&["shards", "list"]));
    let from: usize = assigned
        .iter()
        .find(|row| row["topic"] == "logs" && row["partition"] == 0)
        .and_then(|row| row["shard"].as_str())
        .map(|name| {
            shard_urls(&a.servers)
                .iter()
                .position(|u| u.ends_with(name))
                .unwrap_or_else(|| panic!("shard {name} not among a's: {assigned:?}"))
        })
        .unwrap_or_else(|| panic!("partition 0 not placed: {assigned:?}"));
    a.relays[from].take().unwrap().kill();
    let to = 1 - from;
    let moved: serde_json::Value = serde_json::from_slice(&a.run_ok(&[
        "shards",
        "move",
        "logs",
        "0",
        "--to",
        &to.to_string(),
    ]))
    .unwrap();
    assert_eq!(moved["partition"], 0, "{moved}");
    for (dc, first) in [(&a, 0), (&b, PER_DC)] {
        dc.setup
            .produce(first + PER_DC / 2, first + PER_DC, PARTITIONS);
    }
    a.start_relay(from);

    // Every message of both data centres, in each.
    for dc in [&a, &b] {
        dc.wait_stored(2 * PER_DC, Duration::from_secs(180)).await;
    }
    // The moved partition's later rows are in its new shard in a, and so in b's same shard.
    let mut moved_rows = a.shard_conn(to).await;
    let later: Option<u64> = moved_rows
        .query_first(format!(
            "SELECT COUNT(*) FROM logs WHERE seq % {PARTITIONS} = 0 AND seq < {PER_DC} \
             AND seq >= {}",
            PER_DC / 2
        ))
        .await
        .unwrap();
    moved_rows.disconnect().await.unwrap();
    assert!(
        later.unwrap_or(0) > 0,
        "no row of partition 0 reached shard {to} after the move"
    );

    for shard in 0..2 {
        let here = a.rows(shard).await;
        let there = b.rows(shard).await;
        assert_eq!(
            here.len(),
            there.len(),
            "shard {shard}: a holds {} rows, b {}",
            here.len(),
            there.len()
        );
        assert!(here == there, "shard {shard} differs between a and b");
    }
    for dc in [&a, &b] {
        let mut seqs = Vec::new();
        for shard in 0..2 {
            seqs.extend(dc.rows(shard).await.into_iter().map(|(_, seq)| seq));
        }
        let distinct: BTreeSet<u64> = seqs.iter().copied().collect();
        assert_eq!(
            seqs.len() as u64,
            2 * PER_DC,
            "{}: rows over its shards",
            dc.name
        );
        assert_eq!(
            distinct,
            (0..2 * PER_DC).collect::<BTreeSet<u64>>(),
            "{}: every message once",
            dc.name
        );
    }

    // Status and verify take every shard.
    for dc in [&a, &b] {
        let status = dc.status();
        let captures: Vec<_> = status.iter().filter(|l| l["part"] == "capture").collect();
        assert_eq!(
            captures
                .iter()
                .map(|l| l["shard"].as_u64())
                .collect::<Vec<_>>(),
            vec![Some(0), Some(1)],
            "{}: {status:?}",
            dc.name
        );
        for applier in status.iter().filter(|l| l["part"] == "apply") {
            assert_eq!(applier["conflicts"], 0, "{}: {applier}", dc.name);
        }
    }
    let verified = a.output(&["relay", "verify", "--lag-wait-seconds", "30"]);
    let lines = support::json_lines(&verified);
    assert!(verified.status.success(), "relay verify: {lines:?}");
    let summaries: Vec<_> = lines
        .iter()
        .filter(|l| l["remote_dc"] == "b" && l["rows"].is_u64())
        .collect();
    assert_eq!(
        summaries
            .iter()
            .map(|l| l["shard"].as_u64())
            .collect::<Vec<_>>(),
        vec![Some(0), Some(1)],
        "{lines:?}"
    );
    for worker in workers {
        worker.kill();
    }
}
