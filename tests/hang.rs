//! Servers that hang: a process stopped with SIGSTOP keeps its TCP connections open and
//! answers nothing, which is what a stalled disk, a saturated host or a path dropping packets
//! look like from outside. Each is a failed server within its bound: seen, reported, and
//! survived with every message stored once after SIGCONT. (A hung shard: `tests/shards.rs`.)
//! The relay's database too: it is both its capture's source and its appliers' target.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use logstamp::id::IdError;
use logstamp::mysql;
use logstamp::relay::settings::LoopFilterMode;
use logstamp::store::lease::HeldLease;
use logstamp::store::migrate;
use mysql_async::prelude::Queryable;
use support::TestDb;
use support::http::readiness_becomes;
use support::ingest::{COUNT_ALL, Process, SUM_OFFSETS, Setup};
use support::mariadb::MariaDb;
use support::relay::{
    Dc, ITEMS, assert_exactly_once, start_relays_with, two_dcs, wait_in_sync, wait_until, writer,
};

/// The worker's bound on a write (`store.write_timeout`).
const WRITE_BOUND: Duration = Duration::from_secs(2);

/// The bound of the readiness check's Kafka metadata request.
const KAFKA_BOUND: Duration = Duration::from_secs(2);

/// The relay's bound on an applier's wait (`relay.apply_timeout`), as set here.
const APPLY_BOUND: Duration = Duration::from_secs(2);

/// A lease claim's bound on each wait (connecting, a statement).
const CLAIM_BOUND: Duration = Duration::from_secs(10);

/// `mysql.statement_timeout` as set here: a worker's start-up checks, a command's step.
const STATEMENT_BOUND: Duration = Duration::from_secs(2);

/// Capture's bound: this long without a binlog event or a heartbeat (one a second).
const CAPTURE_BOUND: Duration = Duration::from_secs(10);

/// The worker's single database hangs for several times its write bound while messages keep
/// coming: the worker is not ready within the bound, saying MySQL does not answer, and logs
/// it once; it writes nothing meanwhile, and after SIGCONT every message is stored once, with
/// the IDs of one lease (nothing stamped twice: IDs as many as rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_database_makes_the_worker_not_ready_and_loses_nothing() {
    let (server, setup) =
        Setup::on_private_server(81, "db_hang", 4, &[("batch.max_rows", "500")]).await;
    let n: u64 = 8_000;
    setup.produce(0, n / 2, 4);
    let bound = format!("{}s", WRITE_BOUND.as_secs());
    let worker = setup.spawn_process_with(
        "auto",
        0,
        &[
            ("store.write_timeout", bound.as_str()),
            // The lease lives in the hung database too: its renewal must not run out here.
            ("id.lease_ttl", "60s"),
        ],
    );
    setup
        .wait_for(COUNT_ALL, n / 2, Duration::from_secs(90))
        .await;
    let address = served_address(&worker).await;
    assert_eq!(get(&address, "/health/ready").await.0, 200);

    server.pause();
    let paused_at = Instant::now();
    setup.produce(n / 2, n, 4);
    let (status, ready) = not_ready_within(
        &address,
        paused_at,
        WRITE_BOUND + Duration::from_secs(20),
        "the database hangs",
    )
    .await;
    let detected = paused_at.elapsed();
    assert_eq!(status, 503, "{ready}");
    assert!(ready.contains("MySQL does not answer"), "{ready}");
    assert!(
        detected < WRITE_BOUND + Duration::from_secs(10),
        "not ready after {detected:?}"
    );
    // The writer finds it too, and says so once.
    worker
        .wait_for_log(
            "stopped taking writes",
            WRITE_BOUND + Duration::from_secs(20),
        )
        .await;
    let written_off = paused_at.elapsed();
    // The one database is the worker's one shard in the metric too.
    let (shard, up) = database_up(&address).await;
    assert_eq!(up, 0.0, "{shard} is up while it hangs");
    assert!(
        shard.contains(&format!(":{}/lst_db_hang_", server.port)),
        "{shard}"
    );
    let stored_while_hung = stored_total(&address).await;
    while paused_at.elapsed() < 4 * WRITE_BOUND {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored_total(&address).await,
        stored_while_hung,
        "nothing is reported stored while the database hangs"
    );
    let hung_for = paused_at.elapsed();
    server.resume();
    eprintln!(
        "hung database: not ready after {detected:?}; the writer's log line after \
         {written_off:?}; resumed after {hung_for:?}"
    );

    setup.wait_for(COUNT_ALL, n, Duration::from_secs(90)).await;
    assert_eq!(database_up(&address).await.1, 1.0, "down after SIGCONT");
    let log = worker.log.clone();
    let status = worker.terminate(Duration::from_secs(60));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "worker {status}: {text}");
    let told = text
        .lines()
        .filter(|l| l.contains("stopped taking writes"))
        .count();
    assert_eq!(told, 1, "said once, not once per retry: {text}");
    every_message_once(&setup, n).await;
}

