//! Metrics and health of a running `logstamp ingest` process, scraped over HTTP and checked
//! against what it processed (the relay's are checked in `relay.rs`, with its servers).

mod support;

use std::time::Duration;

use mysql_async::prelude::Queryable;
use support::http::{get, poll, readiness_becomes, sample, served_address};
use support::ingest::{COUNT_ALL, Process, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_its_totals_and_readiness_follows_kafka() {
    const N: u64 = 2_000;
    let setup = Setup::new("telemetry", 3, &[("batch.max_rows", "300")]).await;
    setup.produce(0, N, 3);
    let worker = setup.spawn_process("auto", 0);
    let address = serving_address(&worker).await;

    assert_eq!(get(&address, "/health/live"), (200, "live\n".into()));
    setup.wait_for(COUNT_ALL, N, Duration::from_secs(120)).await;
    let stored = format!("{N}");
    let (_, metrics) = poll(&address, "/metrics", Duration::from_secs(30), |_, body| {
        sample(body, "logstamp_ingest_records_stored_total") == stored.parse().ok()
    })
    .await;
    let value =
        |name: &str| sample(&metrics, name).unwrap_or_else(|| panic!("no {name} in:\n{metrics}"));
    assert_eq!(value("logstamp_ingest_records_consumed_total"), N as f64);
    assert_eq!(value("logstamp_ingest_records_dead_lettered_total"), 0.0);
    assert_eq!(value("logstamp_lease_held"), 1.0);
    assert_eq!(value("logstamp_ingest_partitions"), 3.0);
    assert_eq!(value("logstamp_id_clock_back_events_total"), 0.0);
    // Every committed batch is in both histograms, and the rows add up to what was stored.
    let batches = value("logstamp_ingest_batches_total");
    assert!(
        batches >= (N / 300) as f64,
        "{batches} batches of at most 300 rows"
    );
    assert_eq!(value("logstamp_ingest_batch_seconds_count"), batches);
    assert_eq!(value("logstamp_ingest_batch_rows_count"), batches);
    assert_eq!(value("logstamp_ingest_batch_rows_sum"), N as f64);
    assert_eq!(
        value("logstamp_ingest_batch_rows_bucket{le=\"+Inf\"}"),
        batches
    );

    // Every partition caught up, once the offsets committed to Kafka reach the next
    // statistics report (every 5 s).
    let lag_of = |partition: i32| {
        format!("logstamp_ingest_consumer_lag{{topic=\"logs\",partition=\"{partition}\"}}")
    };
    poll(&address, "/metrics", Duration::from_secs(30), |_, body| {
        (0..3).all(|p| sample(body, &lag_of(p)) == Some(0.0))
    })
    .await;

    readiness_becomes(&address, 200).await;
    tokio::task::block_in_place(|| setup.cluster().stop(0));
    let body = readiness_becomes(&address, 503).await;
    assert!(body.contains("Kafka"), "{body}");
    tokio::task::block_in_place(|| setup.cluster().restart(0));
    readiness_becomes(&address, 200).await;

    let status = worker.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status}");
}

/// A global status counter of the server, read on `conn`.
/// The address a worker serves its telemetry on, once it says so in its log.
async fn serving_address(worker: &Process) -> String {
    worker
        .wait_for_log("serving /metrics", Duration::from_secs(60))
        .await;
    let log = std::fs::read_to_string(&worker.log).unwrap();
    served_address(&log).unwrap_or_else(|| panic!("no address in the log: {log}"))
}

async fn server_status(conn: &mut mysql_async::Conn, name: &str) -> u64 {
    let row: Option<(String, u64)> = conn
        .exec_first("SHOW GLOBAL STATUS WHERE Variable_name = ?", (name,))
        .await
        .unwrap();
    row.unwrap_or_else(|| panic!("no status {name}")).1
}

