//! `store.payload = "residual"` through the whole mapping: for any document, the residual the
//! pipeline keeps in each table, rejoined with that table's column values as a reader reads
//! them ([`residual::as_json`]), is the document again, equal as JSON. The oracle is the
//! document parsed on its own by serde_json, not anything the split computed.

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use super::*;
use crate::store::residual::{as_json, parse_pointer, rejoin};

/// A column; strings and texts cut to fit, so that long ones map (and stay in the residual).
fn spec(name: &str, pointer: &str, column_type: ColumnType, length: Option<u32>) -> ColumnSpec {
    ColumnSpec {
        truncate: matches!(column_type, ColumnType::String | ColumnType::Text),
        ..super::tests::spec(name, pointer, column_type, length)
    }
}

/// The log table's columns: typed ones on the fields the documents below fill with values of
/// their type (and others), lenient ones (cut strings, JSON) on names that look like pointers.
fn log_columns() -> Vec<ColumnSpec> {
    vec![
        spec("t", "/t", ColumnType::Datetime, None),
        spec("n", "/n", ColumnType::Uint, None),
        spec("i", "/i", ColumnType::Int, None),
        spec("d", "/d", ColumnType::Double, None),
        spec("f", "/f", ColumnType::Bool, None),
        spec("s", "/s", ColumnType::String, Some(4)),
        spec("s_again", "/s", ColumnType::Text, None),
        spec("ab", "/a~1b", ColumnType::String, Some(8)),
        spec("tilde", "/~0", ColumnType::Json, None),
        spec("nested", "/o/p/q", ColumnType::String, Some(8)),
        spec("first", "/arr/0", ColumnType::String, Some(8)),
        spec("deep", "/o/p", ColumnType::Json, None),
    ]
}

/// A fan-out table's columns, overlapping the log table's.
fn fanout_columns() -> Vec<ColumnSpec> {
    vec![
        spec("n", "/n", ColumnType::Uint, None),
        spec("q", "/o/p/q", ColumnType::Text, None),
        spec("empty_name", "/", ColumnType::String, Some(8)),
    ]
}

fn pipeline() -> Pipeline {
    let route = Route {
        when: vec![],
        mapper: Mapper::new(&fanout_columns()).keeping(PayloadMode::Residual),
    };
    Pipeline::new(
        MessageFormat::Json,
        Normalizer::default(),
        Mapper::new(&log_columns()).keeping(PayloadMode::Residual),
        vec![route],
    )
}

/// Rejoins a table's residual (read back from its text) with its columns' values.
fn rejoined(columns: &[ColumnSpec], residual: Option<&str>, values: &[SqlValue]) -> Json {
    let paths: Vec<_> = columns.iter().map(|c| parse_pointer(&c.pointer)).collect();
    let read: Vec<Json> = values.iter().map(as_json).collect();
    let residual = residual.map(|text| serde_json::from_str(text).unwrap());
    rejoin(
        residual,
        paths.iter().map(Option::as_deref).zip(read.iter()),
    )
}

/// Maps `message` and checks that every table gives the document back; `Err` for a message
/// that is a dead letter.
fn round_trip(message: &str) -> Result<(), MapError> {
    let row = pipeline().map("t", message.as_bytes())?;
    let document: Json = serde_json::from_str(message).unwrap();
    assert_eq!(row.residuals.len(), 2);
    let log = rejoined(&log_columns(), row.residuals[0].as_deref(), &row.values);
    assert_eq!(log, document, "log table, residual {:?}", row.residuals[0]);
    let fanout = row.fanout[0].as_deref().unwrap();
    let routed = rejoined(&fanout_columns(), row.residuals[1].as_deref(), fanout);
    assert_eq!(routed, document, "fan-out, residual {:?}", row.residuals[1]);
    Ok(())
}

#[test]
fn documents_come_back_whole_from_every_table() {
    for message in [
        json!({"t": "2024-05-01T12:34:56.000Z", "n": 7, "s": "abc", "x": {"y": []}}),
        // A time the column keeps to the millisecond, and in another zone: kept.
        json!({"t": "2024-05-01T12:34:56.123456Z", "s": "abcdef"}),
        json!({"t": "2024-05-01T14:34:56+02:00", "n": "7", "d": 9007199254740993u64}),
        json!({"t": 1714566896, "d": 1.5, "f": 1, "i": -3, "a/b": "x", "~": {"k": null}}),
        json!({"o": {"p": {"q": "short"}}, "arr": ["one", 2], "": "empty", "n": 18446744073709551615u64}),
        json!({"o": {"p": {"q": "much too long"}, "r": {}}, "s": 5, "f": "true", "d": 2}),
        json!({"unicode": "é日😀\u{0}", "s": "😀😀😀😀😀", "~": []}),
        json!({}),
    ] {
        round_trip(&message.to_string()).unwrap();
    }
}

