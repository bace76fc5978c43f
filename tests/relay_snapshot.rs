//! The relay's online snapshot (`relay snapshot`, `relay.snapshot = "initial"`) end to end, with
//! private MariaDB servers and `logstamp relay run` processes as in `tests/relay.rs`.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use logstamp::relay::change::{ChangeKind, TxnRef, Value};
use logstamp::relay::settings::LoopFilterMode;
use support::http::{get, sample};
use support::relay::*;

/// The table the snapshot tests copy: its rows exist in dc a before any relay starts.
const BIG: &str = "CREATE TABLE app.big (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  v INT NOT NULL,
  note VARCHAR(64) NOT NULL,
  amount DECIMAL(18,6) NULL,
  seen DATETIME(6) NOT NULL
) ENGINE=InnoDB";

/// A table both data centres can write.
const SMALL: &str =
    "CREATE TABLE app.t (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB";

/// Fills `table` (as [`BIG`]) with rows 1..=n in one statement, before the relays start (so no
/// capture publishes them: only a snapshot can).
async fn fill(dc: &Dc, table: &str, n: u64) {
    let mut conn = dc.conn().await;
    conn.query_drop(format!(
        "INSERT INTO {table} SELECT seq, seq % 1000, CONCAT('row ', seq), \
         IF(seq % 10 = 0, NULL, seq / 7), '2026-01-01' + INTERVAL seq SECOND \
         FROM app.seq_1_to_{n}"
    ))
    .await
    .unwrap();
}