/// `/health/ready` cannot be used to open MySQL connections at will: 200 requests at once
/// cost the worker's private server a probe or two, not a connection each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_requests_at_once_keep_mysql_connections_bounded() {
    const REQUESTS: usize = 200;
    let (server, setup) = Setup::on_private_server(73, "ready_burst", 1, &[]).await;
    let worker = setup.spawn_process("auto", 0);
    let address = serving_address(&worker).await;
    readiness_becomes(&address, 200).await;

    // The server is this test's alone: its counters see the worker and this connection only.
    let mut conn = server.conn().await;
    conn.query_drop("FLUSH STATUS").await.unwrap();
    let connected = server_status(&mut conn, "Threads_connected").await;
    let connections = server_status(&mut conn, "Connections").await;
    let answers = tokio::task::spawn_blocking(move || {
        let start = std::sync::Barrier::new(REQUESTS);
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..REQUESTS)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        get(&address, "/health/ready")
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        })
    })
    .await
    .unwrap();
    let opened = server_status(&mut conn, "Connections").await - connections;
    let most = server_status(&mut conn, "Max_used_connections").await;

    // A probe or two (a second if the burst outlasts the cached answer), plus the few the
    // idle worker itself may open meanwhile. Without the shared check: one per request.
    assert!(
        opened <= 5,
        "{opened} connections opened for {REQUESTS} requests"
    );
    assert!(
        most <= connected + 3,
        "{most} connections at once, {connected} before"
    );
    assert!(
        answers.iter().all(|a| *a == (200, "ready\n".to_string())),
        "{:?}",
        answers.iter().find(|a| a.0 != 200)
    );

    let status = worker.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status}");
}

#[test]
fn an_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    // Both bind before they connect anywhere, so no server is needed to see it.
    for command in [&["ingest"][..], &["relay", "run"]] {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .env_clear()
            .env("LOGSTAMP__TELEMETRY__LISTEN", &address)
            .env("LOGSTAMP__MYSQL__URL", "mysql://root@127.0.0.1:1/unused")
            .args(command)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{command:?}: {stderr}");
        assert!(stderr.contains(&address), "{command:?}: {stderr}");
        assert!(stderr.contains("already in use"), "{command:?}: {stderr}");
    }
}

/// Workers on one host share one setting, a port range: the first takes the free port of the
/// range, the next (the range being full) a free port of the system, saying so; each lease
/// records where its worker serves, which `leases list --format prometheus` gives Prometheus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_sharing_a_port_range_each_serve_and_are_listed_for_prometheus() {
    let setup = Setup::new("telemetry_range", 2, &[]).await;
    // A range of two ports whose first a sibling holds.
    let (held, first) = loop {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let first = held.local_addr().unwrap().port();
        if first < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", first + 1)).is_ok() {
            break (held, first);
        }
    };
    let range = format!("127.0.0.1:{first}-{}", first + 1);
    let listen = [("telemetry.listen", range.as_str())];
    let one = setup.spawn_process_with("auto", 0, &listen);
    let one_address = serving_address(&one).await;
    assert_eq!(one_address, format!("127.0.0.1:{}", first + 1));
    let two = setup.spawn_process_with("auto", 1, &listen);
    let two_address = serving_address(&two).await;
    let log = std::fs::read_to_string(&two.log).unwrap();
    assert!(
        log.contains("every port of telemetry.listen is in use"),
        "{log}"
    );
    let two_port: u16 = two_address.rsplit(':').next().unwrap().parse().unwrap();
    assert!(two_port != first && two_port != first + 1, "{two_address}");
    for address in [&one_address, &two_address] {
        assert_eq!(get(address, "/health/live"), (200, "live\n".into()));
    }

    // Each address is recorded once its worker holds its lease; read them as Prometheus would.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (groups, targets) = loop {
        let listed = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .env_clear()
            .arg("--config")
            .arg(setup.config_file("leases"))
            .args(["leases", "list", "--format", "prometheus"])
            .output()
            .unwrap();
        assert!(listed.status.success(), "{listed:?}");
        let groups: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        let mut targets: Vec<(String, String)> = groups
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let label = &g["labels"]["logstamp_service_id"];
                (
                    g["targets"][0].as_str().unwrap().to_string(),
                    label.as_str().unwrap().to_string(),
                )
            })
            .collect();
        targets.sort();
        if targets.len() == 2 || std::time::Instant::now() > deadline {
            break (groups, targets);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut expected = vec![one_address.clone(), two_address.clone()];
    expected.sort();
    assert_eq!(
        targets.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
        expected,
        "{groups}"
    );
    // Each target carries the service ID of a distinct lease.
    assert_ne!(targets[0].1, targets[1].1, "{groups}");

    for worker in [one, two] {
        let status = worker.terminate(Duration::from_secs(60));
        assert!(status.success(), "{status}");
    }
    drop(held);
}