/// The worker's Kafka broker hangs for several times the readiness check's bound (2 s): the
/// worker is not ready within it, saying Kafka does not answer, and keeps running; after
/// SIGCONT it goes on, and every message, those sent before and after, is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_broker_makes_the_worker_not_ready_and_loses_nothing() {
    let setup = Setup::new("broker_hang", 4, &[("batch.max_rows", "500")]).await;
    let n: u64 = 8_000;
    setup.produce(0, n / 2, 4);
    let mut worker = setup.spawn_process("auto", 0);
    setup
        .wait_for(COUNT_ALL, n / 2, Duration::from_secs(90))
        .await;
    let address = served_address(&worker).await;
    assert_eq!(get(&address, "/health/ready").await.0, 200);

    setup.cluster().pause(0);
    let paused_at = Instant::now();
    let (status, ready) = not_ready_within(
        &address,
        paused_at,
        Duration::from_secs(30),
        "the broker hangs",
    )
    .await;
    let detected = paused_at.elapsed();
    assert_eq!(status, 503, "{ready}");
    assert!(ready.contains("Kafka does not answer"), "{ready}");
    assert!(
        detected < KAFKA_BOUND + Duration::from_secs(10),
        "not ready after {detected:?}"
    );
    while paused_at.elapsed() < 4 * KAFKA_BOUND {
        assert!(
            worker.child.try_wait().unwrap().is_none(),
            "the worker stopped while the broker hung: {}",
            std::fs::read_to_string(&worker.log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hung_for = paused_at.elapsed();
    setup.cluster().resume(0);
    eprintln!("hung broker: not ready after {detected:?}; resumed after {hung_for:?}");

    setup.produce(n / 2, n, 4);
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(90)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&address, "/health/ready").await.0 != 200 {
        assert!(Instant::now() < deadline, "not ready again after SIGCONT");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = worker.log.clone();
    let status = worker.terminate(Duration::from_secs(60));
    assert!(
        status.success(),
        "worker {status}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    every_message_once(&setup, n).await;
}

/// The coordination database hangs while a process holds a service-ID lease: the renewal
/// gets no answer, and the holder stops stamping before its lease could expire, so no other
/// holder can stamp under that ID while it still does. A process starting meanwhile fails its
/// claim within the start's bound, saying the database does not answer. After SIGCONT another
/// holder claims the ID and stamps above every ID the first issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_coordination_database_stops_stamping_before_the_lease_expires() {
    let server = MariaDb::start(82, &[]).await;
    let db = TestDb::create_on(
        &format!("mysql://root@127.0.0.1:{}", server.port),
        "lease_hang",
    )
    .await;
    mysql::create_database(&db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&db.mysql_url()).await.unwrap();
    migrate::apply(&mut conn, &migrate::builtin().unwrap())
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let ttl = Duration::from_secs(3);
    let settings = db.settings(&[("id.service_id", "5"), ("id.lease_ttl", "3s")]);
    let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let before = lease.generator().next_id().unwrap();

    server.pause();
    let paused_at = Instant::now();
    // The last renewal was before the pause, so the row expires a ttl after it at the latest.
    let reason = tokio::time::timeout(ttl, lease.lost())
        .await
        .expect("the lease is given up before it could expire");
    let lost_after = paused_at.elapsed();
    assert!(reason.contains("service ID 5"), "{reason}");
    assert_eq!(
        lease.generator().next_id(),
        Err(IdError::LeaseLost { service_id: 5 })
    );
    let asked = Instant::now();
    let starting = tokio::time::timeout(
        CLAIM_BOUND + Duration::from_secs(10),
        HeldLease::acquire(&settings.mysql.url, &settings.id),
    )
    .await
    .expect("a claim on a hung database ends within its bound");
    let refused_after = asked.elapsed();
    let Err(error) = starting else {
        panic!("a lease claimed on a hung database");
    };
    let error = error.to_string();
    assert!(
        error.contains("service-ID lease") && error.contains("no answer within 10s"),
        "{error}"
    );
    assert!(refused_after >= CLAIM_BOUND, "{refused_after:?}: {error}");
    server.resume();
    eprintln!(
        "hung coordination database: stamping stopped {lost_after:?} after the pause; a claim \
         failed after {refused_after:?}: {error}"
    );

    let successor = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    assert!(successor.generator().next_id().unwrap() > before);
    successor.release().await.unwrap();
    assert!(!lease.release().await.unwrap().row_released);
}

/// `serve`'s database hangs after a first request pooled a connection to it: requests then
/// answer 503 or 504 within the connection wait (10 s) and the statement bound, not never.
/// Meanwhile a worker starting on it and a command (`logstamp query`) fail within
/// `mysql.statement_timeout`, naming the wait and the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_database_gets_bounded_answers_from_serve_a_starting_worker_and_a_command() {
    let server = MariaDb::start(83, &[]).await;
    let db = TestDb::create_on(
        &format!("mysql://root@127.0.0.1:{}", server.port),
        "serve_hang",
    )
    .await;
    mysql::create_database(&db.mysql_url()).await.unwrap();
    let settings = db.settings(&[("serve.statement_timeout", "2s")]);
    let api = logstamp::serve::Server::new(
        settings.serve.clone(),
        settings.serve_catalog(),
        &settings.mysql.url,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { api.serve(listener).await });
    // Answered (the tables are not made: 503 naming migrate), with a connection now pooled.
    let (status, body) = get(&address, "/api/health").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("migrate"), "{body}");

    server.pause();
    let bound = Duration::from_secs(10 + 2 + 1);
    for path in ["/api/health", "/api/rows?from=-1h&to=now"] {
        let asked = Instant::now();
        let (status, body) = get(&address, path).await;
        let took = asked.elapsed();
        assert!(status == 503 || status == 504, "{path}: {status} {body}");
        assert!(
            took < bound + Duration::from_secs(5),
            "{path} answered after {took:?}"
        );
        eprintln!("serve, hung database: {path} answered {status} after {took:?}");
    }
    let server_name = format!("127.0.0.1:{}", server.port);
    let worker = db.settings(&[
        ("mysql.statement_timeout", "2s"),
        ("store.give_up_after", "1s"),
    ]);
    let asked = Instant::now();
    let started = tokio::time::timeout(
        STATEMENT_BOUND + Duration::from_secs(10),
        logstamp::ingest::prepare_database(&worker.worker()),
    )
    .await
    .expect("a worker's start-up checks on a hung database end within their bound");
    let took = asked.elapsed();
    let error = started
        .expect_err("a worker started on a hung database")
        .to_string();
    assert!(
        error.contains(&format!(
            "checking the schema and the partitions at {server_name}"
        )) && error.contains("no answer within 2s"),
        "{error}"
    );
    assert!(took >= STATEMENT_BOUND, "{took:?}: {error}");
    eprintln!("worker start, hung database: failed after {took:?}: {error}");

    let asked = Instant::now();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"));
    command
        .args(["query", "--from", "-1h", "--to", "now"])
        .env(
            logstamp::config::env_var("mysql.url"),
            db.mysql_url().expose(),
        )
        .env(logstamp::config::env_var("mysql.statement_timeout"), "2s");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let took = asked.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the command's work (mysql.statement_timeout) at")
            && stderr.contains(&server_name)
            && stderr.contains("no answer within 2s"),
        "{stderr}"
    );
    assert!(
        took >= STATEMENT_BOUND && took < STATEMENT_BOUND + Duration::from_secs(10),
        "{took:?}: {stderr}"
    );
    eprintln!("logstamp query, hung database: exited 1 after {took:?}: {stderr}");
    server.resume();
}

