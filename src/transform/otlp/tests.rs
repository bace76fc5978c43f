use opentelemetry_proto::tonic::common::v1::{ArrayValue, InstrumentationScope, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::json;

use super::*;

fn any(value: any_value::Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

fn pair(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: any(value),
        ..Default::default()
    }
}

fn text(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.into())
}

/// A request of two resources, the first with two scopes: records in each.
fn request() -> ExportLogsServiceRequest {
    use any_value::Value::*;
    let full = LogRecord {
        time_unix_nano: 1_764_000_000_123_456_789,
        observed_time_unix_nano: 1_764_000_001_000_000_000,
        severity_number: 13,
        severity_text: "WARN".into(),
        body: any(KvlistValue(KeyValueList {
            values: vec![
                pair(
                    "list",
                    ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(IntValue(-1)),
                            },
                            AnyValue {
                                value: Some(DoubleValue(2.5)),
                            },
                            AnyValue {
                                value: Some(BoolValue(true)),
                            },
                            AnyValue { value: None },
                            AnyValue {
                                value: Some(BytesValue(vec![0, 1, 255])),
                            },
                        ],
                    }),
                ),
                pair("nan", DoubleValue(f64::NAN)),
                pair("inf", DoubleValue(f64::NEG_INFINITY)),
            ],
        })),
        attributes: vec![
            pair("http.status", IntValue(i64::MAX)),
            pair("a/b", text("slash")),
        ],
        trace_id: (0u8..16).collect(),
        span_id: vec![0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31],
        flags: 1,
        event_name: "http.request".into(),
        ..Default::default()
    };
    let observed_only = LogRecord {
        observed_time_unix_nano: 1_764_000_002_000_000_001,
        body: any(text("plain")),
        ..Default::default()
    };
    let scope = |name: &str| {
        Some(InstrumentationScope {
            name: name.into(),
            version: "1.2.3".into(),
            attributes: vec![pair("lib", text("x"))],
            ..Default::default()
        })
    };
    ExportLogsServiceRequest {
        resource_logs: vec![
            ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        pair("service.name", text("api")),
                        pair("host.name", text("web-1")),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![
                    ScopeLogs {
                        scope: scope("first"),
                        log_records: vec![full, observed_only],
                        ..Default::default()
                    },
                    ScopeLogs {
                        scope: scope("second"),
                        log_records: vec![LogRecord::default()],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            ResourceLogs {
                resource: None,
                scope_logs: vec![ScopeLogs {
                    scope: None,
                    log_records: vec![LogRecord {
                        severity_number: 9,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    }
}

fn expected() -> Vec<Json> {
    let resource = json!({"service.name": "api", "host.name": "web-1"});
    let scope = |name: &str| json!({"name": name, "version": "1.2.3", "attributes": {"lib": "x"}});
    vec![
        json!({
            "time": "2025-11-24T16:00:00.123456789Z",
            "observed_time": "2025-11-24T16:00:01.000000000Z",
            "severity_number": 13,
            "severity_text": "WARN",
            "body": {"list": [-1, 2.5, true, null, "AAH/"], "nan": "NaN", "inf": "-Infinity"},
            "trace_id": "000102030405060708090a0b0c0d0e0f",
            "span_id": "b7ad6b7169203331",
            "flags": 1,
            "event_name": "http.request",
            "attributes": {"http.status": i64::MAX, "a/b": "slash"},
            "resource": resource,
            "scope": scope("first"),
        }),
        json!({
            "time": "2025-11-24T16:00:02.000000001Z",
            "observed_time": "2025-11-24T16:00:02.000000001Z",
            "body": "plain",
            "attributes": {},
            "resource": resource,
            "scope": scope("first"),
        }),
        json!({"attributes": {}, "resource": resource, "scope": scope("second")}),
        json!({"severity_number": 9, "attributes": {}, "resource": {}, "scope": {}}),
    ]
}

#[test]
fn a_protobuf_request_becomes_one_flat_document_per_record_in_order() {
    let message = request().encode_to_vec();
    assert_eq!(records(Encoding::Proto, &message).unwrap(), expected());
}

#[test]
fn pointers_reach_dotted_and_slashed_keys() {
    let documents = records(Encoding::Proto, &request().encode_to_vec()).unwrap();
    assert_eq!(
        documents[0].pointer("/resource/service.name"),
        Some(&json!("api"))
    );
    assert_eq!(
        documents[0].pointer("/attributes/a~1b"),
        Some(&json!("slash"))
    );
    assert_eq!(
        documents[0].pointer("/scope/version"),
        Some(&json!("1.2.3"))
    );
}

/// OTLP/JSON as the OpenTelemetry Python SDK's encoder writes it
/// (`opentelemetry-exporter-otlp-json-common`): hex IDs, 64-bit integers as strings, enums as
/// integers. The integration tests send whole requests of it through Kafka.
#[test]
fn otlp_json_follows_the_otlp_json_rules() {
    let message = json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeLogs": [{"scope": {"name": "mylib", "version": "1.2.3"}, "logRecords": [{
            "timeUnixNano": "1764000000123456789", "observedTimeUnixNano": "1764000001000000000",
            "severityNumber": 13, "severityText": "WARN",
            "body": {"kvlistValue": {"values": [{"key": "k", "value": {"arrayValue": {"values": [
                {"intValue": "1"}, {"doubleValue": 2.5}, {"boolValue": true},
                {"stringValue": "x"}, {"bytesValue": "AAE="}]}}}]}},
            "attributes": [{"key": "big", "value": {"intValue": "4611686018427387904"}},
                           {"key": "n", "value": {"intValue": 7}}],
            "flags": 1,
            "traceId": "0AF7651916CD43DD8448EB211C80319C", "spanId": "b7ad6b7169203331",
            "unknownField": {"ignored": true}}]}]}]})
    .to_string();
    let documents = records(Encoding::Json, message.as_bytes()).unwrap();
    assert_eq!(
        documents,
        [json!({
            "time": "2025-11-24T16:00:00.123456789Z",
            "observed_time": "2025-11-24T16:00:01.000000000Z",
            "severity_number": 13,
            "severity_text": "WARN",
            "body": {"k": [1, 2.5, true, "x", "AAE="]},
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "span_id": "b7ad6b7169203331",
            "flags": 1,
            "attributes": {"big": 4_611_686_018_427_387_904_i64, "n": 7},
            "resource": {"service.name": "api"},
            "scope": {"name": "mylib", "version": "1.2.3", "attributes": {}},
        })]
    );
    // Both encodings of one request are the same documents.
    let proto = request();
    let as_json = serde_json::to_vec(&proto).unwrap();
    let mut from_json = records(Encoding::Json, &as_json).unwrap();
    let mut from_proto = records(Encoding::Proto, &proto.encode_to_vec()).unwrap();
    // JSON has no number for NaN and infinities: the crate's serializer writes them as `null`
    // (serde_json's way with a non-finite f64), which reads back as an empty value.
    for key in ["nan", "inf"] {
        assert_eq!(from_json[0]["body"][key], Json::Null);
        assert!(from_proto[0]["body"][key].is_string());
        from_json[0]["body"][key] = Json::Null;
        from_proto[0]["body"][key] = Json::Null;
    }
    assert_eq!(from_json, from_proto);
}

