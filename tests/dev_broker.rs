//! `logstamp dev-broker` as a process: the address it prints serves produce and consume (to
//! librdkafka and to kafka-python), and it stops cleanly on SIGTERM.

mod support;

use std::time::Duration;

use logstamp::ingest::kafka::{Outgoing, produce_all};
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::dev_broker::DevBroker;
use support::ingest::{committed_in_topic, read_topic};

fn round_trip(address: &str, topic: &str) {
    let message = Outgoing {
        partition: Some(0),
        key: Some(b"hello".to_vec()),
        payload: Some(b"{\"message\":\"hello\"}".to_vec()),
    };
    assert_eq!(produce_all(address, topic, [message]).unwrap(), 1);
    let read = read_topic(address, topic, 1);
    assert_eq!(read[0].0, "hello");
}

#[test]
fn the_printed_address_serves_produce_and_consume() {
    let broker = DevBroker::start(&["--topic", "events", "--partitions", "2"]);
    round_trip(&broker.address, "events");
    assert!(broker.stop().success());
}

#[test]
fn a_fixed_port_is_served_through_a_forwarder() {
    // A port free a moment ago; another process could take it in between, which is unlikely
    // and would fail loudly.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broker = DevBroker::start(&["--port", &port.to_string()]);
    assert_eq!(broker.address, format!("127.0.0.1:{port}"));
    round_trip(&broker.address, "logs");
    assert!(broker.stop().success());
}

/// kafka-python speaks the protocol differently from librdkafka (newer ApiVersions first,
/// flexible group requests, admin requests to the controller): it creates a topic, produces
/// with and without acknowledgements, consumes in a group and commits.
#[test]
fn kafka_python_creates_a_topic_produces_and_consumes_in_a_group() {
    let python = support::python::python_with("kafka");
    let broker = DevBroker::start(&[]);
    let address = &broker.address;
    let output = support::python::run(&python, "kafka_python_client.py", &[address, "from-python"]);
    let line = String::from_utf8_lossy(&output.stdout);
    let result: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("kafka-python printed {line:?}: {e}"));
    assert_eq!(result["partitions"], serde_json::json!([0, 1, 2]));
    assert_eq!(result["created_twice_refused"], true);
    assert_eq!(
        result["read"],
        serde_json::json!((0..40).collect::<Vec<_>>())
    );
    // What the broker holds, asked through librdkafka: the 40 messages on the 3 partitions
    // created, and the group's commits.
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some("from-python"), Duration::from_secs(10))
        .unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 3);
    let held: i64 = (0..3)
        .map(|p| {
            let (low, high) = consumer
                .fetch_watermarks("from-python", p, Duration::from_secs(10))
                .unwrap();
            high - low
        })
        .sum();
    assert_eq!(held, 40);
    let committed: i64 = committed_in_topic(address, "kafka-python", "from-python", 3)
        .iter()
        .map(|(_, offset)| offset)
        .sum();
    assert_eq!(committed, 40);
    assert!(broker.stop().success());
}

/// A group of one kafka-python consumer is assigned at once, as Kafka assigns it, on its first
/// join and on a rejoin (its subscription grown): the mock broker waits the session timeout
/// less a second for other members to rejoin before it answers any rejoin. The generation the
/// rejoin gives is the broker's: the consumer reads and commits in it.
#[test]
fn a_group_of_one_kafka_python_consumer_is_assigned_at_once() {
    let python = support::python::python_with("kafka");
    let broker = DevBroker::start(&["--topic", "first", "--partitions", "2"]);
    let address = &broker.address;
    // The second topic exists before the consumer asks for it.
    round_trip(address, "second");
    let output = support::python::run(
        &python,
        "kafka_python_rejoin.py",
        &[address, "first", "second", "alone"],
    );
    let line = String::from_utf8_lossy(&output.stdout);
    let result: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("kafka-python printed {line:?}: {e}"));
    // Far below the 9 s (10 s session timeout less 1 s) the mock alone waits.
    for join in ["first", "rejoin"] {
        let seconds = result[join].as_f64().unwrap();
        assert!(seconds < 3.0, "{join} join took {seconds} s: {result}");
    }
    let partitions = result["partitions"].as_array().unwrap();
    for held in [
        serde_json::json!(["first", 0]),
        serde_json::json!(["first", 1]),
    ] {
        assert!(partitions.contains(&held), "{result}");
    }
    assert!(
        partitions.contains(&serde_json::json!(["second", 0])),
        "{result}"
    );
    // The round trip's message, then the one produced after the rejoin, committed.
    let read = result["read"].as_array().unwrap();
    assert_eq!(read.last().unwrap(), "after the rejoin", "{result}");
    assert_eq!(result["committed"], 2, "{result}");
    assert!(broker.stop().success());
}
