use chrono::NaiveDate;
use proptest::prelude::*;
use serde_json::json;

use super::*;

fn tokens(pointer: &str) -> Vec<Token> {
    parse_pointer(pointer).unwrap()
}

/// Splits `document` by `columns` (pointer, value) and rejoins it as a reader would: the
/// residual through its text, each value through [`as_json`].
fn round_trip(document: &Json, columns: &[(&str, SqlValue)]) -> (Option<String>, Json) {
    let paths: Vec<Option<Vec<Token>>> = columns.iter().map(|(p, _)| parse_pointer(p)).collect();
    let mut residual = document.clone();
    split(
        &mut residual,
        paths
            .iter()
            .map(Option::as_deref)
            .zip(columns.iter().map(|(_, v)| v)),
    );
    let text = residual_text(&residual);
    let read: Vec<Json> = columns.iter().map(|(_, v)| as_json(v)).collect();
    let parsed = text.as_deref().map(|t| serde_json::from_str(t).unwrap());
    let back = rejoin(parsed, paths.iter().map(Option::as_deref).zip(read.iter()));
    (text, back)
}

#[test]
fn values_the_columns_give_back_leave_the_residual() {
    let time = NaiveDate::from_ymd_opt(2024, 5, 1)
        .unwrap()
        .and_hms_milli_opt(12, 34, 56, 0)
        .unwrap();
    let document = json!({
        "time": "2024-05-01T12:34:56.000Z", "level": "info", "n": 7,
        "http": {"status": 500, "path": "/x"}, "trace": "abc"
    });
    let columns = [
        ("/time", SqlValue::Datetime(time)),
        ("/level", SqlValue::Text("info".into())),
        ("/n", SqlValue::Uint(7)),
        ("/http/status", SqlValue::Uint(500)),
        ("/http/path", SqlValue::Text("/x".into())),
    ];
    let (residual, back) = round_trip(&document, &columns);
    // The emptied `http` goes with its members.
    assert_eq!(residual.as_deref(), Some(r#"{"trace":"abc"}"#));
    assert_eq!(back, document);
}

#[test]
fn values_a_column_changed_stay_in_the_residual() {
    let time = NaiveDate::from_ymd_opt(2024, 5, 1)
        .unwrap()
        .and_hms_milli_opt(12, 34, 56, 123)
        .unwrap();
    let document = json!({
        "micro": "2024-05-01T12:34:56.123456Z", "epoch": 1714566896123u64,
        "cut": "abcdef", "num_text": 5, "big": 9007199254740993u64, "flag": 1, "nothing": null
    });
    let columns = [
        ("/micro", SqlValue::Datetime(time)),
        ("/epoch", SqlValue::Datetime(time)),
        ("/cut", SqlValue::Text("abc".into())),
        ("/num_text", SqlValue::Text("5".into())),
        ("/big", SqlValue::Double(9007199254740993u64 as f64)),
        ("/flag", SqlValue::Bool(true)),
        ("/nothing", SqlValue::Null),
    ];
    let (residual, back) = round_trip(&document, &columns);
    let residual: Json = serde_json::from_str(&residual.unwrap()).unwrap();
    assert_eq!(residual, document, "every value differs from its column's");
    assert_eq!(back, document);
}

#[test]
fn a_full_document_is_a_residual_too() {
    let document = json!({"a": {"b": 1}, "c": "x"});
    let columns = [("/a/b", Json::from(1)), ("/c", Json::from("x"))];
    let paths: Vec<Vec<Token>> = columns.iter().map(|(p, _)| tokens(p)).collect();
    let back = rejoin(
        Some(document.clone()),
        paths
            .iter()
            .map(|p| Some(p.as_slice()))
            .zip(columns.iter().map(|(_, v)| v)),
    );
    assert_eq!(back, document);
}

#[test]
fn array_elements_and_the_whole_document_stay() {
    let document = json!({"items": [{"n": 1}, 2], "e": {}});
    let columns = [
        ("/items/0/n", SqlValue::Uint(1)),
        ("/items/1", SqlValue::Uint(2)),
        ("", SqlValue::Json(document.to_string())),
    ];
    let (residual, back) = round_trip(&document, &columns);
    // The element emptied stays an empty object; the empty `e` was empty before.
    assert_eq!(residual.as_deref(), Some(r#"{"e":{},"items":[{},2]}"#));
    assert_eq!(back, document);
}

#[test]
fn nothing_left_is_null_and_null_is_an_empty_object() {
    let document = json!({"a": "x"});
    let (residual, back) = round_trip(&document, &[("/a", SqlValue::Text("x".into()))]);
    assert_eq!(residual, None);
    assert_eq!(back, document);
    assert_eq!(round_trip(&json!({}), &[]), (None, json!({})));
}

#[test]
fn reads_back_as_agrees_with_as_json() {
    let values = [
        SqlValue::Text("5".into()),
        SqlValue::Int(-5),
        SqlValue::Int(5),
        SqlValue::Uint(5),
        SqlValue::Uint(u64::MAX),
        SqlValue::Double(5.0),
        SqlValue::Double(-0.0),
        SqlValue::Bool(true),
        SqlValue::Json("[1,{\"a\":2}]".into()),
    ];
    let originals = [
        json!("5"),
        json!(5),
        json!(-5),
        json!(5.0),
        json!(u64::MAX),
        json!(-0.0),
        json!(true),
        json!(1),
        json!([1, {"a": 2}]),
    ];
    for value in &values {
        for original in &originals {
            assert_eq!(
                reads_back_as(value, original),
                as_json(value) == *original,
                "{value:?} against {original}"
            );
        }
    }
}

/// Member names that look like pointers, or are empty, or read as indexes.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a/b".to_string()),
        Just("~0".to_string()),
        Just("~1".to_string()),
        Just("".to_string()),
        Just("0".to_string()),
        Just("01".to_string()),
        "[a-c]{1,2}",
        "[é日😀~/]{1,3}",
    ]
}

fn document() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        // Past 2^53, where doubles lose integers.
        (9_007_199_254_740_993u64..u64::MAX).prop_map(Json::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Json::from),
        "[a-z é日😀\"\\\\]{0,6}".prop_map(Json::from),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// Every pointer to a value in `document`, escaped as RFC 6901 writes them.
fn pointers_in(document: &Json, prefix: &str, out: &mut Vec<String>) {
    out.push(prefix.to_string());
    match document {
        Json::Object(fields) => {
            for (key, value) in fields {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers_in(value, &format!("{prefix}/{escaped}"), out);
            }
        }
        Json::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                pointers_in(value, &format!("{prefix}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// A column value for the value `found` at a pointer: NULL where there is none (as every
/// column type maps a missing or null value), else one it reads back as or another one.
fn column_value(found: Option<&Json>, exact: bool, other: &SqlValue) -> SqlValue {
    let Some(found) = found.filter(|v| !v.is_null()) else {
        return SqlValue::Null;
    };
    if !exact {
        return other.clone();
    }
    match found {
        Json::String(s) => SqlValue::Text(s.clone()),
        Json::Bool(b) => SqlValue::Bool(*b),
        Json::Number(n) if n.is_u64() => SqlValue::Uint(n.as_u64().unwrap()),
        Json::Number(n) if n.is_i64() => SqlValue::Int(n.as_i64().unwrap()),
        Json::Number(n) => SqlValue::Double(n.as_f64().unwrap()),
        value => SqlValue::Json(value.to_string()),
    }
}

fn other_value() -> impl Strategy<Value = SqlValue> {
    prop_oneof![
        "[a-z]{0,3}".prop_map(SqlValue::Text),
        any::<u64>().prop_map(SqlValue::Uint),
        any::<i64>().prop_map(SqlValue::Int),
        any::<bool>().prop_map(SqlValue::Bool),
        (0i64..200_000_000_000).prop_map(|ms| SqlValue::Datetime(
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .naive_utc()
        )),
        Just(SqlValue::Json("{}".into())),
    ]
}

proptest! {
    #[test]
    fn any_document_comes_back_whole(
        document in document(),
        picks in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>(), other_value()), 0..8),
        stray in prop::collection::vec("(/[a-c0~/]{0,2}){1,3}", 0..3),
    ) {
        let mut pointers = Vec::new();
        pointers_in(&document, "", &mut pointers);
        let mut columns: Vec<(String, SqlValue)> = picks
            .iter()
            .map(|(index, exact, other)| {
                let pointer = index.get(&pointers).clone();
                let found = document.pointer(&pointer);
                let value = column_value(found, *exact, other);
                (pointer, value)
            })
            .collect();
        for pointer in stray {
            let value = column_value(document.pointer(&pointer), true, &SqlValue::Null);
            columns.push((pointer, value));
        }
        let columns: Vec<(&str, SqlValue)> =
            columns.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        let (_, back) = round_trip(&document, &columns);
        prop_assert_eq!(back, document);
    }
}