/// Data centre a's database, which its relay captures and applies b's changes to, hangs for
/// longer than both bounds while both data centres write (a's writer blocks on it, its writes
/// pending). a's applier notices within `relay.apply_timeout` and capture within 10 s, each
/// by metric, readiness naming it and one log line; b's capture publishes meanwhile. After
/// SIGCONT both go on from what they recorded: every transaction is published once and applied
/// once (a commit whose answer never came is settled by `relay_applied`), and the tables are
/// identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_relay_database_stops_its_capture_and_applier_only_and_loses_nothing() {
    let mut dcs = two_dcs(ITEMS).await;
    let setting = format!("apply_timeout = \"{}s\"\n", APPLY_BOUND.as_secs());
    start_relays_with(&mut dcs, LoopFilterMode::Marker, "100ms", &setting).await;
    let (a, b) = (&dcs[0], &dcs[1]);
    let (at_a, at_b) = (a.telemetry().await, b.telemetry().await);
    readiness_becomes(&at_a, 200).await;
    readiness_becomes(&at_b, 200).await;
    // Paced, so both go on through the pause.
    let writers: Vec<_> = dcs
        .iter()
        .enumerate()
        .map(|(i, dc)| {
            let pace = Some(Duration::from_millis(20));
            tokio::spawn(writer(
                dc.server.url("app"),
                i as u32 + 1,
                900,
                5 + i as u64,
                pace,
            ))
        })
        .collect();
    a.wait_applied("b", 50).await;
    b.wait_applied("a", 50).await;
    let published_by_b = "logstamp_relay_published_transactions_total{dc=\"b\"}";
    let b_before = metric(&at_b, published_by_b).await;
    // `relay verify` at b, comparing with a, is under way when a hangs.
    let asked = Instant::now();
    let verify = Verifying::start(b, a).await;
    let verify_started = asked.elapsed();

    a.server.pause();
    let paused_at = Instant::now();
    let verified = tokio::task::spawn_blocking(move || verify.exit(paused_at));
    let target_up = "logstamp_relay_apply_target_up{dc=\"a\",remote=\"b\"}";
    metric_becomes(&at_a, target_up, 0.0, APPLY_BOUND + Duration::from_secs(10)).await;
    let applier_detected = paused_at.elapsed();
    let (status, ready) = get(&at_a, "/health/ready").await;
    assert_eq!(status, 503, "{ready}");
    assert!(
        ready.contains("does not answer the applier of b"),
        "{ready}"
    );
    let source_up = "logstamp_relay_capture_source_up{dc=\"a\"}";
    metric_becomes(
        &at_a,
        source_up,
        0.0,
        CAPTURE_BOUND + Duration::from_secs(10),
    )
    .await;
    let capture_detected = paused_at.elapsed();
    let (status, ready) = get(&at_a, "/health/ready").await;
    assert_eq!(status, 503, "{ready}");
    assert!(ready.contains("does not answer capture"), "{ready}");
    // Several retries of each while it still hangs: said once all the same.
    while paused_at.elapsed() < capture_detected + Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The command fails within relay.apply_timeout, naming the wait and a's server.
    let (code, verify_failed, stderr) = verified.await.unwrap();
    assert_eq!(code, Some(2), "relay verify: {stderr}");
    let named = format!(
        "checksumming a chunk of app.still at 127.0.0.1:{}: no answer within {APPLY_BOUND:?}",
        a.server.port
    );
    assert!(stderr.contains(&named), "{stderr}");
    assert!(
        verify_failed < APPLY_BOUND + Duration::from_secs(5),
        "relay verify failed {verify_failed:?} after the pause"
    );
    let b_during = metric(&at_b, published_by_b).await - b_before;
    assert!(b_during > 0.0, "b's capture published nothing meanwhile");
    assert_eq!(get(&at_b, "/health/ready").await.0, 200, "b is not ready");
    let hung_for = paused_at.elapsed();
    a.server.resume();
    eprintln!(
        "hung relay database: applier not answered after {applier_detected:?}, capture after \
         {capture_detected:?}, relay verify failed after {verify_failed:?} (under way \
         {verify_started:?} after it was started); b published {b_during} transactions \
         meanwhile; resumed after {hung_for:?}"
    );

    let mut local = Vec::new();
    for w in writers {
        local.push(w.await.unwrap());
    }
    wait_in_sync(&dcs, &local, "app.items").await;
    let resumed = paused_at.elapsed() - hung_for;
    eprintln!("hung relay database: in sync {resumed:?} after SIGCONT");
    assert_exactly_once(&dcs, &local).await;
    let mut sums = Vec::new();
    for dc in &dcs {
        let mut conn = dc.conn().await;
        let sum: Option<(String, Option<u64>)> = conn
            .query_first("CHECKSUM TABLE app.items EXTENDED")
            .await
            .unwrap();
        sums.push(sum.unwrap().1);
    }
    assert_eq!(sums[0], sums[1], "app.items differs");
    readiness_becomes(&at_a, 200).await;
    assert_eq!(metric(&at_a, target_up).await, 1.0);
    assert_eq!(metric(&at_a, source_up).await, 1.0);
    let log = a.log();
    for (said, times) in [
        ("the database stopped answering the applier of b", 1),
        ("the database answers the applier of b again", 1),
        ("the database stopped answering capture", 1),
        ("the database answers capture again", 1),
    ] {
        assert_eq!(log.matches(said).count(), times, "{said}: {log}");
    }
    a_snapshot_waiting_on_its_database_fails_and_starts_again(b, a).await;
}

