use chrono::NaiveDate;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::mysql::{MAX_TEXT_BYTES, SqlValue};

pub(super) fn spec(
    name: &str,
    pointer: &str,
    column_type: ColumnType,
    length: Option<u32>,
) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        pointer: pointer.into(),
        column_type,
        length,
        truncate: false,
    }
}

/// Maps `message` into a single column of `column_type` read from `/v`.
fn one(column_type: ColumnType, message: &str) -> Result<SqlValue, MapError> {
    let length = (column_type == ColumnType::String).then_some(8);
    let mapper = Mapper::new(&[spec("c", "/v", column_type, length)]);
    mapper.map(message.as_bytes()).map(|row| {
        assert_eq!(row.document, message);
        row.values.into_iter().next().unwrap()
    })
}

fn v(column_type: ColumnType, value: serde_json::Value) -> Result<SqlValue, String> {
    match one(column_type, &json!({ "v": value }).to_string()) {
        Ok(value) => Ok(value),
        Err(MapError::Column { column, reason }) => {
            assert_eq!(column, "c");
            Err(reason)
        }
        Err(other) => panic!("not a column error: {other}"),
    }
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.into())
}

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, ms: u32) -> SqlValue {
    SqlValue::Datetime(
        NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_milli_opt(h, mi, s, ms)
            .unwrap(),
    )
}

