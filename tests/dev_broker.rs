//! `logstamp dev-broker` as a process: the address it prints serves produce and consume, and
//! it stops cleanly on SIGTERM.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use logstamp::ingest::kafka::{Outgoing, produce_all};
use support::ingest::read_topic;

/// Starts the broker with `args`; returns it and the address from its first line of output.
fn start(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .env_clear()
        .arg("dev-broker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let printed: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("first line {line:?} is not JSON: {e}"));
    let address = printed["bootstrap_servers"].as_str().unwrap().to_string();
    (child, address)
}

/// SIGTERM, then the exit status within 30 s.
fn stop(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dev-broker did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
    let (child, address) = start(&["--topic", "events", "--partitions", "2"]);
    round_trip(&address, "events");
    assert!(stop(child).success());
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
    let (child, address) = start(&["--port", &port.to_string()]);
    assert_eq!(address, format!("127.0.0.1:{port}"));
    round_trip(&address, "logs");
    assert!(stop(child).success());
}
