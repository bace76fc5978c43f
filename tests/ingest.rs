//! The ingest worker against the in-process Kafka cluster and the real MariaDB.

mod support;

use std::time::Duration;

use rand::Rng;

use support::ingest::{COUNT_ALL, Setup};

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
/// points while it holds partitions, and started again each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_at_random_points_loses_and_duplicates_nothing() {
    let setup = Setup::new("ingest_kill", 6, &[("batch.max_rows", "2000")]).await;
    let n = 150_000;
    let steady = setup.start_worker(1);
    let kills = 6;
    let killing = async {
        let mut rng = rand::rng();
        for run in 0..kills {
            let process = setup.spawn_process(2, run);
            process
                .wait_for_log("assigned; reading from the offsets stored in MySQL partitions=logs/", Duration::from_secs(60))
                .await;
            // Somewhere within the next few batches.
            let now = setup.count(COUNT_ALL).await;
            let target = (now + rng.random_range(500..6_000)).min(n);
            setup
                .wait_until_at_least(COUNT_ALL, target, Duration::from_secs(60))
                .await;
            process.kill();
        }
    };
    tokio::join!(setup.feed(0, n, 6), killing);
    let last = setup.spawn_process(2, kills);
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(120)).await;
    assert!(last.terminate(Duration::from_secs(60)).success());
    steady.stop().await.unwrap();
    setup.assert_exactly_once(n, &[1, 2]).await;
}
