//! OTLP logs requests built and serialised by the OpenTelemetry Python packages (the SDK's
//! records, the protobuf and OTLP/JSON encoders of its exporters), produced to the in-process
//! cluster and ingested with `config/examples/otel.toml`: every record is stored once, and
//! compared field by field with what Python put into it; records that cannot be stored are dead
//! letters of their own, naming their message and index; worker processes killed with SIGKILL
//! lose and repeat no record.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use chrono::DateTime;
use mysql_async::prelude::Queryable;
use rand::Rng;
use serde_json::Value as Json;

use logstamp::ingest::kafka::Outgoing;
use support::ingest::{SUM_OFFSETS, Setup, TOPIC};
use support::python;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/examples/otel.toml")
}

const ROWS: &str = "SELECT COUNT(*) FROM otel_logs";

/// Messages as Python encoded them, and per record (in message order) what it put into it.
struct Generated {
    messages: Vec<Vec<u8>>,
    records: Vec<Json>,
}

impl Generated {
    /// `messages` requests of `per_message` records, encoded as `encoding` (proto or json).
    fn new(encoding: &str, messages: usize, per_message: usize) -> Generated {
        let python = python::python_with("opentelemetry.exporter.otlp.json.common");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().to_str().unwrap();
        python::run(
            &python,
            "otlp_messages.py",
            &[
                out,
                encoding,
                &messages.to_string(),
                &per_message.to_string(),
            ],
        );
        let messages = (0..messages)
            .map(|m| std::fs::read(dir.path().join(format!("message-{m}"))).unwrap())
            .collect();
        let records =
            support::json_lines_in(&std::fs::read(dir.path().join("expected.jsonl")).unwrap());
        Generated { messages, records }
    }

    /// Message `m` goes to partition `m % partitions`, at offset `m / partitions`.
    fn produce(&self, setup: &Setup, partitions: usize) {
        setup.produce_raw(
            self.messages
                .iter()
                .enumerate()
                .map(|(m, payload)| Outgoing {
                    partition: Some((m % partitions) as i32),
                    key: None,
                    payload: Some(payload.clone()),
                })
                .collect(),
        );
    }

    /// The records Python made too deep for MariaDB's JSON: each is a dead letter.
    fn too_deep(&self) -> impl Iterator<Item = &Json> {
        self.records.iter().filter(|r| r["bad"] == true)
    }

    fn storable(&self) -> impl Iterator<Item = &Json> {
        self.records.iter().filter(|r| r["bad"] == false)
    }
}

fn nanos(rfc3339: &Json) -> u64 {
    let text = rfc3339.as_str().unwrap();
    let time = DateTime::parse_from_rfc3339(text).unwrap();
    u64::try_from(time.timestamp_nanos_opt().unwrap()).unwrap()
}

/// `DATE_FORMAT(.., %f)` of a time in nanoseconds: `DATETIME(3)` keeps whole milliseconds.
fn datetime_millis(nanos: u64) -> String {
    let millis = i64::try_from(nanos / 1_000_000).unwrap();
    DateTime::from_timestamp_millis(millis)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}

/// `SeverityNumber`'s range name, as otel.toml's normalize rule writes it.
fn severity_name(number: u64) -> &'static str {
    ["trace", "debug", "info", "warn", "error", "fatal"][((number - 1) / 4) as usize]
}

/// One stored row, as plain SQL reads it back.
type Stored = (
    u64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
);

/// A stored document's attributes as their JSON text.
#[derive(serde::Deserialize)]
struct Texts<'a> {
    #[serde(borrow)]
    attributes: HashMap<&'a str, &'a serde_json::value::RawValue>,
}

