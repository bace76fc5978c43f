//! `logstamp bench relay --peer debezium` on two private servers and a Kafka broker, with a
//! small load: every figure it reports is there and positive, and each side ends with the
//! same rows as the source after its capturing process is killed.
//!
//! Debezium's connectors are the ones pinned in `benches/debezium/pom.xml`, which
//! `scripts/test` (through `scripts/fetch-jars`) copies into `<target>/debezium-VERSION`.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::kafka::{self, Kafka};
use support::mariadb::MariaDb;
use support::{SET_UP, json_lines};

/// `<target>/debezium-VERSION`, VERSION from `benches/debezium/pom.xml`.
fn debezium_dir() -> PathBuf {
    const POM: &str = include_str!("../benches/debezium/pom.xml");
    let version = POM
        .split("<debezium.version>")
        .nth(1)
        .and_then(|rest| rest.split("</debezium.version>").next())
        .expect("benches/debezium/pom.xml names <debezium.version>");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = target
        .parent()
        .expect("the build directory")
        .join(format!("debezium-{version}"));
    assert!(
        dir.join("plugin/.complete").is_file(),
        "this test needs Debezium {version} in {}; {SET_UP}",
        dir.display()
    );
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debezium_peer_reports_every_figure_and_both_sides_end_identical() {
    let debezium = debezium_dir();
    let a = MariaDb::start(1, &[]).await;
    let b = MariaDb::start(2, &[]).await;
    let kafka = Kafka::start();
    let out = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .args(["bench", "relay", "--peer", "debezium"])
        .args(["--source", &a.url(""), "--target", &b.url("")])
        .args(["--brokers", &kafka.bootstrap_servers()])
        .arg("--kafka-lib")
        .arg(kafka::lib_dir())
        .arg("--debezium")
        .arg(&debezium)
        .args(["--changes", "3000", "--rate", "1000", "--seconds", "2"])
        .args(["--crash-seconds", "4"])
        .output()
        .expect("running logstamp");
    let lines = json_lines(&out);
    let phase = |name: &str| -> Vec<&serde_json::Value> {
        lines.iter().filter(|l| l["phase"] == name).collect()
    };
    let positive = |line: &serde_json::Value, field: &str| {
        let value = line[field].as_f64();
        assert!(value.is_some_and(|v| v > 0.0), "{field} in {line}");
    };

    let throughput = phase("throughput");
    let parts: Vec<(String, String)> = throughput
        .iter()
        .map(|l| (l["peer"].to_string(), l["part"].to_string()))
        .collect();
    assert_eq!(parts.len(), 4, "capture and apply of each side: {parts:?}");
    for line in &throughput {
        assert_eq!(line["changes"], 3000, "{line}");
        positive(line, "changes_per_second");
        // CPU time is counted in clock ticks (10 ms): a few thousand changes may take none of
        // a server's, so these are only required to be there.
        for field in [
            "process_cpu_seconds_per_million",
            "mariadb_cpu_seconds_per_million",
        ] {
            assert!(
                line[field].as_f64().is_some_and(|v| v >= 0.0),
                "{field} in {line}"
            );
        }
    }
    let lag = phase("lag");
    assert_eq!(lag.len(), 2, "{lag:?}");
    for line in &lag {
        assert_eq!(line["changes"], 2000, "{line}");
        for field in ["p50_ms", "p99_ms"] {
            positive(line, field);
        }
    }
    let crash = phase("crash");
    assert_eq!(crash.len(), 2, "{crash:?}");
    for line in &crash {
        assert_eq!(line["identical"], true, "{line}");
        assert_eq!(line["target_rows"], line["source_rows"], "{line}");
    }
}
