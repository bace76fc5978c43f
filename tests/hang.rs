//! Servers that hang: a process stopped with SIGSTOP keeps its TCP connections open and
//! answers nothing, which is what a stalled disk, a saturated host or a path dropping packets
//! look like from outside. Each is a failed server within its bound: seen, reported, and
//! survived with every message stored once after SIGCONT. (A hung shard: `tests/shards.rs`.)

mod support;

use std::time::{Duration, Instant};

use logstamp::id::IdError;
use logstamp::mysql;
use logstamp::store::lease::HeldLease;
use logstamp::store::migrate;
use support::TestDb;
use support::ingest::{COUNT_ALL, Process, SUM_OFFSETS, Setup};
use support::mariadb::MariaDb;

/// The worker's bound on a write (`store.write_timeout`).
const WRITE_BOUND: Duration = Duration::from_secs(2);

/// The bound of the readiness check's Kafka metadata request.
const KAFKA_BOUND: Duration = Duration::from_secs(2);

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
    let (status, ready) = loop {
        let answer = get(&address, "/health/ready").await;
        if answer.0 != 200 {
            break answer;
        }
        assert!(
            paused_at.elapsed() < WRITE_BOUND + Duration::from_secs(20),
            "still ready while the database hangs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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
    let log = worker.log.clone();
    let status = worker.terminate(Duration::from_secs(60));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "worker {status}: {text}");
    let told = text
        .lines()
        .filter(|l| l.contains("stopped taking writes"))
        .count();
    assert_eq!(told, 1, "said once, not once per retry: {text}");
    assert_eq!(
        setup.count(SUM_OFFSETS).await,
        n,
        "offsets count every message"
    );
    setup
        .assert_exactly_once(n, &(2..=20).collect::<Vec<u32>>())
        .await;
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
    let (status, ready) = loop {
        let answer = get(&address, "/health/ready").await;
        if answer.0 != 200 {
            break answer;
        }
        assert!(
            paused_at.elapsed() < Duration::from_secs(30),
            "still ready while the broker hangs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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
    assert_eq!(
        setup.count(SUM_OFFSETS).await,
        n,
        "offsets count every message"
    );
    setup
        .assert_exactly_once(n, &(2..=20).collect::<Vec<u32>>())
        .await;
}

/// The coordination database hangs while a process holds a service-ID lease: the renewal
/// gets no answer, and the holder stops stamping before its lease could expire, so no other
/// holder can stamp under that ID while it still does. After SIGCONT another holder claims the
/// ID and stamps above every ID the first issued.
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
    server.resume();
    eprintln!("hung coordination database: stamping stopped {lost_after:?} after the pause");

    let successor = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    assert!(successor.generator().next_id().unwrap() > before);
    successor.release().await.unwrap();
    assert!(!lease.release().await.unwrap().row_released);
}

/// `serve`'s database hangs after a first request pooled a connection to it: requests then
/// answer 503 or 504 within the connection wait (10 s) and the statement bound, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_database_gets_serve_answers_in_bounded_time() {
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
    server.resume();
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

/// The worker's `logstamp_ingest_records_stored_total`.
async fn stored_total(address: &str) -> f64 {
    let (_, metrics) = get(address, "/metrics").await;
    support::http::sample(&metrics, "logstamp_ingest_records_stored_total").unwrap_or(0.0)
}
