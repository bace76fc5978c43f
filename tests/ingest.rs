//! The ingest worker against the in-process Kafka cluster and the real MariaDB.

mod support;

use std::time::Duration;

use logstamp::ingest::IngestCounts;
use support::ingest::{COUNT_ALL, SUM_OFFSETS, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_store_every_message_exactly_once() {
    let setup = Setup::new("ingest_three", 6, &[]).await;
    let n = 300_000;
    let workers: Vec<_> = (1..=3).map(|s| setup.start_worker(s)).collect();
    setup.feed(0, n, 6).await;
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    let mut consumed = 0;
    for worker in workers {
        let stats = worker.stats.clone();
        worker.stop().await.unwrap();
        let counts = stats.snapshot();
        assert_eq!(counts.dead_lettered, 0);
        consumed += counts.stored;
    }
    assert_eq!(consumed, n, "rows the workers say they stored");
    setup.assert_exactly_once(n, &[1, 2, 3]).await;
}

/// One worker runs throughout; another, a separate process, is killed with SIGKILL at random
/// points while it holds partitions, and started again each time. It leases its service ID
/// (auto): each restart takes a free one while the killed process's lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_at_random_points_loses_and_duplicates_nothing() {
    let setup = Setup::new("ingest_kill", 6, &[("batch.max_rows", "2000")]).await;
    let n = 150_000;
    let steady = setup.start_worker(1);
    let kills = 6;
    let killing = setup.kill_processes_at_random_points(kills, COUNT_ALL, n);
    tokio::join!(setup.feed(0, n, 6), killing);
    let last = setup.spawn_process_holding_partitions(kills).await;
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    assert!(last.terminate(Duration::from_secs(60)).success());
    steady.stop().await.unwrap();
    let service_ids: Vec<u32> = (1..=20).collect();
    setup.assert_exactly_once(n, &service_ids).await;
}

/// Workers joining and leaving mid-stream move partitions between them; nothing is lost or
/// stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_joining_and_leaving_mid_stream_rebalance_without_loss() {
    let setup = Setup::new("ingest_rebalance", 6, &[("batch.max_rows", "1000")]).await;
    let n = 120_000;
    let first = setup.start_worker(1);
    let second = setup.start_worker(2);
    let join = async {
        setup
            .wait_until_at_least(COUNT_ALL, n / 4, Duration::from_secs(60))
            .await;
        let third = setup.start_worker(3);
        third.wait_for_partitions(Duration::from_secs(60)).await;
        third
    };
    // The second half is produced once the third worker holds partitions, so it has messages
    // to store however fast the others are.
    let ((), third) = tokio::join!(setup.feed(0, n / 2, 6), join);
    let leave = async {
        setup
            .wait_until_at_least(COUNT_ALL, n / 2, Duration::from_secs(60))
            .await;
        second.stop().await.unwrap();
    };
    tokio::join!(setup.feed(n / 2, n, 6), leave);
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    let third_stats = third.stats.clone();
    third.stop().await.unwrap();
    first.stop().await.unwrap();
    setup.assert_exactly_once(n, &[1, 2, 3]).await;
    assert!(
        third_stats.snapshot().stored > 0,
        "the worker that joined took partitions over"
    );
}

/// The broker goes away for a while and comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_outage_loses_and_duplicates_nothing() {
    let setup = Setup::new("ingest_broker", 6, &[("batch.max_rows", "1000")]).await;
    through_an_outage(&setup, 60_000, async |setup, n| {
        // A restart of the broker process; it stays down past the session timeout (3 s), so
        // the group loses its members.
        tokio::task::block_in_place(|| setup.cluster().stop(0));
        tokio::time::sleep(Duration::from_secs(4)).await;
        tokio::task::block_in_place(|| setup.cluster().restart(0));
        n / 2
    })
    .await;
}

/// Two workers take messages `0..n`: the first half is fed, and once a quarter is stored
/// `outage` runs (given `n`; it may produce from `n / 2` on meanwhile, and returns where feeding
/// goes on); then the rest. At the end every message is stored exactly once. Returns the
/// workers' final counts.
async fn through_an_outage(
    setup: &Setup,
    n: u64,
    outage: impl AsyncFnOnce(&Setup, u64) -> u64,
) -> Vec<IngestCounts> {
    let workers: Vec<_> = (1..=2).map(|s| setup.start_worker(s)).collect();
    setup.feed(0, n / 2, 6).await;
    setup
        .wait_until_at_least(COUNT_ALL, n / 4, Duration::from_secs(60))
        .await;
    let next = outage(setup, n).await;
    setup.feed(next, n, 6).await;
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    let mut counts = Vec::new();
    for worker in workers {
        let stats = worker.stats.clone();
        worker.stop().await.unwrap();
        counts.push(stats.snapshot());
    }
    setup.assert_exactly_once(n, &[1, 2]).await;
    counts
}

