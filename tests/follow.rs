//! `query --follow` against MariaDB: two writers (service IDs 1 and 2) whose batches commit out
//! of ID order, the earlier block held open while the later one commits, once before its rows
//! are inserted and once after. The follower must print every row exactly once.

mod support;

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use tokio::sync::mpsc;

use logstamp::store::follow::{self, Follow, FollowFrom};
use logstamp::store::{WriteOutcome, Writer};
use logstamp::transform::Mapper;
use support::TestDb;

fn messages(ids: &[u64]) -> Vec<(u64, serde_json::Value)> {
    ids.iter()
        .map(|id| {
            (
                *id,
                serde_json::json!({"time": "2026-01-01T00:00:00Z", "level": "info",
                                   "message": format!("row {id}")}),
            )
        })
        .collect()
}

/// Receives printed IDs until `want` of them arrived, or fails after a deadline.
async fn receive(rx: &mut mpsc::UnboundedReceiver<u64>, want: usize, what: &str) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(id)) => got.push(id),
            other => panic!("{what}: got {} of {want} rows ({other:?})", got.len()),
        }
    }
    got
}

/// Nothing more is printed for a while (a few polls).
async fn quiet(rx: &mut mpsc::UnboundedReceiver<u64>, what: &str) {
    if let Ok(extra) = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await {
        panic!("{what}: printed {extra:?} too");
    }
}

async fn committed(writer: &Writer, batch: &logstamp::store::Batch) {
    let outcome = writer.write(batch).await.unwrap();
    assert!(matches!(outcome, WriteOutcome::Committed(_)), "{outcome:?}");
}