/// proto3 JSON spells the doubles JSON has no number for as text; the crate's OTLP/JSON
/// decoder does not read them, so such a message is a dead letter.
#[test]
fn a_non_finite_double_written_as_text_is_refused_by_the_otlp_json_decoder() {
    let message = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"body": {"doubleValue": "NaN"}}]}]}]})
    .to_string();
    let error = records(Encoding::Json, message.as_bytes()).unwrap_err();
    assert!(matches!(error, MapError::NotOtlp(_)), "{error}");
}

#[test]
fn an_empty_request_has_no_records_and_garbage_is_not_otlp() {
    assert_eq!(records(Encoding::Proto, b"").unwrap(), Vec::<Json>::new());
    assert_eq!(records(Encoding::Json, b"{}").unwrap(), Vec::<Json>::new());
    for (encoding, message) in [
        (Encoding::Proto, &b"\xff\xff\xff"[..]),
        (Encoding::Proto, &br#"{"resourceLogs": []}"#[..]),
        (Encoding::Json, &b"not json"[..]),
        (
            Encoding::Json,
            &br#"{"resourceLogs": [{"scopeLogs": 3}]}"#[..],
        ),
        (
            Encoding::Json,
            &br#"{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "xyz"}]}]}]}"#[..],
        ),
    ] {
        let error = records(encoding, message).unwrap_err();
        assert!(
            matches!(error, MapError::NotOtlp(_)),
            "{encoding:?} {error}"
        );
    }
}

#[test]
fn the_latest_time_protobuf_can_hold_is_written_whole() {
    let message = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    time_unix_nano: u64::MAX,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let documents = records(Encoding::Proto, &message.encode_to_vec()).unwrap();
    // u64::MAX nanoseconds is in 2554: chrono reaches it.
    assert_eq!(documents[0]["time"], "2554-07-21T23:34:33.709551615Z");
}

#[test]
fn array_values_nest_as_json() {
    let nested = AnyValue {
        value: Some(any_value::Value::ArrayValue(ArrayValue {
            values: vec![AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![pair("k", text("v")), pair("k", text("last"))],
                })),
            }],
        })),
    };
    assert_eq!(value(&nested), Some(json!([{"k": "last"}])));
    assert_eq!(value(&AnyValue { value: None }), None);
}

