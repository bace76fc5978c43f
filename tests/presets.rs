//! The shipper presets of config/examples (Filebeat, Fluent Bit, Vector) on sample messages of
//! the shape each shipper writes to Kafka, as its documentation shows them: each preset loads as
//! settings, and each sample maps to the columns expected (or is a dead letter, naming why).

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::NaiveDate;
use serde_json::{Value as Json, json};

use logstamp::config::{Settings, Sources};
use logstamp::ingest::sample::log_message;
use logstamp::mysql::SqlValue;
use logstamp::store::residual;
use logstamp::store::settings::PayloadMode;
use logstamp::transform::Pipeline;

fn preset(name: &str) -> Settings {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("config/examples")
        .join(format!("{name}.toml"));
    let sources = Sources {
        file: Some(file),
        env: Some(HashMap::new()),
        ..Sources::default()
    };
    Settings::load(&sources).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Maps `message` (from the preset's topic) to its columns by name; `Err` is the dead letter's
/// reason.
fn columns(settings: &Settings, message: &Json) -> Result<HashMap<String, SqlValue>, String> {
    let pipeline =
        Pipeline::from_settings(settings.ingest.format, &settings.normalize, &settings.store);
    let topic = &settings.kafka.topics[0];
    let row = pipeline
        .map(topic, message.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    assert_comes_back_whole(settings, message);
    Ok(settings
        .store
        .columns
        .iter()
        .map(|c| c.name.clone())
        .zip(row.values)
        .collect())
}

/// With `store.payload = "residual"` in every table, the residual each table keeps, rejoined
/// with its columns as a reader reads them, is the document the preset stores (normalized, if
/// its rules changed it), equal as JSON.
fn assert_comes_back_whole(settings: &Settings, message: &Json) {
    let mut store = settings.store.clone();
    store.payload = PayloadMode::Residual;
    for table in &mut store.tables {
        table.payload = PayloadMode::Residual;
    }
    let pipeline = Pipeline::from_settings(settings.ingest.format, &settings.normalize, &store);
    let row = pipeline
        .map(&settings.kafka.topics[0], message.to_string().as_bytes())
        .unwrap();
    let document: Json = serde_json::from_str(&row.document).unwrap();
    let tables = std::iter::once((&store.columns, Some(&row.values))).chain(
        store
            .tables
            .iter()
            .zip(&row.fanout)
            .map(|(table, values)| (&table.columns, values.as_ref())),
    );
    for (index, (columns, values)) in tables.enumerate() {
        let Some(values) = values else { continue };
        let paths: Vec<_> = columns
            .iter()
            .map(|c| residual::parse_pointer(&c.pointer))
            .collect();
        let read: Vec<Json> = values.iter().map(residual::as_json).collect();
        let kept = row.residuals[index]
            .as_deref()
            .map(|text| serde_json::from_str(text).unwrap());
        let back = residual::rejoin(kept, paths.iter().map(Option::as_deref).zip(read.iter()));
        assert_eq!(
            back, document,
            "table {index}, residual {:?}",
            row.residuals[index]
        );
    }
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

fn at(millis: u32) -> SqlValue {
    SqlValue::Datetime(
        NaiveDate::from_ymd_opt(2026, 11, 21)
            .unwrap()
            .and_hms_milli_opt(10, 0, 0, millis)
            .unwrap(),
    )
}

/// `expected` as (column, value) pairs: every other column must be NULL.
fn assert_columns(got: &HashMap<String, SqlValue>, expected: &[(&str, SqlValue)]) {
    for (name, value) in got {
        let want = expected
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&SqlValue::Null, |(_, v)| v);
        assert_eq!(value, want, "column {name}");
    }
    for (name, _) in expected {
        assert!(got.contains_key(*name), "no column {name}");
    }
}

#[test]
fn filebeat_events_map_from_ecs_fields() {
    let settings = preset("filebeat");
    // Filebeat 8's event for a container log line, with add_kubernetes_metadata.
    let event = json!({
        "@timestamp": "2026-11-21T10:00:00.123Z",
        "@metadata": {"beat": "filebeat", "type": "_doc", "version": "8.17.0"},
        "message": "payment retried",
        "log": {"offset": 1234, "level": "WARNING",
                "file": {"path": "/var/log/containers/checkout-7d9f_shop_app-0a1b.log"}},
        "input": {"type": "filestream"},
        "ecs": {"version": "8.0.0"},
        "host": {"name": "node-3"},
        "agent": {"type": "filebeat", "version": "8.17.0", "name": "node-3"},
        "service": {"name": "checkout"},
        "kubernetes": {"namespace": "shop", "pod": {"name": "checkout-7d9f", "uid": "5e1c"},
                       "container": {"name": "app"}, "node": {"name": "node-3"},
                       "labels": {"app": "checkout"}},
        "container": {"id": "0a1b", "runtime": "containerd"},
    });
    assert_columns(
        &columns(&settings, &event).unwrap(),
        &[
            ("event_time", at(123)),
            ("level", text("warn")),
            ("service", text("checkout")),
            ("host", text("node-3")),
            ("namespace", text("shop")),
            ("pod", text("checkout-7d9f")),
            ("container", text("app")),
            ("message", text("payment retried")),
        ],
    );
    // A plain file's line: no level, no Kubernetes.
    let plain = json!({"@timestamp": "2026-11-21T10:00:00.5+00:00", "message": "boot",
                       "host": {"name": "vm-1"}, "log": {"offset": 0}});
    assert_columns(
        &columns(&settings, &plain).unwrap(),
        &[
            ("event_time", at(500)),
            ("host", text("vm-1")),
            ("message", text("boot")),
        ],
    );
    let untimed = json!({"message": "no time"});
    let reason = columns(&settings, &untimed).unwrap_err();
    assert!(reason.contains("require /@timestamp"), "{reason}");
}

#[test]
fn fluent_bit_records_map_from_tail_and_kubernetes_fields() {
    let settings = preset("fluent-bit");
    // The tail input's line with the Kubernetes filter, `@timestamp` as the default double.
    let record = json!({
        "@timestamp": 1_795_255_200.123_456,
        "log": "GET /healthz 200\n",
        "stream": "stdout",
        "time": "2026-11-21T10:00:00.123456789Z",
        "kubernetes": {"pod_name": "web-5d8", "namespace_name": "shop", "pod_id": "77aa",
                       "labels": {"app": "web"}, "host": "node-1", "container_name": "nginx",
                       "docker_id": "9f3e", "container_image": "nginx:1.27"},
    });
    assert_columns(
        &columns(&settings, &record).unwrap(),
        &[
            ("event_time", at(123)),
            ("service", text("web")),
            ("host", text("node-1")),
            ("namespace", text("shop")),
            ("pod", text("web-5d8")),
            ("container", text("nginx")),
            ("stream", text("stdout")),
            ("message", text("GET /healthz 200\n")),
        ],
    );
    // `Merge_Log On` merged the application's JSON (its `level`); `Timestamp_Format iso8601_ns`;
    // the cri parser's `message`.
    let merged = json!({
        "@timestamp": "2026-11-21T10:00:00.250000000Z",
        "message": "{\"level\":\"ERROR\",\"msg\":\"db down\"}",
        "level": "ERROR",
        "msg": "db down",
        "stream": "stderr",
        "logtag": "F",
        "kubernetes": {"pod_name": "api-1", "namespace_name": "shop", "container_name": "api",
                       "host": "node-2"},
    });
    assert_columns(
        &columns(&settings, &merged).unwrap(),
        &[
            ("event_time", at(250)),
            ("level", text("error")),
            ("host", text("node-2")),
            ("namespace", text("shop")),
            ("pod", text("api-1")),
            ("container", text("api")),
            ("stream", text("stderr")),
            ("message", text("{\"level\":\"ERROR\",\"msg\":\"db down\"}")),
        ],
    );
    let reason = columns(&settings, &json!({"@timestamp": "yesterday", "log": "x"})).unwrap_err();
    assert!(reason.contains("time /@timestamp"), "{reason}");
}

#[test]
fn vector_events_map_from_kubernetes_logs_and_file_sources() {
    let settings = preset("vector");
    // The kubernetes_logs source's event, encoded by the Kafka sink's json codec.
    let event = json!({
        "file": "/var/log/pods/shop_api-6c4_77aa/api/0.log",
        "kubernetes": {"container_id": "containerd://9f3e", "container_image": "api:2.1",
                       "container_name": "api", "namespace_labels": {}, "pod_ip": "10.0.0.7",
                       "pod_labels": {"app": "api"}, "pod_name": "api-6c4",
                       "pod_namespace": "shop", "pod_node_name": "node-2",
                       "pod_owner": "ReplicaSet/api-6c4", "pod_uid": "77aa"},
        "message": "ready",
        "source_type": "kubernetes_logs",
        "stream": "stderr",
        "timestamp": "2026-11-21T10:00:00.123456789Z",
    });
    assert_columns(
        &columns(&settings, &event).unwrap(),
        &[
            ("event_time", at(123)),
            ("service", text("api")),
            ("host", text("node-2")),
            ("namespace", text("shop")),
            ("pod", text("api-6c4")),
            ("container", text("api")),
            ("stream", text("stderr")),
            ("message", text("ready")),
        ],
    );
    // The file source's event, with a level set by a remap transform.
    let file = json!({"file": "/var/log/app.log", "host": "vm-4", "message": "boot",
                      "source_type": "file", "timestamp": "2026-11-21T10:00:00.9Z",
                      "level": "Warning"});
    assert_columns(
        &columns(&settings, &file).unwrap(),
        &[
            ("event_time", at(900)),
            ("level", text("warn")),
            ("host", text("vm-4")),
            ("message", text("boot")),
        ],
    );
    let reason = columns(&settings, &json!({"message": "x"})).unwrap_err();
    assert!(reason.contains("require /timestamp"), "{reason}");
}

#[test]
fn demo_lines_come_back_whole_with_the_default_and_pipeline_settings() {
    let default = Settings::load(&Sources {
        env: Some(HashMap::new()),
        ..Sources::default()
    })
    .unwrap();
    assert_eq!(default.store.payload, PayloadMode::Residual);
    let pipeline = preset("pipeline");
    let at = chrono::DateTime::from_timestamp_millis(1_714_566_896_123).unwrap();
    let mut routed = 0;
    for n in 0..200 {
        let line: Json = serde_json::from_str(&log_message(n, at)).unwrap();
        for settings in [&default, &pipeline] {
            columns(settings, &line).unwrap();
        }
        routed += usize::from(line.get("http").is_some());
    }
    assert!(routed > 0, "some lines go to the fan-out tables");
    // The README's worked example: normalized, and in both fan-out tables.
    let example = json!({"time":"2026-11-21 18:00:00.123","lvl":"ERR","service":"checkout",
        "host":"web-1","message":"request failed",
        "http":{"request":{"method":"POST"},"path":"/api/items/4","status":500,"latency_ms":87},
        "error":{"code":"E4","stack":"at main.rs:1"}});
    columns(&pipeline, &example).unwrap();
}
