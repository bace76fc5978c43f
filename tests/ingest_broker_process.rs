//! The main exactly-once test against Apache Kafka, with the workers as `logstamp ingest`
//! processes: the real network path, real group coordination, nothing in the test's process
//! but the checks.

mod support;

use std::time::Duration;

use support::ingest::{COUNT_ALL, Setup, TOPIC};
use support::kafka::Kafka;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_worker_processes_against_a_broker_process_store_exactly_once() {
    let kafka = Kafka::start();
    kafka.create_topic(TOPIC, 6).await;
    let db = support::TestDb::create("ingest_kafka").await;
    let brokers = kafka.bootstrap_servers();
    let setup = Setup::with_brokers(db, &brokers, &[]).await;
    let n = 300_000;
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

/// `bench ingest --brokers` against the broker process: every stage is reported in order, and
/// the consumer alone and the writer alone each read or wrote the whole backlog with CPU of their
/// own measured, so the worker's CPU can be set beside what the Kafka client and the writer
/// cost by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_ingest_against_a_broker_process_measures_each_part_alone() {
    let kafka = Kafka::start();
    let db = support::TestDb::create("bench_ingest").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .env_clear()
        .env("LOGSTAMP__MYSQL__URL", &db.url)
        .args(["bench", "ingest", "--messages", "100000", "--workers", "1"])
        .args(["--brokers", &kafka.bootstrap_servers(), "--partitions", "4"])
        .output()
        .unwrap();
    let lines = support::json_lines(&out);
    let stages: Vec<&str> = lines
        .iter()
        .map(|l| l["stage"].as_str().or(l["summary"].as_str()).unwrap())
        .collect();
    assert_eq!(
        stages,
        [
            "produce", "ingest", "ceiling", "consumer", "writer", "ingest"
        ]
    );
    let consumer = &lines[3];
    assert_eq!(consumer["broker_cpu_included"], false, "{consumer}");
    assert!(
        consumer["rows_per_second"].as_f64().unwrap() > 0.0,
        "{consumer}"
    );
    let summary = &lines[5];
    assert_eq!(summary["messages"], 100_000);
    for figure in [
        "worker_cpu_us_per_row",
        "consumer_alone_cpu_us_per_row",
        "writer_alone_cpu_us_per_row",
    ] {
        // Reading or writing 100,000 rows costs tens of milliseconds of CPU, several of the
        // kernel's 10 ms ticks: a zero or a missing figure means it was not measured.
        let value = summary[figure].as_f64().unwrap_or(0.0);
        assert!(value > 0.0, "{figure} in {summary}");
    }
    assert_eq!(
        consumer["consumer_cpu_us_per_row"], summary["consumer_alone_cpu_us_per_row"],
        "{summary}"
    );
}
