//! The main exactly-once test against a Kafka-API broker running as a process of its own
//! (nisshi, a Kafka-compatible broker), with the workers as `logstamp ingest` processes: the
//! real network path, real group coordination, nothing in the test's process but the checks.
//!
//! Needs `nisshi` on the PATH (or `LOGSTAMP_TEST_NISSHI` naming it):
//! `cargo install nisshi@0.7.0 --locked --ignore-rust-version --no-default-features --features dynostore`.

mod support;

use std::time::Duration;

use support::ingest::{COUNT_ALL, Setup, TOPIC};
use support::nisshi::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_worker_processes_against_a_broker_process_store_exactly_once() {
    let broker = Broker::start();
    broker.create_topic(TOPIC, 6).await;
    let db = support::TestDb::create("ingest_nisshi").await;
    let setup = Setup::with_brokers(db, &broker.address, &[]).await;
    let n = 300_000;
    let brokers = broker.address.clone();
    tokio::task::spawn_blocking(move || support::ingest::produce_logs(&brokers, 0, n, 6))
        .await
        .unwrap();
    let workers: Vec<_> = ["1", "2", "3"]
        .iter()
        .enumerate()
        .map(|(run, id)| setup.spawn_process(id, run))
        .collect();
    setup.wait_for(COUNT_ALL, n, Duration::from_secs(300)).await;
    for worker in workers {
        assert!(worker.terminate(Duration::from_secs(60)).success());
    }
    setup.assert_exactly_once(n, &[1, 2, 3]).await;
}
