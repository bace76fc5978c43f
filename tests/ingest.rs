//! The ingest worker against the in-process Kafka cluster and the real MariaDB.

mod support;

use std::time::Duration;

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