/// SIGTERM-like shutdown while messages are flowing: everything consumed is committed, rows
/// and offsets agree, and a later worker goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_shutdown_under_load_commits_everything_consumed() {
    let setup = Setup::new("ingest_shutdown", 6, &[("batch.max_rows", "500")]).await;
    let n = 60_000;
    setup.produce(0, n, 6);
    let worker = setup.start_worker(1);
    setup
        .wait_until_at_least(COUNT_ALL, 5_000, Duration::from_secs(60))
        .await;
    let stats = worker.stats.clone();
    worker.stop().await.unwrap();
    let counts = stats.snapshot();
    let rows = setup.count(COUNT_ALL).await;
    assert_eq!(counts.consumed, rows, "every message consumed is stored");
    assert_eq!(counts.stored, rows);
    // Offsets start at 0 with no gaps, so the stored next offsets add up to the rows.
    let offsets = setup.count(SUM_OFFSETS).await;
    assert_eq!(offsets, rows, "the offsets committed are those of the rows");
    // Kafka has the same offsets, for lag tools.
    let mut conn = setup.db.conn().await;
    let in_mysql: Vec<(i32, i64)> = mysql_async::prelude::Queryable::query(
        &mut conn,
        "SELECT kafka_partition, next_offset FROM ingest_offsets ORDER BY kafka_partition",
    )
    .await
    .unwrap();
    let in_kafka = support::ingest::committed_in_kafka(&setup.brokers, "ingest-test", 6);
    let in_kafka: Vec<(i32, i64)> = in_kafka.into_iter().filter(|(_, o)| *o > 0).collect();
    assert_eq!(in_kafka, in_mysql);

    let next = setup.start_worker(2);
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    next.stop().await.unwrap();
    setup.assert_exactly_once(n, &[1, 2]).await;
}

/// Malformed, non-UTF-8, oversized, unmappable and tombstone messages mixed into a stream: each
/// good one is stored, each bad one dead-lettered (table and topic) with its coordinates and
/// reason, tombstones are skipped and counted, and every offset advances.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_messages_are_dead_lettered_and_the_stream_goes_on() {
    let setup = Setup::new(
        "ingest_bad",
        3,
        &[
            ("ingest.max_message_bytes", "4096"),
            ("ingest.dead_letter_topic", "logs-dead"),
        ],
    )
    .await;
    setup.cluster().create_topic("logs-dead", 1).await;
    let oversized =
        serde_json::to_vec(&serde_json::json!({"seq": 0, "message": "x".repeat(5000)})).unwrap();
    let bad: [(&str, Option<Vec<u8>>); 5] = [
        ("message is not JSON", Some(b"{\"seq\": 1, broken".to_vec())),
        ("not valid UTF-8", Some(vec![0xff, 0xfe, b'{'])),
        ("over ingest.max_message_bytes", Some(oversized)),
        ("column seq", Some(br#"{"seq": "not a number"}"#.to_vec())),
        ("tombstone", None),
    ];
    let partitions = 3;
    let mut messages = Vec::new();
    // (partition, offset, expected reason) of each bad message; offsets per partition.
    let mut expected_dead = Vec::new();
    let mut offsets = [0i64; 3];
    let mut tombstones = 0;
    let mut good = 0u64;
    for k in 0..3_000usize {
        let partition = (k % partitions) as i32;
        let offset = offsets[partition as usize];
        offsets[partition as usize] += 1;
        let payload = if k % 10 == 3 {
            let (reason, payload) = &bad[(k / 10) % bad.len()];
            match payload {
                Some(_) => expected_dead.push((partition, offset, *reason)),
                None => tombstones += 1,
            }
            payload.clone()
        } else {
            good += 1;
            Some(support::ingest::log_line(good - 1))
        };
        messages.push(logstamp::ingest::kafka::Outgoing {
            partition: Some(partition),
            key: None,
            payload,
        });
    }
    setup.produce_raw(messages);
    let worker = setup.start_worker(1);
    setup
        .wait_for(COUNT_ALL, good, Duration::from_secs(60))
        .await;
    setup
        .wait_for(SUM_OFFSETS, 3_000, Duration::from_secs(60))
        .await;
    let dead = expected_dead.len() as u64;
    let stats = worker.stats.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stats.snapshot().dead_letters_published < dead {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            stats.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.stop().await.unwrap();

    setup.assert_exactly_once(good, &[1]).await;
    let counts = stats.snapshot();
    assert_eq!(counts.stored, good);
    assert_eq!(counts.dead_lettered, dead);
    assert_eq!(counts.tombstones, tombstones);
    assert_eq!(counts.dead_letters_unpublished, 0);

    let mut conn = setup.db.conn().await;
    let stored: Vec<(i32, i64, String, Option<Vec<u8>>)> = mysql_async::prelude::Queryable::query(
        &mut conn,
        "SELECT kafka_partition, kafka_offset, reason, raw FROM dead_letters \
         ORDER BY kafka_partition, kafka_offset",
    )
    .await
    .unwrap();
    expected_dead.sort();
    assert_eq!(stored.len(), expected_dead.len());
    for ((partition, offset, reason, raw), (p, o, r)) in stored.iter().zip(&expected_dead) {
        assert_eq!((partition, offset), (p, o));
        assert!(reason.contains(r), "{reason:?} does not say {r:?}");
        assert!(
            raw.as_ref()
                .is_some_and(|raw| !raw.is_empty() && raw.len() <= 4096)
        );
    }
    let topic_letters = support::ingest::read_topic(
        &setup.cluster().bootstrap_servers(),
        "logs-dead",
        dead as usize,
    );
    assert_eq!(topic_letters.len(), expected_dead.len());
    for (key, reason) in &topic_letters {
        assert!(key.starts_with("logs/"), "{key}");
        assert!(
            bad.iter().any(|(r, _)| reason.contains(r)),
            "unexpected reason {reason:?}"
        );
    }
}

/// `ingest.max_records_per_second` holds a worker to that rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rate_limit_holds_the_worker_back() {
    let setup = Setup::new(
        "ingest_rate",
        2,
        &[("ingest.max_records_per_second", "2000")],
    )
    .await;
    let n = 6_000;
    setup.produce(0, n, 2);
    let started = std::time::Instant::now();
    let worker = setup.start_worker(1);
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(60)).await;
    let elapsed = started.elapsed();
    worker.stop().await.unwrap();
    // A burst of one second's worth, then 2,000 a second: at least 2 s for 6,000.
    assert!(
        elapsed >= Duration::from_millis(1900),
        "6,000 messages in {elapsed:?} at 2,000 a second"
    );
    setup.assert_exactly_once(n, &[1]).await;
}

