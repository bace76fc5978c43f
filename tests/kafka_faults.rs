//! The Kafka faults a production fleet meets, on Apache Kafka itself, each ending with every
//! message stored exactly once, or dead-lettered, or (for what Kafka deleted unread) reported:
//! the partition leader moving to another broker of three, a topic of 1,000 partitions over
//! three workers, a producer's aborted transactions (written by kafka-python, not librdkafka),
//! a compacted topic with tombstones, and retention deleting messages a stopped worker had not
//! read. A broker restart mid-ingest is `ingest::a_broker_outage_loses_and_duplicates_nothing`.
//!
//! What Kafka holds is read by kafka-python too, as an oracle that shares no code with the
//! worker.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use logstamp::ingest::kafka::Outgoing;
use mysql_async::prelude::Queryable;
use serde_json::Value;

use support::TestDb;
use support::ingest::{COUNT_ALL, Setup, TOPIC};
use support::kafka::Kafka;
use support::python;

/// Partitions with leaders on three brokers; the leader of partition 0 is stopped (a controlled
/// shutdown hands its leadership over), then the next leader crashes (SIGKILL), while two
/// workers ingest. Each broker comes back before the next fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_leaders_moving_between_three_brokers_lose_and_duplicate_nothing() {
    let kafka = Kafka::cluster(3);
    kafka.create_topic(TOPIC, 6).await;
    let db = TestDb::create("kafka_leaders").await;
    let setup = Setup::with_brokers(
        db,
        &kafka.bootstrap_servers(),
        &[("batch.max_rows", "1000")],
    )
    .await;
    let n: u64 = 80_000;
    let quarter = n / 4;
    let workers: Vec<_> = (1..=2).map(|s| setup.start_worker(s)).collect();
    setup.feed(0, quarter, 6).await;
    setup
        .wait_until_at_least(COUNT_ALL, quarter / 2, Duration::from_secs(60))
        .await;

    for (fault, fed) in [("stopped", 1), ("killed", 2)] {
        let leader = kafka.leader(TOPIC, 0);
        let index = kafka.index_of(leader);
        tokio::task::block_in_place(|| match fault {
            "stopped" => kafka.stop(index),
            _ => kafka.kill(index),
        });
        let moved = wait_for_new_leader(&kafka, leader).await;
        assert_ne!(moved, leader);
        // The workers go on with the partitions' new leaders while the broker is away.
        setup.feed(fed * quarter, (fed + 1) * quarter, 6).await;
        setup
            .wait_until_at_least(
                COUNT_ALL,
                fed * quarter + quarter / 2,
                Duration::from_secs(120),
            )
            .await;
        tokio::task::block_in_place(|| kafka.restart(index));
    }
    setup.feed(3 * quarter, n, 6).await;
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    for worker in workers {
        worker.stop().await.unwrap();
    }
    setup.assert_exactly_once(n, &[1, 2]).await;
}

/// The leader of partition 0 once it is no longer `old` (the metadata takes a moment).
async fn wait_for_new_leader(kafka: &Kafka, old: i32) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader = tokio::task::block_in_place(|| kafka.leader(TOPIC, 0));
        if leader != old && leader >= 0 {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "partition 0's leader is still {leader}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A topic of 1,000 partitions shared by three worker processes: every message once, and an
/// offset row for each partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_of_1000_partitions_over_three_workers_is_stored_exactly_once() {
    const PARTITIONS: i32 = 1000;
    let kafka = Kafka::start();
    kafka.create_topic(TOPIC, PARTITIONS).await;
    let db = TestDb::create("kafka_1000").await;
    let setup = Setup::with_brokers(db, &kafka.bootstrap_servers(), &[]).await;
    let n: u64 = 30_000;
    let mut workers = Vec::new();
    for run in 0..3 {
        workers.push(setup.spawn_process_holding_partitions(run).await);
    }
    setup.feed(0, n, PARTITIONS).await;
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(240)).await;
    for worker in workers {
        let status = worker.terminate(Duration::from_secs(60));
        assert!(status.success(), "{status}");
    }
    let leased: Vec<u32> = (2..=20).collect();
    setup.assert_exactly_once(n, &leased).await;
    let partitions = setup
        .count("SELECT COUNT(*) FROM ingest_offsets WHERE next_offset > 0")
        .await;
    assert_eq!(partitions, PARTITIONS as u64);
}

