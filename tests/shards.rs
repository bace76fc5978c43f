//! A store of several databases (`store.shards`): three private MariaDB servers as shards, the
//! shared server as the coordination database, 12 partitions and three `logstamp ingest`
//! processes. Checked against the shards themselves with plain SQL: every message once in the
//! union of the shards, IDs unique across them, and each partition's rows and offset in the
//! shard the assignment table names.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rand::Rng;

use support::ingest::{Process, Setup};
use support::mariadb::MariaDb;

const PARTITIONS: i32 = 12;

/// Three shards on private servers and a setup whose settings list them; everything migrated
/// with `logstamp migrate`.
struct Fleet {
    servers: Vec<MariaDb>,
    setup: Setup,
    shards: String,
    /// The settings file of every process, written once: a process reading it while it is
    /// written again would find it empty.
    config: std::path::PathBuf,
}

impl Fleet {
    async fn start(hint: &str, first_server_id: u32) -> Fleet {
        let mut servers = Vec::new();
        for i in 0..3 {
            servers.push(MariaDb::start(first_server_id + i, &[]).await);
        }
        // The shards' databases are named after the coordination database, made below.
        let db = support::TestDb::create(hint).await;
        let shards: Vec<String> = servers.iter().map(|s| s.url(&db.name)).collect();
        let shards = shards.join(",");
        let setup = Setup::local(
            db,
            PARTITIONS,
            &[
                ("store.shards", shards.as_str()),
                ("batch.max_rows", "500"),
                ("store.give_up_after", "120s"),
                // One write at a time: a write waiting for a stopped shard must not hold the
                // slot the other shards' partitions need.
                ("store.concurrency", "1"),
            ],
        )
        .await;
        let config = setup.config_file("fleet");
        let fleet = Fleet {
            servers,
            setup,
            shards,
            config,
        };
        let migrated = fleet.run_ok(&["migrate"]);
        let text = String::from_utf8(migrated).unwrap();
        assert_eq!(
            text.matches("\"role\":\"shard\"").count(),
            3,
            "migrate reports each shard: {text}"
        );
        fleet
    }

