//! The main exactly-once test against a Kafka-API broker running as a process of its own
//! (nisshi, a Kafka-compatible broker), with the workers as `logstamp ingest` processes: the
//! real network path, real group coordination, nothing in the test's process but the checks.
//!
//! Needs `nisshi` on the PATH (or `LOGSTAMP_TEST_NISSHI` naming it):
//! `cargo install nisshi@0.7.0 --locked --ignore-rust-version --no-default-features --features dynostore`.

mod support;

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use support::ingest::{COUNT_ALL, Setup, TOPIC};

/// A broker process, killed when dropped.
struct Broker {
    child: Child,
    address: String,
}

impl Broker {
    fn start() -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let url = format!("tcp://{address}");
        let program = std::env::var("LOGSTAMP_TEST_NISSHI").unwrap_or_else(|_| "nisshi".into());
        let log = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nisshi-{port}.log"));
        let child = Command::new(&program)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://nisshi/"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "this test needs the nisshi broker ({program}): {e}; {}",
                    support::SET_UP
                )
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&address).is_err() {
            assert!(
                Instant::now() < deadline,
                "nisshi did not listen on {address}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker { child, address }
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        let results = admin
            .create_topics(
                &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .unwrap();
        for result in results {
            result.unwrap();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