#[test]
fn raw_messages_are_mapped_as_a_message_field() {
    let columns = [
        spec("message", "/message", ColumnType::Text, None),
        spec("level", "/level", ColumnType::String, Some(16)),
    ];
    let mapper = Mapper::new(&columns);
    let line = "GET /a?b=\"c\" 200 {not json}";
    let row = mapper
        .map_message(MessageFormat::Raw, line.as_bytes())
        .unwrap();
    assert_eq!(row.values, [text(line), SqlValue::Null]);
    let stored: serde_json::Value = serde_json::from_str(&row.document).unwrap();
    assert_eq!(stored, json!({ "message": line }));
    // JSON in raw format is still text, not parsed.
    let row = mapper
        .map_message(MessageFormat::Raw, br#"{"level":"x"}"#)
        .unwrap();
    assert_eq!(row.values, [text(r#"{"level":"x"}"#), SqlValue::Null]);
    assert_eq!(
        mapper.map_message(MessageFormat::Raw, b"\xffbad"),
        Err(MapError::NotUtf8(0))
    );
    assert_eq!(
        mapper.map_message(MessageFormat::Json, b"plain"),
        mapper.map(b"plain")
    );
}

#[test]
fn missing_and_null_are_null_for_every_type() {
    for t in [
        ColumnType::String,
        ColumnType::Text,
        ColumnType::Int,
        ColumnType::Uint,
        ColumnType::Double,
        ColumnType::Bool,
        ColumnType::Datetime,
        ColumnType::Json,
    ] {
        assert_eq!(one(t, r#"{"v":null}"#), Ok(SqlValue::Null), "{t:?}");
        assert_eq!(one(t, r#"{"w":1}"#), Ok(SqlValue::Null), "{t:?}");
        // A scalar document has no fields at all.
        assert_eq!(one(t, "17"), Ok(SqlValue::Null), "{t:?}");
    }
}

#[test]
fn strings_keep_their_text_and_render_numbers_and_booleans() {
    use ColumnType::String as S;
    assert_eq!(v(S, json!("abc")), Ok(text("abc")));
    assert_eq!(v(S, json!("")), Ok(text("")));
    assert_eq!(v(S, json!(42)), Ok(text("42")));
    assert_eq!(v(S, json!(-1.5)), Ok(text("-1.5")));
    assert_eq!(
        v(ColumnType::Text, json!(u64::MAX)),
        Ok(text("18446744073709551615"))
    );
    assert_eq!(v(S, json!(true)), Ok(text("true")));
    assert!(v(S, json!([1])).unwrap_err().contains("array"));
    assert!(v(S, json!({"a": 1})).unwrap_err().contains("object"));
}

#[test]
fn a_string_longer_than_its_column_is_an_error_counted_in_characters() {
    use ColumnType::String as S;
    // Length 8: eight 4-byte emoji fit, nine do not.
    assert_eq!(v(S, json!("😀".repeat(8))), Ok(text(&"😀".repeat(8))));
    let reason = v(S, json!("😀".repeat(9))).unwrap_err();
    assert!(
        reason.contains("9 characters") && reason.contains('8'),
        "{reason}"
    );
    assert_eq!(v(S, json!("12345678")), Ok(text("12345678")));
    assert!(v(S, json!("123456789")).is_err());
    assert!(
        v(S, json!(123456789)).is_err(),
        "rendered numbers count too"
    );
}

#[test]
fn text_takes_big_fields_up_to_mediumtext() {
    let big = "x".repeat(1 << 20);
    assert_eq!(v(ColumnType::Text, json!(big)), Ok(text(&big)));
    let too_big = "x".repeat(MAX_TEXT_BYTES + 1);
    let reason = v(ColumnType::Text, json!(too_big)).unwrap_err();
    assert!(reason.contains("MEDIUMTEXT"), "{reason}");
}

fn truncating(name: &str, column_type: ColumnType, length: Option<u32>) -> ColumnSpec {
    ColumnSpec {
        truncate: true,
        ..spec(name, &format!("/{name}"), column_type, length)
    }
}

#[test]
fn truncating_columns_cut_long_strings_and_count_them() {
    let mapper = Mapper::new(&[
        truncating("s", ColumnType::String, Some(4)),
        truncating("t", ColumnType::Text, None),
        truncating("u", ColumnType::String, Some(4)),
    ]);
    // Characters for string columns: four emoji of four bytes each.
    let long_text = format!("{}é", "x".repeat(MAX_TEXT_BYTES - 1));
    let message = json!({ "s": "😀😀😀😀😀", "t": long_text, "u": "abcd" }).to_string();
    let row = mapper.map(message.as_bytes()).unwrap();
    assert_eq!(row.truncated, 2);
    assert_eq!(row.values[0], text(&"😀".repeat(4)));
    // Text is cut to MEDIUMTEXT's bytes on a character boundary: "é" (2 bytes) would straddle it.
    assert_eq!(row.values[1], text(&"x".repeat(MAX_TEXT_BYTES - 1)));
    assert_eq!(row.values[2], text("abcd"));
    assert_eq!(row.document, message);

    let row = mapper.map(br#"{"s": 12345, "u": null}"#).unwrap();
    assert_eq!((row.truncated, &row.values[0]), (1, &text("1234")));
    let row = mapper.map(br#"{"s": "ok"}"#).unwrap();
    assert_eq!(row.truncated, 0);
}

#[test]
fn without_truncate_long_strings_are_still_refused() {
    let mapper = Mapper::new(&[spec("s", "/s", ColumnType::String, Some(4))]);
    assert!(matches!(
        mapper.map(br#"{"s": "abcde"}"#),
        Err(MapError::Column { .. })
    ));
    let mapper = Mapper::new(&[spec("t", "/t", ColumnType::Text, None)]);
    let message = json!({ "t": "x".repeat(MAX_TEXT_BYTES + 1) }).to_string();
    assert!(matches!(
        mapper.map(message.as_bytes()),
        Err(MapError::Column { .. })
    ));
}

#[test]
fn truncate_is_allowed_on_string_and_text_columns_only() {
    assert!(truncating("s", ColumnType::String, None).ident().is_ok());
    assert!(truncating("t", ColumnType::Text, None).ident().is_ok());
    for other in [ColumnType::Int, ColumnType::Json, ColumnType::Datetime] {
        let reason = truncating("c", other, None).ident().unwrap_err();
        assert!(reason.contains("truncate"), "{reason}");
    }
}

#[test]
fn ints_from_numbers_and_numeric_strings() {
    use ColumnType::Int as I;
    assert_eq!(v(I, json!(0)), Ok(SqlValue::Int(0)));
    assert_eq!(v(I, json!(i64::MIN)), Ok(SqlValue::Int(i64::MIN)));
    assert_eq!(v(I, json!(i64::MAX)), Ok(SqlValue::Int(i64::MAX)));
    assert_eq!(v(I, json!(5.0)), Ok(SqlValue::Int(5)));
    assert_eq!(v(I, json!("-42")), Ok(SqlValue::Int(-42)));
    assert_eq!(v(I, json!("1e3")), Ok(SqlValue::Int(1000)));
    assert_eq!(
        v(I, json!("-9223372036854775808")),
        Ok(SqlValue::Int(i64::MIN))
    );
    for bad in [
        json!(i64::MAX as u64 + 1),
        json!("9223372036854775808"),
        json!(5.5),
        json!("5.5"),
        json!("abc"),
        json!(""),
        json!("NaN"),
        json!("inf"),
        json!(true),
        json!([1]),
        // 2^53 + 2 with an exponent: exact in f64, but beyond what f64 keeps exact in general.
        json!(9.007199254740994e15),
    ] {
        assert!(v(I, bad.clone()).is_err(), "{bad} accepted");
    }
}

#[test]
fn uints_are_exact_across_the_whole_u64_range() {
    use ColumnType::Uint as U;
    assert_eq!(v(U, json!(u64::MAX)), Ok(SqlValue::Uint(u64::MAX)));
    assert_eq!(
        v(U, json!("18446744073709551615")),
        Ok(SqlValue::Uint(u64::MAX))
    );
    assert_eq!(
        v(U, json!(i64::MAX as u64 + 1)),
        Ok(SqlValue::Uint(1 << 63))
    );
    assert_eq!(v(U, json!(0)), Ok(SqlValue::Uint(0)));
    // Past u64: serde_json reads it as a float, which is refused rather than rounded.
    assert!(one(U, r#"{"v":18446744073709551616}"#).is_err());
    assert!(one(U, r#"{"v":123456789012345678901234567890}"#).is_err());
    assert!(v(U, json!("18446744073709551616")).is_err());
    assert!(v(U, json!(-1)).unwrap_err().contains("out of range"));
    assert!(v(U, json!("-1")).is_err());
}

#[test]
fn doubles_from_numbers_and_numeric_strings_but_never_infinite() {
    use ColumnType::Double as D;
    assert_eq!(v(D, json!(1.5)), Ok(SqlValue::Double(1.5)));
    assert_eq!(v(D, json!(-3)), Ok(SqlValue::Double(-3.0)));
    assert_eq!(v(D, json!("2.5e-3")), Ok(SqlValue::Double(0.0025)));
    assert_eq!(v(D, json!(f64::MAX)), Ok(SqlValue::Double(f64::MAX)));
    for bad in [
        json!("inf"),
        json!("-infinity"),
        json!("NaN"),
        json!("x"),
        json!(false),
    ] {
        assert!(v(D, bad.clone()).is_err(), "{bad} accepted");
    }
    // JSON itself cannot carry an infinite number: serde_json refuses it while parsing.
    assert!(matches!(
        one(D, r#"{"v":1e400}"#),
        Err(MapError::NotJson(_))
    ));
}

#[test]
fn bools_from_booleans_zero_one_and_their_strings() {
    use ColumnType::Bool as B;
    for (given, expected) in [
        (json!(true), true),
        (json!(false), false),
        (json!(1), true),
        (json!(0), false),
        (json!("true"), true),
        (json!("0"), false),
    ] {
        assert_eq!(v(B, given), Ok(SqlValue::Bool(expected)));
    }
    for bad in [
        json!(2),
        json!(-1),
        json!(0.5),
        json!("yes"),
        json!("TRUE"),
        json!([]),
    ] {
        assert!(v(B, bad.clone()).is_err(), "{bad} accepted");
    }
}

#[test]
fn datetimes_from_rfc3339_in_any_offset_become_utc() {
    use ColumnType::Datetime as T;
    assert_eq!(
        v(T, json!("2024-05-01T12:34:56.789+08:00")),
        Ok(at(2024, 5, 1, 4, 34, 56, 789))
    );
    assert_eq!(
        v(T, json!("2024-05-01T12:34:56Z")),
        Ok(at(2024, 5, 1, 12, 34, 56, 0))
    );
    // Below the column's millisecond precision: dropped, never rounded up into the next second.
    assert_eq!(
        v(T, json!("2024-12-31T23:59:59.999999Z")),
        Ok(at(2024, 12, 31, 23, 59, 59, 999))
    );
    assert_eq!(
        v(T, json!("1969-12-31T23:59:59.9999Z")),
        Ok(at(1969, 12, 31, 23, 59, 59, 999))
    );
    // A leap second (:60): MariaDB has no second 60, so it is read as the next minute's first
    // second, its fraction kept.
    assert_eq!(
        v(T, json!("2016-12-31T23:59:60.5Z")),
        Ok(at(2017, 1, 1, 0, 0, 0, 500))
    );
    for bad in [
        json!("2024-05-01"),
        json!("yesterday"),
        json!("2024-02-30T00:00:00Z"),
        json!("0999-12-31T23:59:59Z"),
        json!(true),
        json!({}),
    ] {
        assert!(v(T, bad.clone()).is_err(), "{bad} accepted");
    }
}

#[test]
fn datetimes_from_epoch_seconds_and_milliseconds() {
    use ColumnType::Datetime as T;
    assert_eq!(
        v(T, json!(1_700_000_000)),
        Ok(at(2023, 11, 14, 22, 13, 20, 0))
    );
    assert_eq!(
        v(T, json!(1_700_000_000_123u64)),
        Ok(at(2023, 11, 14, 22, 13, 20, 123))
    );
    assert_eq!(
        v(T, json!(1_700_000_000.123)),
        Ok(at(2023, 11, 14, 22, 13, 20, 123))
    );
    assert_eq!(
        v(T, json!(1_700_000_000_123.9)),
        Ok(at(2023, 11, 14, 22, 13, 20, 123))
    );
    assert_eq!(v(T, json!(0)), Ok(at(1970, 1, 1, 0, 0, 0, 0)));
    assert_eq!(v(T, json!(-1.5)), Ok(at(1969, 12, 31, 23, 59, 58, 500)));
    // Seconds up to 99,999,999,999 (year 5138); from 10^11 on, milliseconds (1973).
    assert_eq!(
        v(T, json!(99_999_999_999i64)),
        Ok(at(5138, 11, 16, 9, 46, 39, 0))
    );
    assert_eq!(
        v(T, json!(100_000_000_000i64)),
        Ok(at(1973, 3, 3, 9, 46, 40, 0))
    );
    for bad in [
        json!(i64::MAX),
        json!(u64::MAX),
        json!(-1e300),
        json!(1e300),
    ] {
        let reason = v(T, bad.clone()).unwrap_err();
        assert!(reason.contains("9999"), "{bad}: {reason}");
    }
}

#[test]
fn json_columns_take_any_value_as_its_text() {
    use ColumnType::Json as J;
    assert_eq!(
        v(J, json!({"a": [1, "x\"y", null]})),
        Ok(SqlValue::Json(r#"{"a":[1,"x\"y",null]}"#.into()))
    );
    assert_eq!(v(J, json!("s")), Ok(SqlValue::Json(r#""s""#.into())));
    assert_eq!(v(J, json!(false)), Ok(SqlValue::Json("false".into())));
}

#[test]
fn the_document_is_kept_exactly_as_received() {
    let mapper = Mapper::new(&[]);
    let message = " { \"big\" : 123456789012345678901234567890.000 , \"e\":\"\\u00e9\" }\n";
    let row = mapper.map(message.as_bytes()).unwrap();
    assert_eq!(row.document, message);
    assert!(row.values.is_empty());
}

#[test]
fn the_empty_pointer_takes_the_whole_document() {
    let mapper = Mapper::new(&[spec("all", "", ColumnType::Json, None)]);
    let row = mapper.map(br#"{"a": 1}"#).unwrap();
    assert_eq!(row.values, vec![SqlValue::Json(r#"{"a":1}"#.into())]);
}

#[test]
fn errors_name_the_column_and_the_reason() {
    let mapper = Mapper::new(&[
        spec("level", "/level", ColumnType::String, Some(5)),
        spec("n", "/n", ColumnType::Uint, None),
    ]);
    let e = mapper.map(br#"{"level":"info","n":-3}"#).unwrap_err();
    assert_eq!(
        e,
        MapError::Column {
            column: "n".into(),
            reason: "-3 is out of range for an unsigned 64-bit integer".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "column n: -3 is out of range for an unsigned 64-bit integer"
    );
}

#[test]
fn reasons_quote_at_most_a_clip_of_a_huge_field() {
    let huge = "y".repeat(100_000);
    let reason = v(ColumnType::Int, json!(huge)).unwrap_err();
    assert!(reason.len() < 200, "{}", reason.len());
}

// ---------------------------------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let mapper = Mapper::new(&[]);
    assert_eq!(mapper.map(b"{\"a\":\"\xff\"}"), Err(MapError::NotUtf8(6)));
    // A truncated 4-byte sequence.
    assert_eq!(mapper.map(b"\"\xf0\x9f\x98\""), Err(MapError::NotUtf8(1)));
}

#[test]
fn not_json_is_refused_with_the_parsers_reason() {
    let mapper = Mapper::new(&[]);
    for bad in [
        &b""[..],
        b"{",
        b"{\"a\":1}x",
        b"{'a':1}",
        b"\"raw \x00 nul\"",
        b"\"lone \\ud800 surrogate\"",
        b"\xef\xbb\xbf{}",
        b"NaN",
    ] {
        match mapper.map(bad) {
            Err(MapError::NotJson(reason)) => assert!(!reason.is_empty()),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
}

#[test]
fn nul_quotes_backslashes_and_emoji_map_exactly() {
    let mapper = Mapper::new(&[
        spec("s", "/s", ColumnType::String, None),
        spec("t", "/t", ColumnType::Text, None),
    ]);
    let s = "nul\0 quote' dq\" bs\\ tab\t nl\n 😀 \u{10FFFF} \u{1a}";
    let t = "'); DROP TABLE logs; -- \\' \\\\";
    let message = json!({"s": s, "t": t}).to_string();
    let row = mapper.map(message.as_bytes()).unwrap();
    assert_eq!(row.values, vec![text(s), text(t)]);
    assert_eq!(row.document, message);
}

#[test]
fn sql_in_field_names_is_only_a_pointer_token() {
    // Pointer escapes: ~1 is '/', ~0 is '~'.
    let field = "a`; DROP TABLE logs; --/~'\"";
    let pointer = "/a`; DROP TABLE logs; --~1~0'\"";
    let mapper = Mapper::new(&[spec("c", pointer, ColumnType::Text, None)]);
    let row = mapper
        .map(json!({ field: "found" }).to_string().as_bytes())
        .unwrap();
    assert_eq!(row.values, vec![text("found")]);
}

#[test]
fn nesting_is_limited_to_what_mariadb_json_accepts() {
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mapper = Mapper::new(&[]);
    assert!(mapper.map(nested(MAX_JSON_DEPTH).as_bytes()).is_ok());
    assert_eq!(
        mapper.map(nested(MAX_JSON_DEPTH + 1).as_bytes()),
        Err(MapError::TooDeep)
    );
    let objects = format!(
        "{}1{}",
        "{\"a\":".repeat(MAX_JSON_DEPTH + 1),
        "}".repeat(MAX_JSON_DEPTH + 1)
    );
    assert_eq!(mapper.map(objects.as_bytes()), Err(MapError::TooDeep));
    // Far past serde_json's own recursion limit: an error, not a stack overflow.
    assert!(matches!(
        mapper.map(nested(100_000).as_bytes()),
        Err(MapError::NotJson(_))
    ));
}

#[test]
fn each_otlp_record_is_normalized_and_mapped_on_its_own() {
    use crate::transform::settings::{NormalizeRule, NormalizeStep};
    let normalizer = Normalizer::compile(vec![NormalizeRule {
        topics: vec![],
        steps: vec![
            NormalizeStep::Extract {
                from: "/resource/service.name".into(),
                to: "/service".into(),
            },
            NormalizeStep::Require {
                field: "/service".into(),
            },
        ],
    }])
    .unwrap();
    let main = Mapper::new(&[
        spec("service", "/service", ColumnType::String, Some(8)),
        spec("body", "/body", ColumnType::Text, None),
    ]);
    let pipeline = Pipeline::new(MessageFormat::OtlpJson, normalizer, main, Vec::new());
    let deep = (0..MAX_JSON_DEPTH).fold(
        json!({"stringValue": "x"}),
        |inner, _| json!({"arrayValue": {"values": [inner]}}),
    );
    let resource = |name: &str| json!({"attributes": [{"key": "service.name", "value": {"stringValue": name}}]});
    let message = json!({"resourceLogs": [
        {"resource": resource("api"), "scopeLogs": [{"logRecords": [
            {"body": {"stringValue": "one"}}, {"body": deep}, {"body": {"stringValue": "three"}}]}]},
        {"scopeLogs": [{"logRecords": [{"body": {"stringValue": "no service"}}]}]},
        {"resource": resource("too long a name"), "scopeLogs": [{"logRecords": [{}]}]},
    ]})
    .to_string();
    let mut records = Vec::new();
    pipeline
        .map_records("t", message.clone().into_bytes(), |r| records.push(r))
        .unwrap();
    type Outcome = Result<(Option<u32>, Vec<SqlValue>), (u32, String)>;
    let outcome: Vec<Outcome> = records
        .into_iter()
        .map(|r| {
            r.map(|row| (row.record, row.values))
                .map_err(|e| (e.record, e.error.to_string()))
        })
        .collect();
    assert_eq!(
        outcome,
        [
            Ok((Some(0), vec![text("api"), text("one")])),
            Err((1, MapError::TooDeep.to_string())),
            Ok((Some(2), vec![text("api"), text("three")])),
            Err((
                3,
                "normalize[0].steps[1] (require /service): missing".to_string()
            )),
            Err((
                4,
                "column service: 15 characters, longer than the column's 8".to_string()
            )),
        ]
    );
    // A single-document mapping takes an OTLP message of exactly one record.
    assert!(matches!(
        pipeline.map("t", message.as_bytes()),
        Err(MapError::NotOneRecord(5))
    ));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

fn every_type() -> Vec<ColumnSpec> {
    [
        ColumnType::String,
        ColumnType::Text,
        ColumnType::Int,
        ColumnType::Uint,
        ColumnType::Double,
        ColumnType::Bool,
        ColumnType::Datetime,
        ColumnType::Json,
    ]
    .into_iter()
    .enumerate()
    .flat_map(|(i, t)| {
        let length = (t == ColumnType::String).then_some(16);
        [
            spec(&format!("a{i}"), "/a", t, length),
            spec(&format!("b{i}"), "/b/0", t, length),
            spec(&format!("c{i}"), "", t, length),
        ]
    })
    .collect()
}

fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(serde_json::Value::String),
        "[0-9eE+.-]{0,12}".prop_map(serde_json::Value::String),
        "[0-9T:Z.+-]{0,30}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[ab]|.{0,4}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn random_json_never_panics_and_maps_within_limits(doc in any_json()) {
        let message = doc.to_string();
        let mapper = Mapper::new(&every_type());
        match mapper.map(message.as_bytes()) {
            Ok(row) => {
                prop_assert_eq!(&row.document, &message);
                prop_assert_eq!(row.values.len(), every_type().len());
                for value in &row.values {
                    match value {
                        SqlValue::Text(s) => prop_assert!(s.len() <= MAX_TEXT_BYTES),
                        SqlValue::Double(f) => prop_assert!(f.is_finite()),
                        SqlValue::Datetime(t) => {
                            prop_assert!((1000..=9999).contains(&chrono::Datelike::year(t)));
                            prop_assert_eq!(t.and_utc().timestamp_subsec_micros() % 1000, 0);
                        }
                        SqlValue::Json(j) => {
                            prop_assert!(serde_json::from_str::<serde_json::Value>(j).is_ok());
                        }
                        _ => {}
                    }
                }
            }
            Err(MapError::Column { column, reason }) => {
                prop_assert!(!column.is_empty() && !reason.is_empty());
            }
            Err(other) => prop_assert!(false, "a serialized value failed to parse: {other}"),
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Mapper::new(&every_type()).map(&bytes);
    }

    #[test]
    fn uint_strings_round_trip_exactly(n in any::<u64>()) {
        prop_assert_eq!(v(ColumnType::Uint, json!(n.to_string())), Ok(SqlValue::Uint(n)));
        prop_assert_eq!(v(ColumnType::Uint, json!(n)), Ok(SqlValue::Uint(n)));
    }
}