/// `logstamp relay snapshot ARGS` in `dc`: its exit code and its JSON line. Killed after
/// [`DEADLINE`] (without `--no-wait` it waits for the copy).
async fn snapshot_command(dc: &Dc, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .arg("--config")
        .arg(dc.dir.path().join("relay.toml"))
        .args(["relay", "snapshot"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("relay snapshot {args:?} did not end: {}", dc.log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "no output: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
    });
    (output.status.code(), serde_json::from_str(line).unwrap())
}

/// The snapshot of `table` as `relay status` shows it in `dc`.
fn snapshot_status(dc: &Dc, table: &str) -> Option<serde_json::Value> {
    dc.status()
        .into_iter()
        .find(|l| l["part"] == "snapshot" && l["table"] == table)
}

/// Waits until the snapshot of `table` in `dc` is done.
async fn wait_snapshot_done(dc: &Dc, table: &str) -> serde_json::Value {
    let mut last = None;
    wait_until(&format!("the snapshot of {table} in {}", dc.name), || {
        let status = snapshot_status(dc, table);
        let done = status.as_ref().is_some_and(|s| s["state"] == "done");
        let shown = format!("{status:?}");
        last = status;
        async move { if done { Ok(()) } else { Err(shown) } }
    })
    .await;
    last.unwrap()
}

/// The server's own row count and `CHECKSUM TABLE`: cheap enough to poll.
async fn checksum(dc: &Dc, table: &str) -> (u64, Option<u64>) {
    let mut conn = dc.conn().await;
    let count: Option<u64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {table}"))
        .await
        .unwrap();
    let sum: Option<(String, Option<u64>)> = conn
        .query_first(format!("CHECKSUM TABLE {table}"))
        .await
        .unwrap();
    (count.unwrap_or(0), sum.and_then(|(_, s)| s))
}

/// An ordered hash of every row of `table`, computed here from the rows read in key order: an
/// oracle independent of the relay and of `relay verify`.
async fn ordered_hash(dc: &Dc, table: &str) -> (u64, String) {
    let mut conn = dc.conn().await;
    let rows: Vec<mysql_async::Row> = conn
        .query(format!("SELECT * FROM {table} ORDER BY 1"))
        .await
        .unwrap();
    let mut hash = Sha256::new();
    for row in &rows {
        for value in row.clone().unwrap() {
            hash.update(value.as_sql(false).as_bytes());
            hash.update(b"\x1f");
        }
        hash.update(b"\x1e");
    }
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (rows.len() as u64, digest)
}

/// Updates, deletes and inserts rows of `table` (as [`BIG`], rows 1..=existing) in `url` one
/// transaction at a time, some moving a row to another key, until `stop`; returns how many.
async fn churn(url: String, table: String, existing: u64, stop: watch::Receiver<bool>) -> u64 {
    let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
    let mut rng = StdRng::seed_from_u64(15);
    let mut next_new = existing + 1_000_000;
    let mut done = 0;
    while !*stop.borrow() {
        let id = rng.random_range(1..=existing);
        let statement = match rng.random_range(0..10) {
            0..=4 => {
                format!("UPDATE {table} SET v = v + 1, note = 'updated {done}' WHERE id = {id}")
            }
            5..=6 => format!("DELETE FROM {table} WHERE id = {id}"),
            7 => {
                next_new += 1;
                format!("UPDATE {table} SET id = {next_new} WHERE id = {id}")
            }
            _ => {
                next_new += 1;
                format!(
                    "INSERT INTO {table} VALUES ({next_new}, -1, 'inserted', 1.5, \
                     '2026-11-25 00:00:00.123456')"
                )
            }
        };
        conn.query_drop(statement).await.unwrap();
        done += 1;
        // Paced, so the writes go on throughout the copy rather than all at its start.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    done
}

/// The test: rows in dc a and none in dc b, updates, deletes, inserts and key changes in
/// a throughout the snapshot, a's relay SIGKILLed twice during it; the tables end identical, by
/// `relay verify` and by an ordered hash of every row. The copy is 100 chunks of any row count:
/// 100,000 rows by default, the 500,000 with `LOGSTAMP_TEST_SNAPSHOT_ROWS=500000`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_under_writes_and_two_kills_ends_with_identical_tables() {
    let rows: u64 = std::env::var("LOGSTAMP_TEST_SNAPSHOT_ROWS")
        .map(|n| n.parse().expect("LOGSTAMP_TEST_SNAPSHOT_ROWS: a row count"))
        .unwrap_or(100_000);
    assert!(rows >= 10_000, "LOGSTAMP_TEST_SNAPSHOT_ROWS: 10000 or more");
    let chunk_rows = (rows / 100).to_string();
    let mut dcs = two_dcs(BIG).await;
    fill(&dcs[0], "app.big", rows).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "200ms").await;
    let started = Instant::now();
    let (stop, stopped) = watch::channel(false);
    let writer = tokio::spawn(churn(
        dcs[0].server.url("app"),
        "app.big".into(),
        rows,
        stopped,
    ));
    let (code, requested) = snapshot_command(
        &dcs[0],
        &[
            "--table",
            "app.big",
            "--chunk-rows",
            &chunk_rows,
            "--no-wait",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{requested}");
    assert_eq!(requested["state"], "requested", "{requested}");

    // Killed twice while copying, each time after more rows were recorded as copied.
    let mut restarts = Vec::new();
    for at_least in [rows / 5, rows / 2] {
        wait_until("the snapshot gets further", || {
            let status = snapshot_status(&dcs[0], "app.big");
            async move {
                let status = status.ok_or("no snapshot")?;
                let copied = status["copied_rows"].as_u64().unwrap_or(0);
                if status["state"] == "done" {
                    panic!("the snapshot ended before the kill: {status}");
                }
                if copied >= at_least {
                    Ok(())
                } else {
                    Err(format!("{copied} rows copied"))
                }
            }
        })
        .await;
        dcs[0].kill_relay();
        let restarted_at = dcs[0].log().len();
        dcs[0].start_relay();
        restarts.push(restarted_at);
    }
    let done = wait_snapshot_done(&dcs[0], "app.big").await;
    // Each restarted relay went on from the key its predecessor recorded, not from the start.
    let log = dcs[0].log();
    for at in restarts {
        let started = log[at..]
            .lines()
            .find(|line| line.contains("snapshot started"))
            .unwrap_or_else(|| panic!("no snapshot started after a restart: {}", &log[at..]));
        assert!(started.contains("from=Some("), "resumed: {started}");
    }
    let copy_seconds = started.elapsed().as_secs_f64();
    stop.send(true).unwrap();
    let writes = writer.await.unwrap();
    assert!(writes > 100, "only {writes} writes during the snapshot");
    // Every row was read once, in some chunk: published, or dropped for a newer binlog version.
    let read = done["copied_rows"].as_u64().unwrap() + done["dropped_rows"].as_u64().unwrap();
    assert!(read >= rows * 9 / 10, "{done}");

    // Applying half a million rows takes longer than the harness's usual deadline.
    let deadline = Instant::now() + Duration::from_secs(900);
    while checksum(&dcs[0], "app.big").await != checksum(&dcs[1], "app.big").await {
        assert!(Instant::now() < deadline, "app.big still differs");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged_seconds = started.elapsed().as_secs_f64();
    let (a, b) = (
        ordered_hash(&dcs[0], "app.big").await,
        ordered_hash(&dcs[1], "app.big").await,
    );
    assert_eq!(a, b);
    assert!(a.0 > rows / 2, "{a:?}");
    let verified = dcs[0].verify(&[&dcs[1]], &["--table", "app.big"]);
    assert_eq!(verified.code, Some(0), "{}", verified.stderr);
    let conflicts: u64 = dcs[1]
        .conn()
        .await
        .query_first("SELECT COUNT(*) FROM logstamp.relay_conflicts")
        .await
        .unwrap()
        .unwrap();
    eprintln!(
        "snapshot of {rows} rows under {writes} writes, two kills: copied in {copy_seconds:.1} s, \
         tables equal after {converged_seconds:.1} s, {conflicts} conflicts recorded in b \
         (changes to rows not copied yet); {done}"
    );
}

/// Item 0 of the fleet issue: a's relay SIGKILLed at many points of a snapshot under writes,
/// at random moments after each start (so during its resume, chunks and transactions alike).
/// b's applier never stops, and the tables end identical by an ordered hash of every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_at_many_points_of_a_snapshot_leave_a_stream_every_applier_follows() {
    const ROWS: u64 = 30_000;
    const KILLS: usize = 8;
    let mut dcs = two_dcs(BIG).await;
    fill(&dcs[0], "app.big", ROWS).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let (stop, stopped) = watch::channel(false);
    let writer = tokio::spawn(churn(
        dcs[0].server.url("app"),
        "app.big".into(),
        ROWS,
        stopped,
    ));
    let (code, requested) = snapshot_command(
        &dcs[0],
        &["--table", "app.big", "--chunk-rows", "300", "--no-wait"],
    )
    .await;
    assert_eq!(code, Some(0), "{requested}");
    let mut rng = StdRng::seed_from_u64(36);
    let mut during = 0;
    for kill in 0..KILLS {
        wait_capture_runs(&dcs[0], kill + 1).await;
        // A kill point: some moment of this run, from its resume message on.
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
        let running = snapshot_status(&dcs[0], "app.big").is_some_and(|s| s["state"] != "done");
        dcs[0].kill_relay();
        during += usize::from(running);
        assert_not_stopped(&dcs[1], &format!("after kill {kill}"));
        dcs[0].start_relay();
    }
    assert!(
        during >= KILLS / 2,
        "only {during} kills during the snapshot"
    );
    wait_snapshot_done(&dcs[0], "app.big").await;
    stop.send(true).unwrap();
    let writes = writer.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while checksum(&dcs[0], "app.big").await != checksum(&dcs[1], "app.big").await {
        assert_not_stopped(&dcs[1], "while catching up");
        assert!(Instant::now() < deadline, "app.big still differs");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (a, b) = (
        ordered_hash(&dcs[0], "app.big").await,
        ordered_hash(&dcs[1], "app.big").await,
    );
    assert_eq!(a, b);
    assert_not_stopped(&dcs[1], "at the end");
    let superseded: usize = dcs[1]
        .log()
        .matches("passing over a message of a capture")
        .count();
    eprintln!(
        "{KILLS} kills ({during} during the snapshot) under {writes} writes: tables equal; b \
         passed over late messages {superseded} times"
    );
}

/// Waits until the capture of `dc` started `runs` times (its relays' log says so).
async fn wait_capture_runs(dc: &Dc, runs: usize) {
    wait_until(
        &format!("capture of {} starts {runs} times", dc.name),
        || {
            let started = dc.log().matches("capture started").count();
            async move {
                if started >= runs {
                    Ok(())
                } else {
                    Err(format!("{started} starts"))
                }
            }
        },
    )
    .await;
}

/// Fails if the applier of `dc` stopped applying from the other data centre.
fn assert_not_stopped(dc: &Dc, when: &str) {
    let log = dc.log();
    assert!(
        !log.contains("applying from a stopped"),
        "{} stopped applying {when}",
        dc.name
    );
}

/// What item 0 of the fleet issue needed, made certain: a transaction a killed capture
/// published whole, landing after the next capture resumed (it did not see it), is passed over
/// by the applier, which follows the new capture's stream without stopping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_landing_after_the_next_capture_resumed_changes_nothing() {
    let mut dcs = two_dcs(SMALL).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    for id in 1..=3 {
        a.query_drop(format!("INSERT INTO app.t VALUES ({id}, {id})"))
            .await
            .unwrap();
    }
    dcs[1].wait_applied("a", 3).await;
    let last = dcs[0].published().pop().unwrap();
    assert!(last.stream.run.is_some(), "{:?}", last.stream);
    dcs[0].kill_relay();
    dcs[0].start_relay();
    wait_capture_runs(&dcs[0], 2).await;
    // The next transaction of the killed capture, right after the last one b applied: without
    // the resume message before it, b would apply it.
    let gtid = last.position.gtid().unwrap();
    let late_gtid = format!("{}-{}-{}", gtid.domain, gtid.server, gtid.seq + 1);
    let mut late = last.clone();
    late.position.gtid = Some(late_gtid.clone());
    late.txn = TxnRef {
        seq: last.txn.seq + 1,
        index: 0,
        last: true,
    };
    late.stream.published = last.stream.published.with(gtid);
    late.stream.binlog = last.stream.binlog.with(gtid);
    late.row.key.insert("id".into(), Some(Value::Uint(999)));
    late.row.values.insert("id".into(), Some(Value::Uint(999)));
    late.row.values.insert("v".into(), Some(Value::Int(-7)));
    dcs[0].produce(late.to_json());
    // Genuine traffic goes on, from the new capture.
    a.query_drop("INSERT INTO app.t VALUES (4, 4)")
        .await
        .unwrap();
    dcs[1].wait_applied("a", 4).await;
    wait_same_rows(&dcs[0], &dcs[1], "app.t").await;
    let found: Option<u64> = dcs[1]
        .conn()
        .await
        .query_first("SELECT COUNT(*) FROM app.t WHERE id = 999")
        .await
        .unwrap();
    assert_eq!(
        found,
        Some(0),
        "the late transaction {late_gtid} was applied"
    );
    assert_not_stopped(&dcs[1], "after the late transaction");
    let (_, metrics) = get(&dcs[1].telemetry().await, "/metrics");
    assert_eq!(
        sample(
            &metrics,
            "logstamp_relay_apply_superseded_messages_total{dc=\"b\",remote=\"a\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

/// A snapshot of a table another data centre writes would set that one's rows back: refused,
/// naming it, in the data centre that applied its changes; allowed where none were applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_table_another_data_centre_writes_is_refused() {
    let mut dcs = two_dcs(SMALL).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    dcs[1]
        .conn()
        .await
        .query_drop("INSERT INTO app.t VALUES (1, 1)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 1).await;
    let output = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .arg("--config")
        .arg(dcs[0].dir.path().join("relay.toml"))
        .args(["relay", "snapshot", "--table", "app.t", "--no-wait"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("app.t is also written in b"), "{stderr}");
    let status = snapshot_status(&dcs[0], "app.t");
    assert!(status.is_none(), "{status:?}");
    // a wrote nothing to it: b's rows are all b's.
    let (code, requested) = snapshot_command(&dcs[1], &["--table", "app.t", "--no-wait"]).await;
    assert_eq!(code, Some(0), "{requested}");
}

/// A table added to `relay.tables` of a running pair: its rows in a, written before and while it
/// is added, reach b through `relay.snapshot = "initial"`, and the pair keeps relaying the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_to_a_running_pair_is_copied_by_the_initial_snapshot() {
    const ROWS: u64 = 20_000;
    let extra = BIG.replace("app.big", "app.extra");
    let mut dcs = vec![
        Dc::new("a", 1, &[ITEMS, &extra]).await,
        Dc::new("b", 2, &[ITEMS, &extra]).await,
    ];
    fill(&dcs[0], "app.extra", ROWS).await;
    let only_items = |dc: &Dc| {
        let path = dc.dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("tables = [\"app.*\"]"), "{text}");
        std::fs::write(
            path,
            text.replace("tables = [\"app.*\"]", "tables = [\"app.items\"]"),
        )
        .unwrap();
    };
    // Each data centre applies the other's topic, on the other's Kafka.
    let brokers: Vec<String> = dcs.iter().map(|d| d.brokers.clone()).collect();
    for (i, dc) in dcs.iter().enumerate() {
        let other = if i == 0 { "b" } else { "a" };
        dc.configure(
            &[(other, brokers[1 - i].clone())],
            LoopFilterMode::Marker,
            "200ms",
        );
        only_items(dc);
    }
    for dc in dcs.iter_mut() {
        dc.start_relay();
    }
    for dc in &dcs {
        dc.wait_capture_started().await;
    }
    // Both write app.items, and a's restart below comes while b's latest changes may still be
    // on their way to a: `relay.snapshot = "initial"` must not copy app.items, which a captured
    // from the start, or a's older versions of b's rows would go back to b.
    let items = write_everywhere(&dcs, 30).await;
    let (stop, stopped) = watch::channel(false);
    let writer = tokio::spawn(churn(
        dcs[0].server.url("app"),
        "app.extra".into(),
        ROWS,
        stopped,
    ));
    // Rolling: b first (so it applies app.extra), then a, which copies it.
    for i in [1, 0] {
        dcs[i].stop_relay().await;
        let path = dcs[i].dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            path,
            text.replace(
                "tables = [\"app.items\"]",
                "tables = [\"app.items\", \"app.extra\"]",
            ),
        )
        .unwrap();
        if i == 0 {
            add_relay_settings(&dcs[i], "snapshot = \"initial\"");
        }
        dcs[i].start_relay();
    }
    let done = wait_snapshot_done(&dcs[0], "app.extra").await;
    stop.send(true).unwrap();
    let writes = writer.await.unwrap();
    assert!(writes > 0);
    assert!(
        snapshot_status(&dcs[1], "app.extra").is_none(),
        "b was not asked for a snapshot"
    );
    assert!(
        snapshot_status(&dcs[0], "app.items").is_none(),
        "app.items was captured in a from the start: initial leaves it alone"
    );
    let recorded = dcs[0]
        .conn()
        .await
        .query::<(String, String), _>(
            "SELECT table_name, state FROM logstamp.relay_snapshots ORDER BY table_name",
        )
        .await
        .unwrap();
    assert_eq!(
        recorded,
        [
            ("extra".to_string(), "done".to_string()),
            ("items".to_string(), "captured".to_string())
        ]
    );
    wait_same_rows(&dcs[0], &dcs[1], "app.extra").await;
    wait_in_sync(&dcs, &items, "app.items").await;
    assert_eq!(
        ordered_hash(&dcs[0], "app.extra").await,
        ordered_hash(&dcs[1], "app.extra").await
    );
    let verified = dcs[0].verify(&[&dcs[1]], &[]);
    assert_eq!(verified.code, Some(0), "{}", verified.stderr);
    eprintln!("added table: {writes} writes during its snapshot, {done}");
}

/// Snapshot rows carry exactly the values capture decodes from the binlog, for every kind of
/// column: each equals the before image of a later update of the same row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_rows_read_as_the_binlog_reads_them() {
    let mut dcs = two_dcs(EVERY_KIND).await;
    let mut conn = dcs[0].conn().await;
    conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
    // Keys above i64::MAX too: the snapshot goes on after them as stored.
    for id in [1, u64::MAX - 2, u64::MAX - 1] {
        insert_every_kind(&mut conn, id).await;
    }
    conn.exec_drop("INSERT INTO app.vals (id) VALUES (?)", (u64::MAX,))
        .await
        .unwrap();
    start_relays(&mut dcs, LoopFilterMode::Marker, "200ms").await;
    let (code, done) =
        snapshot_command(&dcs[0], &["--table", "app.vals", "--chunk-rows", "2"]).await;
    assert_eq!(code, Some(0), "{done}");
    assert_eq!(
        (
            done["state"].as_str(),
            done["copied_rows"].as_u64(),
            done["chunks"].as_u64()
        ),
        (Some("done"), Some(4), Some(3)),
        "{done}"
    );
    wait_same_rows(&dcs[0], &dcs[1], "app.vals").await;
    conn.query_drop("UPDATE app.vals SET m = COALESCE(m, 0) + 1")
        .await
        .unwrap();
    wait_until("the updates are published", || {
        let n = dcs[0]
            .published()
            .iter()
            .filter(|c| c.row.kind == ChangeKind::Update)
            .count();
        async move {
            if n == 4 {
                Ok(())
            } else {
                Err(format!("{n} updates"))
            }
        }
    })
    .await;
    let published = dcs[0].published();
    let snapshot: Vec<_> = published
        .iter()
        .filter(|c| c.row.kind == ChangeKind::Insert)
        .collect();
    let updates: Vec<_> = published
        .iter()
        .filter(|c| c.row.kind == ChangeKind::Update)
        .collect();
    assert_eq!(snapshot.len(), 4);
    for (copied, update) in snapshot.iter().zip(&updates) {
        assert_eq!(Some(&copied.row.values), update.row.before.as_ref());
        assert_eq!(copied.row.columns, update.row.columns);
        assert_eq!(copied.row.contract, update.row.contract);
    }
    wait_same_rows(&dcs[0], &dcs[1], "app.vals").await;
    let verified = dcs[0].verify(&[&dcs[1]], &[]);
    assert_eq!(verified.code, Some(0), "{}", verified.stderr);
}