/// A snapshot in `dc` of `app.still` (made by [`Verifying`], the same rows in `other`) whose
/// watermark writes get no answer (the table is locked): the copy fails within
/// `relay.apply_timeout`, naming the wait and the server, and once they are answered starts
/// again from what it recorded, copying each row once.
async fn a_snapshot_waiting_on_its_database_fails_and_starts_again(dc: &Dc, other: &Dc) {
    let mut holder = dc.conn().await;
    holder
        .query_drop("LOCK TABLES logstamp.relay_watermarks WRITE")
        .await
        .unwrap();
    let requested = dc
        .relay_command(&["snapshot", "--table", "app.still", "--no-wait"])
        .output()
        .unwrap();
    assert!(
        requested.status.success(),
        "{}",
        String::from_utf8_lossy(&requested.stderr)
    );
    let asked = Instant::now();
    let said = format!(
        "relay snapshot failed, starting again: writing a low watermark at 127.0.0.1:{}: no \
         answer within {APPLY_BOUND:?}",
        dc.server.port
    );
    // The task looks for requests every second.
    let deadline = asked + APPLY_BOUND + Duration::from_secs(10);
    while !dc.log()[dc.log_from..].contains(&said) {
        assert!(Instant::now() < deadline, "{said}: {}", dc.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed_after = asked.elapsed();
    holder.query_drop("UNLOCK TABLES").await.unwrap();
    let still = |l: &serde_json::Value| l["part"] == "snapshot" && l["table"] == "app.still";
    wait_until("the snapshot of app.still", || {
        let line = dc.status().into_iter().find(still);
        async move {
            match line {
                Some(line) if line["state"] == "done" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let done = dc.status().into_iter().find(still).unwrap();
    let copied = done["copied_rows"].as_u64().unwrap() + done["dropped_rows"].as_u64().unwrap();
    assert_eq!(copied, 3000, "{done}");
    eprintln!(
        "hung snapshot statement: failed after {failed_after:?}, done {:?} after the request",
        asked.elapsed()
    );
    for at in [dc, other] {
        let mut conn = at.conn().await;
        let (rows, sum): (u64, u64) = conn
            .query_first("SELECT COUNT(*), SUM(v) FROM app.still")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (rows, sum),
            (3000, 7 * 3000 * 3001 / 2),
            "app.still in {}",
            at.name
        );
    }
}

/// `relay verify` of a table no one writes, one row a chunk, so that it is still comparing
/// when the test pauses a server.
struct Verifying {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Verifying {
    /// Creates `app.still` with the same rows in `here` and `remote` (out of the binlog: the
    /// relays do not see it), starts `relay verify` of it at `here`, and returns once it has
    /// compared a hundred chunks (its first progress line).
    async fn start(here: &Dc, remote: &Dc) -> Verifying {
        for dc in [here, remote] {
            let mut conn = dc.conn().await;
            for statement in [
                "SET SESSION sql_log_bin = 0",
                "CREATE TABLE app.still (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT NOT NULL)",
                "INSERT INTO app.still SELECT seq, seq * 7 FROM app.seq_1_to_3000",
            ] {
                conn.query_drop(statement).await.unwrap();
            }
            conn.disconnect().await.unwrap();
        }
        let mut child = here
            .verify_command(&[remote], &["--table", "app.still", "--chunk-rows", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains("verifying") => break,
                Ok(line) => seen.push(line),
                Err(_) => assert!(
                    Instant::now() < deadline && child.try_wait().unwrap().is_none(),
                    "relay verify did not get under way: {seen:?}"
                ),
            }
        }
        Verifying { child, lines }
    }

    /// Waits for the command to exit, which it must within a minute: its exit code, how long
    /// after `since`, and what it wrote on stderr.
    fn exit(mut self, since: Instant) -> (Option<i32>, Duration, String) {
        let deadline = since + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("relay verify still waits on a hung server after a minute");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = since.elapsed();
        let stderr: Vec<String> = self.lines.iter().collect();
        (status.code(), took, stderr.join("\n"))
    }
}

/// The worker's readiness answer once it is not 200, which must come within `within` of
/// `since` (while `what`).
async fn not_ready_within(
    address: &str,
    since: Instant,
    within: Duration,
    what: &str,
) -> (u16, String) {
    loop {
        let answer = get(address, "/health/ready").await;
        if answer.0 != 200 {
            return answer;
        }
        assert!(since.elapsed() < within, "still ready while {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every message of `0..n` stored once, under the workers' leased IDs, and counted by the
/// offsets.
async fn every_message_once(setup: &Setup, n: u64) {
    assert_eq!(
        setup.count(SUM_OFFSETS).await,
        n,
        "offsets count every message"
    );
    setup
        .assert_exactly_once(n, &(2..=20).collect::<Vec<u32>>())
        .await;
}

/// A sample of `address`'s metrics (0 when absent).
async fn metric(address: &str, name: &str) -> f64 {
    let (_, metrics) = get(address, "/metrics").await;
    support::http::sample(&metrics, name).unwrap_or(0.0)
}

/// Polls a sample of `address`'s metrics until it is `value`, within `within`.
async fn metric_becomes(address: &str, name: &str, value: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = metric(address, name).await;
        if got == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} is {got}, not {value}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn served_address(worker: &Process) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&worker.log).unwrap_or_default();
        if let Some(address) = support::http::served_address(&log) {
            return address;
        }
        assert!(
            Instant::now() < deadline,
            "the worker serves nothing: {log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get(address: &str, path: &'static str) -> (u16, String) {
    let address = address.to_string();
    tokio::task::spawn_blocking(move || support::http::get(&address, path))
        .await
        .unwrap()
}

/// The worker's one `logstamp_store_shard_up` sample: its name with labels, and its value.
async fn database_up(address: &str) -> (String, f64) {
    let (_, metrics) = get(address, "/metrics").await;
    let samples: Vec<(&str, &str)> = metrics
        .lines()
        .filter(|line| line.starts_with("logstamp_store_shard_up{"))
        .filter_map(|line| line.rsplit_once(' '))
        .collect();
    assert_eq!(samples.len(), 1, "{metrics}");
    (samples[0].0.to_string(), samples[0].1.parse().unwrap())
}

/// The worker's `logstamp_ingest_records_stored_total`.
async fn stored_total(address: &str) -> f64 {
    let (_, metrics) = get(address, "/metrics").await;
    support::http::sample(&metrics, "logstamp_ingest_records_stored_total").unwrap_or(0.0)
}