    /// `logstamp ARGS` with the setup's settings file and the shards.
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"));
        command
            .arg("--config")
            .arg(&self.config)
            .env(logstamp::config::env_var("store.shards"), &self.shards)
            .args(args);
        command
    }

    fn run_ok(&self, args: &[&str]) -> Vec<u8> {
        let output = self.command(args).output().unwrap();
        assert!(
            output.status.success(),
            "logstamp {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    /// `logstamp ARGS`' output, a JSON object a line.
    fn json_lines(&self, args: &[&str]) -> Vec<serde_json::Value> {
        support::json_lines_in(&self.run_ok(args))
    }

    /// `logstamp ingest` leasing a service ID, its log in a file of its own.
    fn spawn_worker(&self, run: usize) -> Process {
        self.spawn_worker_with(run, &[])
    }

    /// `spawn_worker` with more settings, `(key, value)`.
    fn spawn_worker_with(&self, run: usize, overrides: &[(&str, &str)]) -> Process {
        let log = self.config.with_file_name(format!("worker-{run}.log"));
        let mut command = self.command(&["ingest", "--service-id", "auto"]);
        for (key, value) in overrides {
            command.env(logstamp::config::env_var(key), value);
        }
        let child = command
            // Slow enough that the move and the outage happen while they write.
            .env(
                logstamp::config::env_var("ingest.max_records_per_second"),
                "1500",
            )
            .env("RUST_LOG", "logstamp=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Process { child, log }
    }

    async fn shard_conn(&self, i: usize) -> mysql_async::Conn {
        mysql_async::Conn::from_url(self.servers[i].url(&self.setup.db.name))
            .await
            .unwrap()
    }

    /// Rows stored over all shards (a stopped shard counts none).
    async fn stored(&self) -> u64 {
        self.stored_in(&[0, 1, 2]).await
    }

    /// Rows stored in the shards at these positions (a stopped one counts none; a paused one
    /// must not be asked).
    async fn stored_in(&self, shards: &[usize]) -> u64 {
        let mut total = 0;
        for &i in shards {
            let Ok(mut conn) =
                mysql_async::Conn::from_url(self.servers[i].url(&self.setup.db.name)).await
            else {
                continue;
            };
            let n: Option<u64> = conn.query_first("SELECT COUNT(*) FROM logs").await.unwrap();
            total += n.unwrap_or(0);
            let _ = conn.disconnect().await;
        }
        total
    }

    async fn wait_stored(&self, least: u64, within: Duration) {
        self.wait_stored_in(&[0, 1, 2], least, within).await
    }

    async fn wait_stored_in(&self, shards: &[usize], least: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.stored_in(shards).await;
            if n >= least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{n} rows stored over the shards, not yet {least}, after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The assignment table: partition to shard position.
    async fn assignments(&self) -> BTreeMap<i32, usize> {
        let mut conn = self.setup.db.conn().await;
        let rows: Vec<(i32, String)> = conn
            .query("SELECT kafka_partition, shard FROM shard_assignments WHERE topic = 'logs'")
            .await
            .unwrap();
        let ports: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!(":{}/", s.port))
            .collect();
        rows.into_iter()
            .map(|(partition, shard)| {
                let position = ports.iter().position(|p| shard.contains(p.as_str()));
                (partition, position.expect("a shard of the settings"))
            })
            .collect()
    }

    /// Every sequence number in `0..n` exactly once over the shards, IDs unique across them;
    /// each row in its partition's shard (or, for the partition `moved`, in the shard it left),
    /// each live offset row in its partition's shard, and the offsets add up to the rows.
    async fn assert_exactly_once(&self, n: u64, moved: Option<(i32, usize)>) {
        let assignments = self.assignments().await;
        assert_eq!(assignments.len(), PARTITIONS as usize, "{assignments:?}");
        let mut seqs: Vec<u64> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        let mut committed = 0;
        // Rows of the moved partition in the shard it left and in the shard it went to.
        let mut moved_rows = [0u64; 2];
        for i in 0..self.servers.len() {
            let mut conn = self.shard_conn(i).await;
            let rows: Vec<(u64, u64)> = conn.query("SELECT id, seq FROM logs").await.unwrap();
            let offsets: Vec<(i32, i64)> = conn
                .query(
                    "SELECT kafka_partition, next_offset FROM ingest_offsets \
                     WHERE next_offset >= 0",
                )
                .await
                .unwrap();
            for (partition, offset) in &offsets {
                assert_eq!(
                    assignments.get(partition),
                    Some(&i),
                    "shard {i} holds the live offset of partition {partition}"
                );
                committed += offset;
            }
            for (id, seq) in rows {
                let partition = (seq % PARTITIONS as u64) as i32;
                assert!(
                    assignments.get(&partition) == Some(&i) || moved == Some((partition, i)),
                    "row of sequence number {seq} (partition {partition}) is in shard {i}"
                );
                if let Some(moved) = moved
                    && partition == moved.0
                {
                    if i == moved.1 {
                        moved_rows[0] += 1;
                    } else if assignments.get(&partition) == Some(&i) {
                        moved_rows[1] += 1;
                    }
                }
                ids.push(id);
                seqs.push(seq);
            }
            conn.disconnect().await.unwrap();
        }
        assert_eq!(committed as u64, n, "the offsets count every message");
        if let Some((partition, _)) = moved {
            assert!(
                moved_rows.iter().all(|&rows| rows > 0),
                "partition {partition} was moved while written: rows in the shard it left and \
                 in the one it went to, {moved_rows:?}",
            );
        }
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (0..n).collect::<Vec<_>>(),
            "every message exactly once"
        );
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len() as u64, n, "IDs unique across the shards");
    }
}