#[tokio::test]
async fn rows_committed_out_of_id_order_are_printed_once_each() {
    let db = TestDb::create("follow").await;
    let settings = db.settings(&[
        ("store.event_time", "event_time"),
        ("store.give_up_after", "20s"),
    ]);
    db.migrate(&settings).await;
    let layout = settings.id.layout;
    let spec = settings.log_table();
    let mapper = Mapper::new(&settings.store.columns);
    // Two workers: each its own writer (pool) and service ID, on its own Kafka partition.
    let (worker_a, worker_b) = (support::writer(&settings), support::writer(&settings));
    let now = chrono::Utc::now().timestamp() as u64;
    let ids = |service: u32, second: u64, from: u32, n: u32| -> Vec<u64> {
        (from..from + n)
            .map(|c| layout.encode(second, service, c).unwrap())
            .collect()
    };

    // The follower, from a few seconds back, sends what it prints.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let plan = Follow {
        from: FollowFrom::Id(layout.first_id_at(now as i64 - 10).unwrap()),
        window: settings.store.commit_window().unwrap(),
        poll: Duration::from_millis(100),
        filter: Vec::new(),
        bound: settings.mysql.bound_on(&settings.mysql.url),
    };
    let mut follower_conn = db.conn().await;
    let follower_spec = spec.clone();
    let follower = tokio::spawn(async move {
        follow::follow(
            &mut follower_conn,
            &follower_spec,
            &layout,
            &plan,
            |record| match tx.send(record.id) {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => ControlFlow::Break(()),
            },
        )
        .await
    });

    // Each worker's first batch creates its partition's offset row.
    let a0 = ids(1, now - 3, 0, 5);
    let b0 = ids(2, now - 3, 0, 5);
    committed(&worker_a, &support::batch(&mapper, 0, 0, &messages(&a0))).await;
    committed(&worker_b, &support::batch(&mapper, 1, 0, &messages(&b0))).await;
    let mut printed = receive(&mut rx, 10, "the first batches").await;

    // 1. A's batch (the earlier IDs) waits before inserting: another session holds its
    //    partition's offset row. B's later batch commits; it is printed, A's is not yet.
    let mut holder = db.conn().await;
    holder
        .query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .unwrap();
    holder.query_drop("BEGIN").await.unwrap();
    holder
        .query_drop(
            "SELECT * FROM ingest_offsets WHERE consumer_group = 'g' AND topic = 'logs' \
             AND kafka_partition = 0 FOR UPDATE",
        )
        .await
        .unwrap();
    let a1 = ids(1, now - 2, 0, 50);
    let b1 = ids(2, now - 1, 0, 50);
    assert!(
        a1.iter().max() < b1.iter().min(),
        "A's block is the earlier"
    );
    let a1_batch = support::batch(&mapper, 0, 5, &messages(&a1));
    let writing_a = {
        let worker_a = worker_a.clone();
        tokio::spawn(async move { worker_a.write(&a1_batch).await })
    };
    committed(&worker_b, &support::batch(&mapper, 1, 5, &messages(&b1))).await;
    let got = receive(&mut rx, 50, "B's batch while A's waits").await;
    assert_eq!(got, b1);
    quiet(&mut rx, "while A's batch waits").await;
    // A follower that went on from the last ID printed would now skip all of A's rows.
    holder.query_drop("ROLLBACK").await.unwrap();
    assert!(matches!(
        writing_a.await.unwrap().unwrap(),
        WriteOutcome::Committed(_)
    ));
    let got = receive(&mut rx, 50, "A's batch after B's").await;
    assert_eq!(got, a1);
    printed.extend(b1.iter().chain(&a1));

    // 2. A's next batch waits after inserting its rows (another session holds the zone-map
    //    row it adds to last). B's later batch commits meanwhile. The follower's locking read
    //    waits for A's transaction, then prints both, each row once.
    let a2 = ids(1, now, 0, 40);
    let b2 = ids(2, now + 1, 0, 40);
    let bucket = logstamp::store::zone_plan::bucket_start(a2[0]);
    holder
        .exec_drop(
            "INSERT INTO logstamp_zone_map VALUES ('logs', ?, 1, '2026-01-01', '2026-01-01', 0) \
             ON DUPLICATE KEY UPDATE n = n",
            (bucket,),
        )
        .await
        .unwrap();
    holder.query_drop("BEGIN").await.unwrap();
    holder
        .exec_drop(
            "SELECT * FROM logstamp_zone_map WHERE table_name = 'logs' AND bucket_start = ? \
             AND service_id = 1 FOR UPDATE",
            (bucket,),
        )
        .await
        .unwrap();
    let a2_batch = support::batch(&mapper, 0, 55, &messages(&a2));
    let writing_a = {
        let worker_a = worker_a.clone();
        tokio::spawn(async move { worker_a.write(&a2_batch).await })
    };
    // Wait until A's rows are inserted (uncommitted): its upsert of the zone map, which comes
    // after them, waits.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: Option<u64> = holder
            .query_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE 'INSERT INTO `logstamp_zone_map`%'",
            )
            .await
            .unwrap();
        if waiting == Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A's batch never waited on the zone map"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    committed(&worker_b, &support::batch(&mapper, 1, 55, &messages(&b2))).await;
    holder.query_drop("ROLLBACK").await.unwrap();
    assert!(matches!(
        writing_a.await.unwrap().unwrap(),
        WriteOutcome::Committed(_)
    ));
    let got = receive(&mut rx, 80, "A's and B's second batches").await;
    assert_eq!(
        got.iter().copied().collect::<BTreeSet<u64>>(),
        a2.iter().chain(&b2).copied().collect::<BTreeSet<u64>>()
    );
    printed.extend(got);
    quiet(&mut rx, "after every batch").await;

    // Every row once: what was printed is what the table holds, with no repeats.
    let stored: Vec<u64> = holder
        .query("SELECT id FROM logs ORDER BY id")
        .await
        .unwrap();
    let unique: BTreeSet<u64> = printed.iter().copied().collect();
    assert_eq!(unique.len(), printed.len(), "a row was printed twice");
    assert_eq!(unique.into_iter().collect::<Vec<_>>(), stored);
    follower.abort();
    holder.disconnect().await.unwrap();
    worker_a.close().await.unwrap();
    worker_b.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_past_its_commit_window_is_not_committed() {
    let db = TestDb::create("follow_late").await;
    let settings = db.settings(&[
        ("store.give_up_after", "10s"),
        ("store.commit_window", "70s"),
    ]);
    db.migrate(&settings).await;
    let layout = settings.id.layout;
    let mapper = Mapper::new(&settings.store.columns);
    let writer = support::writer(&settings);
    let now = chrono::Utc::now().timestamp() as u64;
    // Stamped 71 s ago: past the window of 70 s, by the database's clock.
    let late = [layout.encode(now - 71, 1, 0).unwrap()];
    let error = writer
        .write(&support::batch(&mapper, 0, 0, &messages(&late)))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("store.commit_window"), "{error}");
    assert!(!error.is_transient());
    let mut conn = db.conn().await;
    let rows: Option<u64> = conn.query_first("SELECT COUNT(*) FROM logs").await.unwrap();
    assert_eq!(rows, Some(0));
    let offsets: Option<u64> = conn
        .query_first("SELECT COUNT(*) FROM ingest_offsets")
        .await
        .unwrap();
    assert_eq!(offsets, Some(0));
    // In time, it commits.
    let fresh = [layout.encode(now - 5, 1, 0).unwrap()];
    let outcome = writer
        .write(&support::batch(&mapper, 0, 0, &messages(&fresh)))
        .await
        .unwrap();
    assert!(matches!(outcome, WriteOutcome::Committed(_)));
    conn.disconnect().await.unwrap();
    writer.close().await.unwrap();
}
