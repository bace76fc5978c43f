//! nisshi, a Kafka-compatible broker, as a process of its own: the real network path and a
//! broker that keeps every message (the in-process mock cluster keeps 5 MiB per partition).
//! Needs `nisshi` on the PATH (or `LOGSTAMP_TEST_NISSHI` naming it).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// A broker process, killed when dropped.
pub struct Broker {
    child: Child,
    pub address: String,
}

impl Broker {
    pub fn start() -> Broker {
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
                    super::SET_UP
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

    pub async fn create_topic(&self, name: &str, partitions: i32) {
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