/// Three workers over three shards, killed at random and replaced; a partition moved while
/// they write; a shard stopped and started again. Every message ends up stored once, in its
/// partition's shard, and `logstamp query` reads the same rows from all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_shards_store_every_message_once_through_kills_a_move_and_a_restart() {
    let mut fleet = Fleet::start("shards", 171).await;
    let n: u64 = 30_000;
    fleet.setup.produce(0, 2 * n / 5, PARTITIONS);
    let mut workers: Vec<Process> = Vec::new();
    for run in 0..3 {
        workers.push(fleet.spawn_worker(run));
    }
    let mut rng = rand::rng();
    // SIGKILL at random points, each time replacing the killed worker.
    for run in 3..5 {
        let now = fleet.stored().await;
        fleet
            .wait_stored(
                // No more than the messages produced so far.
                (now + rng.random_range(500..3_000)).min(2 * n / 5),
                Duration::from_secs(90),
            )
            .await;
        let victim = rng.random_range(0..workers.len());
        workers.remove(victim).kill();
        workers.push(fleet.spawn_worker(run));
    }
    let placed = fleet.assignments().await;
    let mut per_shard = [0; 3];
    for shard in placed.values() {
        per_shard[*shard] += 1;
    }
    assert_eq!(per_shard, [4, 4, 4], "least-loaded placement: {placed:?}");

    // A partition moved while the workers write it, with a backlog to write: once it has rows
    // in the shard it leaves (the kills above may have held it back so far).
    fleet.setup.produce(2 * n / 5, 4 * n / 5, PARTITIONS);
    let from = placed[&0];
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut conn = fleet.shard_conn(from).await;
        let written: Option<u64> = conn
            .query_first(format!(
                "SELECT COUNT(*) FROM logs WHERE seq % {PARTITIONS} = 0"
            ))
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        if written.unwrap_or(0) > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partition 0 wrote nothing to its shard"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let to = (from + 1) % 3;
    let moved = fleet.run_ok(&["shards", "move", "logs", "0", "--to", &to.to_string()]);
    let moved: serde_json::Value = serde_json::from_slice(&moved).unwrap();
    assert_eq!(moved["partition"], 0, "{moved}");
    assert_eq!(fleet.assignments().await[&0], to);

    // A shard goes away for a while: its partitions wait, the other shards' go on, and the
    // workers writing to it say which shard in their metrics and readiness; then it is back.
    let down_name = format!(
        "127.0.0.1:{}/{}",
        fleet.servers[2].port, fleet.setup.db.name
    );
    fleet.servers[2].stop().await;
    // Messages for every partition arrive while it is down. The live shards' share of them (at
    // least 7 partitions of 12: 1,750) is left for them to store, however far they had got.
    let others = fleet.stored().await;
    fleet.setup.produce(4 * n / 5, 9 * n / 10, PARTITIONS);
    fleet
        .wait_stored(others + 1_000, Duration::from_secs(60))
        .await;
    let down_metric = format!("logstamp_store_shard_up{{shard=\"{down_name}\"}}");
    let mut seen_down = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen_down && Instant::now() < deadline {
        for worker in &workers {
            let log = std::fs::read_to_string(&worker.log).unwrap_or_default();
            let Some(address) = support::http::served_address(&log) else {
                continue;
            };
            let (_, metrics) = tokio::task::spawn_blocking({
                let address = address.clone();
                move || support::http::get(&address, "/metrics")
            })
            .await
            .unwrap();
            if support::http::sample(&metrics, &down_metric) == Some(0.0) {
                let (status, ready) = tokio::task::spawn_blocking(move || {
                    support::http::get(&address, "/health/ready")
                })
                .await
                .unwrap();
                assert_eq!(status, 503, "{ready}");
                assert!(ready.contains(&down_name), "{ready}");
                seen_down = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen_down, "no worker reports {down_metric} 0");
    // A worker killed and replaced while the shard is down: the new one starts without it, the
    // partitions are dealt out again (their offsets on the down shard unread), and the other
    // shards' go on.
    workers.remove(0).kill();
    let replacement = fleet.spawn_worker(9);
    replacement
        .wait_for_log(
            "assigned; reading from the offsets stored in MySQL",
            Duration::from_secs(60),
        )
        .await;
    workers.push(replacement);
    // More messages after the replacement: the live shards may have stored all they were sent
    // before it, and their share of these (at least 7 partitions of 12, 1,750) is what they
    // still have to store.
    let now = fleet.stored().await;
    fleet.setup.produce(9 * n / 10, n, PARTITIONS);
    fleet.wait_stored(now + 500, Duration::from_secs(60)).await;
    let now = fleet.stored().await;
    fleet.servers[2].restart().await;
    fleet
        .wait_stored((now + 1_000).min(n), Duration::from_secs(90))
        .await;

    fleet.wait_stored(n, Duration::from_secs(180)).await;
    for worker in workers {
        let log = worker.log.clone();
        let status = worker.terminate(Duration::from_secs(60));
        assert!(
            status.success(),
            "worker {status}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    fleet.assert_exactly_once(n, Some((0, from))).await;

    // `logstamp query` over the shards: every row, merged in ID order; a limit of the merge.
    let from = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let to = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let ids: Vec<u64> = fleet
        .json_lines(&["query", "--from", &from, "--to", &to])
        .iter()
        .map(|row| row["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len() as u64, n);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "merged in ID order");
    let first: Vec<u64> = fleet
        .json_lines(&["query", "--from", &from, "--to", &to, "--limit", "7"])
        .iter()
        .map(|row| row["id"].as_u64().unwrap())
        .collect();
    assert_eq!(first, ids[..7]);
    let explained = fleet.run_ok(&["query", "--from", &from, "--to", &to, "--explain"]);
    let explained = String::from_utf8(explained).unwrap();
    assert_eq!(
        explained.lines().count(),
        3,
        "one plan per shard: {explained}"
    );

    // One SQL endpoint: the shards federated on a front server with Spider answer the same
    // ID range with the same rows, and each shard is sent the range, reading only the
    // partitions that hold it (as logstamp's own query does there).
    let front = MariaDb::start(174, &["--plugin-load-add=ha_spider.so"]).await;
    for i in 0..3 {
        let mut conn = fleet.shard_conn(i).await;
        conn.query_drop("SET GLOBAL log_output = 'TABLE', general_log = 1")
            .await
            .unwrap();
    }
    let front_url = front.url("front");
    let federated = fleet.run_ok(&["shards", "federate", "--front", &front_url]);
    let federated: serde_json::Value = serde_json::from_slice(&federated).unwrap();
    assert_eq!(federated["shards"], 3, "{federated}");
    let (start, end) = {
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp() as u64;
        (t(&from) << 32, t(&to) << 32)
    };
    let mut conn = mysql_async::Conn::from_url(front_url.as_str())
        .await
        .unwrap();
    // Literal bounds, as the mysql client and Grafana send them: MariaDB does not push a
    // prepared statement's parameters into the view's branches.
    let through_front: Vec<(u64, String)> = conn
        .query(format!(
            "SELECT id, message FROM logs WHERE id >= {start} AND id < {end} ORDER BY id"
        ))
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let through_logstamp: Vec<(u64, String)> = fleet
        .json_lines(&["query", "--from", &from, "--to", &to])
        .iter()
        .map(|row| {
            (
                row["id"].as_u64().unwrap(),
                row["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(through_front.len() as u64, n);
    assert_eq!(through_front, through_logstamp);
    for i in 0..3 {
        let mut conn = fleet.shard_conn(i).await;
        conn.query_drop("SET GLOBAL general_log = 0").await.unwrap();
        let sent: Vec<String> = conn
            .query(
                "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log \
                 WHERE command_type = 'Query' AND argument LIKE 'select %from `%`.`logs`%'",
            )
            .await
            .unwrap();
        let sent = sent
            .last()
            .unwrap_or_else(|| panic!("shard {i} was sent no select"));
        assert!(
            sent.contains(&format!("`id` >= {start}")) && sent.contains(&format!("`id` < {end}")),
            "shard {i} was sent the range: {sent}"
        );
        let plan: Vec<mysql_async::Row> = conn
            .query(format!("EXPLAIN PARTITIONS {sent}"))
            .await
            .unwrap();
        let partitions: Option<String> = plan[0].get("partitions").unwrap();
        let ours: serde_json::Value =
            serde_json::from_str(explained.lines().nth(i).unwrap()).unwrap();
        let ours: Vec<&str> = ours["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(
            partitions.unwrap_or_default(),
            ours.join(","),
            "shard {i}: {sent}"
        );
        conn.disconnect().await.unwrap();
    }

    // The assignments as listed, and partition maintenance on every shard.
    let listed = fleet.json_lines(&["shards", "list"]);
    assert_eq!(listed.len(), PARTITIONS as usize);
    assert!(listed.iter().all(|l| l["listed"] == true), "{listed:?}");
    // What reads one database refuses a store of several, saying so.
    for args in [
        &["query", "--since", "1h", "--follow"][..],
        &["query", "--since", "1h", "--by", "event"],
        &["serve"],
    ] {
        let output = fleet.command(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("store.shards lists several"), "{stderr}");
    }
    let ensured = String::from_utf8(fleet.run_ok(&["partitions", "ensure"])).unwrap();
    assert_eq!(
        ensured.matches("\"action\":\"partitions_ensured\"").count(),
        3,
        "{ensured}"
    );
}

/// The workers' bound on a write in the hang test (`store.write_timeout`).
const HANG_BOUND: Duration = Duration::from_secs(2);

/// A shard that hangs (SIGSTOP: its connections stay open and nothing answers) is a failed
/// shard. At `store.concurrency = 1` the workers report it down within their write bound
/// (`logstamp_store_shard_up` 0, `/health/ready` 503 naming it, one log line), the other
/// shards' partitions go on meanwhile, and after SIGCONT every message is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_shard_pauses_its_partitions_only() {
    let fleet = Fleet::start("shard_hang", 191).await;
    let n: u64 = 12_000;
    fleet.setup.produce(0, n / 2, PARTITIONS);
    let bound = format!("{}s", HANG_BOUND.as_secs());
    let workers: Vec<Process> = (0..2)
        .map(|run| fleet.spawn_worker_with(run, &[("store.write_timeout", bound.as_str())]))
        .collect();
    fleet.wait_stored(n / 4, Duration::from_secs(90)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.assignments().await.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "not every partition was placed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hung = 2;
    let hung_name = format!(
        "127.0.0.1:{}/{}",
        fleet.servers[hung].port, fleet.setup.db.name
    );
    let down_metric = format!("logstamp_store_shard_up{{shard=\"{hung_name}\"}}");

    fleet.servers[hung].pause();
    let paused_at = Instant::now();
    let live_before = fleet.stored_in(&[0, 1]).await;
    fleet.setup.produce(n / 2, n, PARTITIONS);

    // Detected: a worker writing to it reports it down, and is not ready, naming it.
    let mut detected = None;
    while detected.is_none() {
        assert!(
            paused_at.elapsed() < HANG_BOUND + Duration::from_secs(30),
            "no worker reports {down_metric} 0"
        );
        for worker in &workers {
            let Some((address, metrics)) = scrape(worker).await else {
                continue;
            };
            if support::http::sample(&metrics, &down_metric) == Some(0.0) {
                detected.get_or_insert(paused_at.elapsed());
                let (status, ready) = tokio::task::spawn_blocking(move || {
                    support::http::get(&address, "/health/ready")
                })
                .await
                .unwrap();
                assert_eq!(status, 503, "{ready}");
                assert!(ready.contains(&hung_name), "{ready}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let detected = detected.unwrap_or_default();
    // The bound, a batch's linger and scrapes, with room for a loaded machine.
    assert!(
        detected < HANG_BOUND + Duration::from_secs(10),
        "detected after {detected:?}"
    );

    // The live shards' partitions (8 of 12: 4,000 of the messages sent since) go on, also
    // through a rebalance that revokes a partition whose write waits on the hung shard.
    fleet
        .wait_stored_in(&[0, 1], live_before + 2_000, Duration::from_secs(25))
        .await;
    let progress_after = paused_at.elapsed();
    let progress = fleet.stored_in(&[0, 1]).await - live_before;
    // Hung for well past the bound: several failed tries of its partitions' batches.
    while paused_at.elapsed() < 4 * HANG_BOUND {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hung_for = paused_at.elapsed();
    fleet.servers[hung].resume();
    eprintln!(
        "hung shard: detected after {detected:?}; {progress} rows stored in the live shards \
         {progress_after:?} after the pause; resumed after {hung_for:?}"
    );

    fleet.wait_stored(n, Duration::from_secs(90)).await;
    for worker in workers {
        let log = worker.log.clone();
        let status = worker.terminate(Duration::from_secs(60));
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(status.success(), "worker {status}: {text}");
        // Told once, not once per retry.
        let told = text
            .lines()
            .filter(|l| l.contains("stopped taking writes") && l.contains(&hung_name))
            .count();
        assert!(told <= 1, "{told} lines say the shard stopped: {text}");
    }
    fleet.assert_exactly_once(n, None).await;
}

/// The worker's serving address and its metrics, once it serves.
async fn scrape(worker: &Process) -> Option<(String, String)> {
    let log = std::fs::read_to_string(&worker.log).unwrap_or_default();
    let address = support::http::served_address(&log)?;
    let (_, metrics) = tokio::task::spawn_blocking({
        let address = address.clone();
        move || support::http::get(&address, "/metrics")
    })
    .await
    .unwrap();
    Some((address, metrics))
}