#[test]
fn what_the_columns_hold_is_not_kept_again() {
    let message = json!({"t": "2024-05-01T12:34:56.000Z", "n": 7, "s": "abc", "x": 1});
    let row = pipeline().map("t", message.to_string().as_bytes()).unwrap();
    assert_eq!(row.residuals[0].as_deref(), Some(r#"{"x":1}"#));
    // The fan-out table maps only /n of these.
    assert_eq!(
        row.residuals[1].as_deref(),
        Some(r#"{"s":"abc","t":"2024-05-01T12:34:56.000Z","x":1}"#)
    );
}

#[test]
fn otlp_records_come_back_whole() {
    let columns = vec![
        spec("event_time", "/time", ColumnType::Datetime, None),
        spec("severity", "/severity_text", ColumnType::String, Some(16)),
        spec(
            "service",
            "/resource/service.name",
            ColumnType::String,
            Some(64),
        ),
        spec("body", "/body", ColumnType::Json, None),
        spec("trace_id", "/trace_id", ColumnType::String, Some(32)),
    ];
    let pipeline = Pipeline::new(
        MessageFormat::OtlpJson,
        Normalizer::default(),
        Mapper::new(&columns).keeping(PayloadMode::Residual),
        Vec::new(),
    );
    let message = json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeLogs": [{"scope": {"name": "app"}, "logRecords": [
            {"timeUnixNano": "1714566896123456789", "severityText": "INFO",
             "body": {"stringValue": "hello"}, "traceId": "0af7651916cd43dd8448eb211c80319c",
             "attributes": [{"key": "big", "value": {"intValue": "9007199254740993"}}]},
            {"timeUnixNano": "1714566896000000000", "severityNumber": 9,
             "body": {"kvlistValue": {"values": [{"key": "a/b", "value": {"doubleValue": 0.1}}]}}}
        ]}]
    }]})
    .to_string();
    let mut records = 0;
    pipeline
        .map_records("t", message.into_bytes(), |record| {
            let row = record.unwrap();
            let document: Json = serde_json::from_str(&row.document).unwrap();
            let back = rejoined(&columns, row.residuals[0].as_deref(), &row.values);
            assert_eq!(back, document);
            records += 1;
        })
        .unwrap();
    assert_eq!(records, 2);
}

/// Member names the columns' pointers reach, and ones that look like pointers.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("t".to_string()),
        Just("n".to_string()),
        Just("i".to_string()),
        Just("d".to_string()),
        Just("f".to_string()),
        Just("s".to_string()),
        Just("a/b".to_string()),
        Just("~".to_string()),
        Just("~0".to_string()),
        Just("o".to_string()),
        Just("p".to_string()),
        Just("q".to_string()),
        Just("arr".to_string()),
        Just(String::new()),
        "[é日😀]{1,2}",
    ]
}

fn leaf() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        (0u64..2).prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        (9_007_199_254_740_993u64..u64::MAX).prop_map(Json::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Json::from),
        any::<u64>().prop_map(|n| Json::from(n.to_string())),
        (0i64..253_402_300_799_000, 0u32..4, prop::bool::ANY).prop_map(|(ms, digits, z)| {
            let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
            let format = match digits {
                0 => chrono::SecondsFormat::Secs,
                1 => chrono::SecondsFormat::Millis,
                2 => chrono::SecondsFormat::Micros,
                _ => chrono::SecondsFormat::Nanos,
            };
            Json::from(t.to_rfc3339_opts(format, z))
        }),
        (0u64..4_000_000_000_000).prop_map(Json::from),
        "[a-z é日😀\"\\\\]{0,10}".prop_map(Json::from),
    ]
}

fn document() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
            prop::collection::btree_map(key(), inner, 0..7)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]
    #[test]
    fn any_document_that_maps_comes_back_whole(document in document()) {
        // A dead letter keeps its message whole; every other document must come back.
        match round_trip(&document.to_string()) {
            Ok(()) | Err(MapError::Column { .. }) => {}
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}