/// proto3 JSON: a field left out or `null` is empty. Protobuf's JSON writers leave out empty
/// repeated fields (the SDK writes an empty list as `{"arrayValue": {}}`), and each such field of
/// a logs request reads as empty, the message's other records with it.
#[test]
fn otlp_json_reads_missing_or_null_fields_as_empty() {
    let message = json!({"resourceLogs": [{
        "resource": {"attributes": [{"value": {"stringValue": "no key"}}],
                     "entityRefs": [{}, {"type": "service", "idKeys": null}]},
        "scopeLogs": [{"scope": {"attributes": null}, "logRecords": [
            {"body": {"arrayValue": {}}, "attributes": [
                {"key": "list", "value": {"arrayValue": {"values": [{"kvlistValue": {}}]}}},
                {"key": "map", "value": {"kvlistValue": {"values": null}}},
                {"key": "unset", "value": {}},
                {"key": "null", "value": null}]},
            {"body": {"kvlistValue": {}}, "attributes": null},
            {"body": {"stringValue": "the next record"}}]}]},
        {"resource": null, "scopeLogs": null}]})
    .to_string();
    let documents = records(Encoding::Json, message.as_bytes()).unwrap();
    let resource = json!({"": "no key"});
    let scope = json!({"attributes": {}});
    assert_eq!(
        documents,
        [
            json!({"body": [], "attributes": {"list": [{}], "map": {}, "unset": null, "null": null},
                   "resource": resource, "scope": scope}),
            json!({"body": {}, "attributes": {}, "resource": resource, "scope": scope}),
            json!({"body": "the next record", "attributes": {}, "resource": resource, "scope": scope}),
        ]
    );
}

/// Every double arrives bit for bit, as from protobuf: serde_json reads floats exactly
/// (`float_roundtrip`), where its default reading is off by a step for some.
#[test]
fn otlp_json_doubles_arrive_bit_for_bit() {
    for text in [
        "125.42857142857143",
        "0.30000000000000004",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "5e-324",
        "-9007199254740993.5",
    ] {
        let exact: f64 = text.parse().unwrap();
        let message = format!(
            r#"{{"resourceLogs": [{{"scopeLogs": [{{"logRecords": [{{"body": {{"doubleValue": {text}}},
                "attributes": [{{"key": "d", "value": {{"doubleValue": {text}}}}}]}}]}}]}}]}}"#
        );
        let documents = records(Encoding::Json, message.as_bytes()).unwrap();
        for got in [&documents[0]["body"], &documents[0]["attributes"]["d"]] {
            assert_eq!(
                got.as_f64().map(f64::to_bits),
                Some(exact.to_bits()),
                "{text}"
            );
        }
    }
}