/// kafka-python writes log lines in transactions and aborts every third one. logstamp reads
/// with `isolation.level=read_committed`: the committed lines are stored once each, no aborted
/// one is, and every partition's stored offset reaches the end of the partition (past the
/// transaction markers, which are offsets too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_transactions_of_another_client_are_never_stored() {
    let python = python::python_with("kafka");
    let kafka = Kafka::start();
    kafka.create_topic(TOPIC, 3).await;
    let db = TestDb::create("kafka_aborted").await;
    let brokers = kafka.bootstrap_servers();
    let setup = Setup::with_brokers(db, &brokers, &[]).await;
    let out = python::run(
        &python,
        "kafka_python_peer.py",
        &["transactions", &brokers, TOPIC, "3", "3000"],
    );
    let written: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seqs = |field: &str| -> BTreeSet<u64> {
        written[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_u64().unwrap())
            .collect()
    };
    let (committed, aborted) = (seqs("committed"), seqs("aborted"));
    assert!(!aborted.is_empty() && committed.len() + aborted.len() == 3000);

    // kafka-python reading read_committed: the committed lines, and where each partition's
    // last one is. A partition's stored offset stops after its last message: a transaction
    // marker or aborted messages after it are skipped when the next message comes.
    let held = held_records(&python, &brokers);
    let read: BTreeSet<u64> = held.iter().filter_map(|r| r[3].as_u64()).collect();
    assert_eq!(read, committed, "what Kafka gives a read_committed reader");

    let worker = setup.start_worker(1);
    wait_for_stored_offsets(&setup, &after_last_record(&held)).await;
    worker.stop().await.unwrap();
    let stored = stored_seqs(&setup).await;
    assert_eq!(stored, committed, "the committed lines");
    assert_eq!(
        setup.count(COUNT_ALL).await,
        committed.len() as u64,
        "each once"
    );
    assert_eq!(stored.intersection(&aborted).count(), 0);
}