/// Every record Python made is in `otel_logs` once, except `refused` and the too-deep ones,
/// and each column and each field of the stored document is what Python put into the record.
async fn assert_stored_field_by_field(setup: &Setup, generated: &Generated, refused: &[u64]) {
    let mut conn = setup.db.conn().await;
    let rows: Vec<Stored> = conn
        .query(
            "SELECT id, DATE_FORMAT(event_time, '%Y-%m-%d %H:%i:%s.%f'), severity, service, host, \
             body, trace_id, span_id, payload FROM otel_logs",
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let mut by_seq: HashMap<u64, Stored> = HashMap::new();
    for row in rows {
        let payload: Json = serde_json::from_str(&row.8).unwrap();
        let seq = payload["attributes"]["seq"].as_u64().unwrap();
        assert!(
            by_seq.insert(seq, row).is_none(),
            "record {seq} stored twice"
        );
    }
    let mut compared = 0;
    for want in generated.storable() {
        let seq = want["seq"].as_u64().unwrap();
        if refused.contains(&seq) {
            assert!(!by_seq.contains_key(&seq), "refused record {seq} is stored");
            continue;
        }
        let Some((_, event_time, severity, service, host, body, trace_id, span_id, payload)) =
            by_seq.remove(&seq)
        else {
            panic!("record {seq} is missing");
        };
        let doc: Json = serde_json::from_str(&payload).unwrap();
        // Doubles digit for digit, as stored: a reader rounding them would round both sides.
        let stored: Texts = serde_json::from_str(&payload).unwrap();
        for (key, text) in want["double_texts"].as_object().unwrap() {
            assert_eq!(
                stored.attributes[key.as_str()].get(),
                text.as_str().unwrap(),
                "record {seq}: {key}"
            );
        }
        let time = want["time_unix_nano"].as_u64().unwrap();
        let observed = want["observed_time_unix_nano"].as_u64().unwrap();
        assert_eq!(nanos(&doc["time"]), time, "record {seq}: time");
        assert_eq!(nanos(&doc["observed_time"]), observed, "record {seq}");
        assert_eq!(doc["severity_number"], want["severity_number"], "{seq}");
        assert_eq!(doc["severity_text"], want["severity_text"], "{seq}");
        assert_eq!(doc["body"], want["body"], "record {seq}: body");
        assert_eq!(doc["attributes"], want["attributes"], "record {seq}");
        assert_eq!(doc["resource"], want["resource"], "record {seq}");
        assert_eq!(doc["scope"]["name"], want["scope"]["name"], "{seq}");
        assert_eq!(doc["scope"]["version"], want["scope"]["version"], "{seq}");
        // Unset in the record: absent from the document.
        assert_eq!(
            doc.get("trace_id"),
            want.get("trace_id").filter(|v| !v.is_null())
        );
        assert_eq!(
            doc.get("span_id"),
            want.get("span_id").filter(|v| !v.is_null())
        );
        let flags = doc.get("flags").and_then(Json::as_u64).unwrap_or(0);
        assert_eq!(
            flags,
            want["flags"].as_u64().unwrap(),
            "record {seq}: flags"
        );

        let number = want["severity_number"].as_u64().unwrap();
        assert_eq!(event_time.as_deref(), Some(&*datetime_millis(time)));
        assert_eq!(severity.as_deref(), Some(severity_name(number)), "{seq}");
        assert_eq!(
            service.as_deref(),
            want["resource"]["service.name"].as_str()
        );
        assert_eq!(host.as_deref(), want["resource"]["host.name"].as_str());
        let body: Json = serde_json::from_str(&body.unwrap()).unwrap();
        assert_eq!(body, want["body"], "record {seq}: body column");
        assert_eq!(trace_id.as_deref(), want["trace_id"].as_str());
        assert_eq!(span_id.as_deref(), want["span_id"].as_str());
        compared += 1;
    }
    assert!(
        by_seq.is_empty(),
        "rows Python never made: {:?}",
        by_seq.keys()
    );
    assert_eq!(
        compared,
        generated.storable().count() - refused.len(),
        "every record compared"
    );
}

/// Each too-deep record, and each `refused` one, is one dead letter naming its message's
/// partition and offset and its index in the message; nothing else is.
async fn assert_dead_letters(
    setup: &Setup,
    generated: &Generated,
    partitions: usize,
    refused: &[u64],
) {
    let mut conn = setup.db.conn().await;
    type Letter = (i32, i64, Option<u32>, String, Vec<u8>);
    let letters: Vec<Letter> = conn
        .query("SELECT kafka_partition, kafka_offset, record_index, reason, raw FROM dead_letters")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let mut found: BTreeMap<(i32, i64, u32), String> = BTreeMap::new();
    for (partition, offset, record, reason, raw) in letters {
        let record = record.expect("a dead letter of one record names its index");
        let doc: Json = serde_json::from_slice(&raw).unwrap();
        assert!(doc["attributes"]["seq"].is_u64(), "the raw record: {doc}");
        assert!(
            found.insert((partition, offset, record), reason).is_none(),
            "record {record} of {partition}/{offset} dead-lettered twice"
        );
    }
    let place = |r: &Json| {
        let m = r["message"].as_u64().unwrap() as usize;
        let index = r["record"].as_u64().unwrap() as u32;
        ((m % partitions) as i32, (m / partitions) as i64, index)
    };
    for record in generated.too_deep() {
        let reason = found.remove(&place(record)).expect("a dead letter");
        assert!(reason.contains("nested more than 31 levels"), "{reason}");
    }
    for record in generated
        .records
        .iter()
        .filter(|r| refused.contains(&r["seq"].as_u64().unwrap()))
    {
        let reason = found.remove(&place(record)).expect("a dead letter");
        assert!(reason.contains("CONSTRAINT"), "{reason}");
    }
    assert!(found.is_empty(), "unexpected dead letters: {found:?}");
}

/// The rollup's totals per service and severity equal a `GROUP BY` of the stored rows, and
/// what Python made less what was refused.
async fn assert_rollup_exact(setup: &Setup, generated: &Generated, refused: &[u64]) {
    let mut conn = setup.db.conn().await;
    let rollup: Vec<(String, String, u64)> = conn
        .query(
            "SELECT service, severity, CAST(SUM(n) AS UNSIGNED) FROM otel_logs_per_minute \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .await
        .unwrap();
    let raw: Vec<(String, String, u64)> = conn
        .query(
            "SELECT COALESCE(service, ''), COALESCE(severity, ''), COUNT(*) FROM otel_logs \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(rollup, raw);
    let mut made: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in generated
        .storable()
        .filter(|r| !refused.contains(&r["seq"].as_u64().unwrap()))
    {
        let service = r["resource"]["service.name"].as_str().unwrap().to_string();
        let severity = severity_name(r["severity_number"].as_u64().unwrap()).to_string();
        *made.entry((service, severity)).or_default() += 1;
    }
    let made: Vec<(String, String, u64)> = made.into_iter().map(|((a, b), n)| (a, b, n)).collect();
    assert_eq!(rollup, made);
}

/// Thousands of records per protobuf message, one worker; the database refuses the records
/// whose span ID ends in `77` (a CHECK constraint), which the writer finds by bisection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn otlp_proto_from_the_python_sdk_is_stored_field_by_field() {
    let partitions = 2;
    let generated = Generated::new("proto", 6, 2_500);
    let setup = Setup::with_config_and(
        "otlp_proto",
        partitions as i32,
        &example(),
        support::ingest::log_line,
        &[("kafka.topics", TOPIC)],
    )
    .await;
    let mut conn = setup.db.conn().await;
    conn.query_drop(
        "ALTER TABLE otel_logs ADD CONSTRAINT no_77 CHECK (span_id IS NULL OR span_id NOT LIKE '%77')",
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    let refused: Vec<u64> = generated
        .storable()
        .filter(|r| r["span_id"].as_str().is_some_and(|s| s.ends_with("77")))
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert!(
        !refused.is_empty() && refused.len() < 100,
        "{}",
        refused.len()
    );
    generated.produce(&setup, partitions);
    let worker = setup.start_worker(1);
    setup
        .wait_for(
            SUM_OFFSETS,
            generated.messages.len() as u64,
            Duration::from_secs(60),
        )
        .await;
    worker.stop().await.unwrap();
    assert_stored_field_by_field(&setup, &generated, &refused).await;
    assert_dead_letters(&setup, &generated, partitions, &refused).await;
    assert_rollup_exact(&setup, &generated, &refused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn otlp_json_from_the_python_sdk_is_stored_field_by_field() {
    let partitions = 2;
    // OTLP/JSON is about 3.5 times the size of protobuf: 1,000 records (870 KB) stay below
    // Kafka's default largest message (1,000,000 bytes).
    let generated = Generated::new("json", 4, 1_000);
    let setup = Setup::with_config_and(
        "otlp_json",
        partitions as i32,
        &example(),
        support::ingest::log_line,
        &[("kafka.topics", TOPIC), ("ingest.format", "otlp_json")],
    )
    .await;
    generated.produce(&setup, partitions);
    let worker = setup.start_worker(1);
    setup
        .wait_for(
            SUM_OFFSETS,
            generated.messages.len() as u64,
            Duration::from_secs(60),
        )
        .await;
    worker.stop().await.unwrap();
    assert_stored_field_by_field(&setup, &generated, &[]).await;
    assert_dead_letters(&setup, &generated, partitions, &[]).await;
    assert_rollup_exact(&setup, &generated, &[]).await;
}

/// Worker processes killed with SIGKILL at random points while they ingest: every record of
/// every message is stored once (or dead-lettered once), and the rollup counts each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_otlp_ingest_keeps_each_record_exactly_once() {
    let partitions = 4;
    let generated = Generated::new("proto", 16, 1_500);
    let setup = Setup::with_config_and(
        "otlp_kill",
        partitions as i32,
        &example(),
        support::ingest::log_line,
        &[("kafka.topics", TOPIC), ("batch.max_rows", "3000")],
    )
    .await;
    generated.produce(&setup, partitions);
    let total = generated.storable().count() as u64;
    let mut rng = rand::rng();
    let kills = 2;
    for run in 0..kills {
        let process = setup.spawn_process_holding_partitions(run).await;
        let now = setup.count(ROWS).await;
        let target = (now + rng.random_range(1_000..8_000)).min(total);
        setup
            .wait_until_at_least(ROWS, target, Duration::from_secs(60))
            .await;
        process.kill();
    }
    let last = setup.spawn_process_holding_partitions(kills).await;
    setup
        .wait_for(
            SUM_OFFSETS,
            generated.messages.len() as u64,
            Duration::from_secs(120),
        )
        .await;
    assert!(last.terminate(Duration::from_secs(60)).success());
    assert_eq!(
        setup
            .count("SELECT COUNT(DISTINCT JSON_VALUE(payload, '$.attributes.seq')) FROM otel_logs")
            .await,
        total
    );
    assert_eq!(
        setup
            .count("SELECT COUNT(DISTINCT id) FROM otel_logs")
            .await,
        total
    );
    assert_stored_field_by_field(&setup, &generated, &[]).await;
    assert_dead_letters(&setup, &generated, partitions, &[]).await;
    assert_rollup_exact(&setup, &generated, &[]).await;
}