/// MariaDB goes away for a while (a private server, stopped and started again) while messages
/// keep coming: the workers retry their batches and go on; nothing is lost or stored twice.
/// With a memory budget of a few batches, the messages that arrive meanwhile fill it: each
/// worker stops taking messages, and a second later pauses its partitions, then resumes them
/// when the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_outage_loses_and_duplicates_nothing() {
    let (mut server, setup) = Setup::on_private_server(
        71,
        "ingest_db",
        6,
        &[
            ("batch.max_rows", "1000"),
            ("store.give_up_after", "120s"),
            ("ingest.max_buffered_bytes", "1048576"),
        ],
    )
    .await;
    let counts = through_an_outage(&setup, 60_000, async |setup, n| {
        server.stop().await;
        // Messages keep arriving while the database is down.
        setup.produce(n / 2, 3 * n / 4, 6);
        tokio::time::sleep(Duration::from_secs(3)).await;
        server.restart().await;
        3 * n / 4
    })
    .await;
    let paused: u64 = counts.iter().map(|c| c.partitions_paused).sum();
    let reached: u64 = counts.iter().map(|c| c.budget_reached).sum();
    assert!(paused >= 1, "no worker paused its partitions: {counts:?}");
    assert!(reached >= paused, "{counts:?}");
}

/// MariaDB stays away longer than `store.give_up_after`: the worker stops with the database's
/// error, and what it committed before is whole (every stored offset matches its rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_gone_past_give_up_after_stops_the_worker_with_nothing_partial() {
    let (mut server, setup) = Setup::on_private_server(
        72,
        "ingest_give_up",
        3,
        &[
            ("batch.max_rows", "500"),
            ("store.give_up_after", "2s"),
            // Slow enough that messages are still waiting when the database goes.
            ("ingest.max_records_per_second", "5000"),
        ],
    )
    .await;
    let n = 30_000;
    setup.produce(0, n, 3);
    let worker = setup.start_worker(1);
    setup
        .wait_until_at_least(COUNT_ALL, 1_000, Duration::from_secs(60))
        .await;
    server.stop().await;
    let stopped = tokio::time::timeout(Duration::from_secs(60), worker.task)
        .await
        .expect("the worker gives up within a minute")
        .unwrap();
    match stopped {
        Err(logstamp::ingest::IngestError::Store(e)) => assert!(e.is_transient(), "{e}"),
        other => panic!("expected the database's error, got {other:?}"),
    }
    server.restart().await;
    let rows = setup.count(COUNT_ALL).await;
    let offsets = setup.count(SUM_OFFSETS).await;
    assert_eq!(rows, offsets, "rows and offsets were committed together");
    assert!(rows < n);
}