/// A compacted topic: each key written many times and some keys deleted by a tombstone. Once
/// Kafka has compacted it, a worker stores exactly the messages Kafka still holds (as
/// kafka-python reads them) and skips and counts the tombstones, reading across the gaps
/// compaction left in the offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_is_stored_as_kafka_keeps_it_with_its_tombstones_skipped() {
    const KEYS: u64 = 500;
    const MESSAGES: u64 = 20_000;
    let python = python::python_with("kafka");
    let kafka = Kafka::start();
    let compacted = [
        ("cleanup.policy", "compact"),
        // Small segments, cleaned as soon as they are closed.
        ("segment.bytes", "1048576"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    kafka.create_topic_with(TOPIC, 1, &compacted).await;
    let db = TestDb::create("kafka_compacted").await;
    let brokers = kafka.bootstrap_servers();
    let setup = Setup::with_brokers(db, &brokers, &[]).await;
    let message = |seq: u64, payload: Option<Vec<u8>>| Outgoing {
        partition: Some(0),
        key: Some(format!("k{}", seq % KEYS).into_bytes()),
        payload,
    };
    let mut messages: Vec<Outgoing> = (0..MESSAGES)
        .map(|seq| message(seq, Some(support::ingest::log_line(seq))))
        .collect();
    // A tombstone for every tenth key, after its last value.
    messages.extend((0..KEYS).step_by(10).map(|k| message(k, None)));
    setup.produce_raw(messages);

    let produced = MESSAGES + KEYS / 10;
    let deadline = Instant::now() + Duration::from_secs(120);
    while held_records(&python, &brokers).len() as u64 >= produced {
        assert!(Instant::now() < deadline, "Kafka did not compact the topic");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // No more cleaning from here on: what Kafka holds stays as the oracle reads it.
    kafka
        .set_topic_settings(
            TOPIC,
            &[("cleanup.policy", "delete"), ("retention.ms", "-1")],
        )
        .await;
    let held = held_records(&python, &brokers);
    let kept: BTreeSet<u64> = held.iter().filter_map(|r| r[3].as_u64()).collect();
    let tombstones = held.iter().filter(|r| r[3].is_null()).count() as u64;
    assert!(tombstones > 0 && (kept.len() as u64) < MESSAGES);

    let worker = setup.start_worker(1);
    wait_for_stored_offsets(&setup, &after_last_record(&held)).await;
    let stats = worker.stats.clone();
    worker.stop().await.unwrap();
    assert_eq!(stored_seqs(&setup).await, kept);
    assert_eq!(stats.snapshot().tombstones, tombstones);
    assert_eq!(setup.count(COUNT_ALL).await, kept.len() as u64, "each once");
    assert_eq!(
        held_records(&python, &brokers),
        held,
        "the topic did not change meanwhile"
    );
}

/// A worker stores part of a topic and stops; more arrives, and the topic's retention deletes
/// most of it before any worker reads it. The next worker reads on from the oldest message
/// Kafka still has, stores each of those once, and says at error level which offsets were
/// lost, counting them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_deleted_by_retention_before_they_were_read_are_reported() {
    let python = python::python_with("kafka");
    let kafka = Kafka::start();
    let small_segments = [("segment.bytes", "1048576")];
    kafka.create_topic_with(TOPIC, 2, &small_segments).await;
    let db = TestDb::create("kafka_retention").await;
    let brokers = kafka.bootstrap_servers();
    let setup = Setup::with_brokers(db, &brokers, &[]).await;

    let first = 10_000;
    setup.feed(0, first, 2).await;
    let worker = setup.spawn_process_holding_partitions(0).await;
    setup
        .wait_for(COUNT_ALL, first, Duration::from_secs(60))
        .await;
    assert!(worker.terminate(Duration::from_secs(60)).success());

    // About 3 MiB a partition: closed segments, which retention may delete.
    let n = 40_000;
    setup.feed(first, n, 2).await;
    kafka
        .set_topic_settings(
            TOPIC,
            &[("segment.bytes", "1048576"), ("retention.ms", "1000")],
        )
        .await;
    let stored_at = (first / 2) as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (0..2).any(|p| kafka.watermarks(TOPIC, p).0 <= stored_at) {
        assert!(Instant::now() < deadline, "retention deleted nothing");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Retention stops deleting (it may have taken the whole partition, the segment written
    // last too), and more arrives: what Kafka holds now stays for the oracle and the worker.
    kafka
        .set_topic_settings(TOPIC, &[("retention.ms", "-1")])
        .await;
    let deleted: i64 = (0..2)
        .map(|p| kafka.watermarks(TOPIC, p).0 - stored_at)
        .sum();
    let last = n + 4_000;
    setup.feed(n, last, 2).await;
    let held = held_records(&python, &brokers);
    let left: BTreeSet<u64> = held.iter().map(|r| r[3].as_u64().unwrap()).collect();
    assert!(left.len() < (last - first) as usize, "some were deleted");
    assert!(
        (n..last).all(|seq| left.contains(&seq)),
        "the last ones are held"
    );

    let worker = setup.spawn_process_holding_partitions(1).await;
    wait_for_stored_offsets(&setup, &after_last_record(&held)).await;
    let log_file = worker.log.clone();
    assert!(worker.terminate(Duration::from_secs(60)).success());
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    let mut expected: BTreeSet<u64> = (0..first).collect();
    expected.extend(&left);
    assert_eq!(stored_seqs(&setup).await, expected);
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("messages deleted before they were read"))
        .collect();
    assert_eq!(said.len(), 2, "once per partition: {log}");
    for line in &said {
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains(&format!("offsets {stored_at}..")), "{line}");
    }
    let counted: i64 = said
        .iter()
        .map(|l| {
            let (_, rest) = l.split_once(" (").unwrap();
            rest.split_whitespace()
                .next()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert_eq!(
        counted, deleted,
        "the offsets said lost are those Kafka deleted"
    );
}

/// Every record Kafka holds of the topic, as kafka-python reads it (read_committed):
/// `[partition, offset, key, seq or null for a tombstone]`.
fn held_records(python: &std::path::Path, brokers: &str) -> Vec<Value> {
    let out = python::run(python, "kafka_python_peer.py", &["read", brokers, TOPIC]);
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    read["records"].as_array().unwrap().clone()
}

/// Per partition of `records`, the offset after its last record.
fn after_last_record(records: &[Value]) -> BTreeMap<i64, i64> {
    let mut after = BTreeMap::new();
    for r in records {
        let (partition, offset) = (r[0].as_i64().unwrap(), r[1].as_i64().unwrap());
        let next = after.entry(partition).or_insert(0);
        *next = (*next).max(offset + 1);
    }
    after
}

/// Waits until each partition's next offset stored in MySQL is `offsets` gives for it.
async fn wait_for_stored_offsets(setup: &Setup, offsets: &BTreeMap<i64, i64>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for (partition, offset) in offsets {
        loop {
            let stored = setup
                .count(&format!(
                    "SELECT CAST(COALESCE(MAX(next_offset), 0) AS UNSIGNED) FROM ingest_offsets \
                     WHERE kafka_partition = {partition}"
                ))
                .await as i64;
            if stored == *offset {
                break;
            }
            assert!(
                stored < *offset,
                "partition {partition}: stored up to {stored}, past its last record"
            );
            assert!(
                Instant::now() < deadline,
                "partition {partition}: stored up to {stored}, not yet {offset}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The `seq` of every stored row.
async fn stored_seqs(setup: &Setup) -> BTreeSet<u64> {
    let mut conn = setup.db.conn().await;
    let seqs: Vec<u64> = conn.query("SELECT seq FROM logs").await.unwrap();
    seqs.into_iter().collect()
}
