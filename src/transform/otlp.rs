//! OpenTelemetry log messages (`ingest.format = "otlp_proto" | "otlp_json"`): an
//! `ExportLogsServiceRequest` per Kafka message, as the OpenTelemetry Collector's Kafka exporter
//! writes them, decoded with the `opentelemetry-proto` crate's generated types into one flat JSON
//! document per log record.
//!
//! The document a record becomes (a field the record leaves unset is absent, so its column is
//! NULL):
//!
//! ```json
//! {"time": "2026-11-21T10:00:00.123456789Z", "observed_time": "2026-11-21T10:00:00.2Z",
//!  "severity_number": 9, "severity_text": "INFO", "body": "GET /a 200",
//!  "trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331", "flags": 1,
//!  "event_name": "http.request", "attributes": {"http.status": 200},
//!  "resource": {"service.name": "api", "host.name": "web-1"},
//!  "scope": {"name": "app.http", "version": "1.2.0", "attributes": {}}}
//! ```
//!
//! `time` is the record's time, else its observed time (RFC 3339 UTC, nanoseconds).
//! Attribute keys are kept whole: `/attributes/http.status` and `/resource/service.name` are
//! JSON pointers to them (a `/` or `~` in a key is written `~1` or `~0`). Values keep their
//! types: strings, booleans, 64-bit integers and doubles as JSON (a double that is not finite as
//! the text `NaN`, `Infinity` or `-Infinity`), arrays and key-value lists as JSON arrays and
//! objects, bytes as base64 text (as OTLP/JSON writes them). A key that appears twice keeps its
//! last value.

use base64::Engine;
use chrono::{DateTime, SecondsFormat};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;
use serde_json::{Map, Value as Json};

use super::MapError;

/// The two encodings of the Collector's Kafka exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Protocol Buffers binary encoding (the exporter's default, `otlp_proto`).
    Proto,
    /// OTLP/JSON (`otlp_json`): hex trace and span IDs, 64-bit integers as strings or numbers,
    /// enums as integers, lowerCamelCase field names.
    Json,
}

/// The log records of one message, each as its flat document, in the order of the message
/// (resource by resource, scope by scope).
pub fn records(encoding: Encoding, message: &[u8]) -> Result<Vec<Json>, MapError> {
    let request = match encoding {
        Encoding::Proto => ExportLogsServiceRequest::decode(message)
            .map_err(|e| MapError::NotOtlp(format!("protobuf: {e}")))?,
        Encoding::Json => {
            let not_otlp = |e: serde_json::Error| MapError::NotOtlp(format!("OTLP/JSON: {e}"));
            let mut request: Json = serde_json::from_slice(message).map_err(not_otlp)?;
            fill_request(&mut request);
            serde_json::from_value(request).map_err(not_otlp)?
        }
    };
    let mut documents = Vec::new();
    for resource_logs in &request.resource_logs {
        let resource = resource_logs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope_logs in &resource_logs.scope_logs {
            let scope = scope_logs
                .scope
                .as_ref()
                .map(|s| {
                    let mut scope = Map::new();
                    non_empty(&mut scope, "name", &s.name);
                    non_empty(&mut scope, "version", &s.version);
                    scope.insert("attributes".into(), Json::Object(attributes(&s.attributes)));
                    scope
                })
                .unwrap_or_default();
            for record in &scope_logs.log_records {
                documents.push(document(record, &resource, &scope));
            }
        }
    }
    Ok(documents)
}

/// One record's flat document.
fn document(record: &LogRecord, resource: &Map<String, Json>, scope: &Map<String, Json>) -> Json {
    let mut doc = Map::new();
    let time = match record.time_unix_nano {
        0 => record.observed_time_unix_nano,
        t => t,
    };
    if let Some(time) = rfc3339(time) {
        doc.insert("time".into(), Json::String(time));
    }
    if let Some(observed) = rfc3339(record.observed_time_unix_nano) {
        doc.insert("observed_time".into(), Json::String(observed));
    }
    if record.severity_number != 0 {
        doc.insert("severity_number".into(), record.severity_number.into());
    }
    non_empty(&mut doc, "severity_text", &record.severity_text);
    if let Some(body) = record.body.as_ref().and_then(value) {
        doc.insert("body".into(), body);
    }
    if !record.trace_id.is_empty() {
        doc.insert("trace_id".into(), Json::String(hex(&record.trace_id)));
    }
    if !record.span_id.is_empty() {
        doc.insert("span_id".into(), Json::String(hex(&record.span_id)));
    }
    if record.flags != 0 {
        doc.insert("flags".into(), record.flags.into());
    }
    non_empty(&mut doc, "event_name", &record.event_name);
    doc.insert(
        "attributes".into(),
        Json::Object(attributes(&record.attributes)),
    );
    doc.insert("resource".into(), Json::Object(resource.clone()));
    doc.insert("scope".into(), Json::Object(scope.clone()));
    Json::Object(doc)
}

fn non_empty(doc: &mut Map<String, Json>, key: &str, text: &str) {
    if !text.is_empty() {
        doc.insert(key.into(), Json::String(text.to_string()));
    }
}

/// Nanoseconds since the Unix epoch as RFC 3339 UTC; `None` for 0 (unset).
fn rfc3339(nanos: u64) -> Option<String> {
    if nanos == 0 {
        return None;
    }
    let seconds = i64::try_from(nanos / 1_000_000_000).ok()?;
    // Below 10^9 by construction.
    let subsec = (nanos % 1_000_000_000) as u32;
    DateTime::from_timestamp(seconds, subsec).map(|t| t.to_rfc3339_opts(SecondsFormat::Nanos, true))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    text
}

fn attributes(pairs: &[KeyValue]) -> Map<String, Json> {
    pairs
        .iter()
        .map(|pair| {
            let value = pair.value.as_ref().and_then(value).unwrap_or(Json::Null);
            (pair.key.clone(), value)
        })
        .collect()
}

/// An `AnyValue` as JSON; `None` when it is empty (no value set).
fn value(any: &AnyValue) -> Option<Json> {
    use any_value::Value::*;
    Some(match any.value.as_ref()? {
        StringValue(s) => Json::String(s.clone()),
        BoolValue(b) => Json::Bool(*b),
        IntValue(i) => Json::from(*i),
        DoubleValue(d) => serde_json::Number::from_f64(*d)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(not_finite(*d).to_string())),
        ArrayValue(array) => Json::Array(
            array
                .values
                .iter()
                .map(|v| value(v).unwrap_or(Json::Null))
                .collect(),
        ),
        KvlistValue(list) => Json::Object(attributes(&list.values)),
        BytesValue(bytes) => Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        // A reference into a profile's string table: only the profiling signal has one.
        StringValueStrindex(_) => return None,
    })
}

// proto3 JSON: a field left out (or `null`) has its default value, and protobuf's own JSON
// writers leave out empty repeated fields and empty strings (the SDK writes an empty list as
// `{"arrayValue": {}}`). The `opentelemetry-proto` crate's types require some of those fields
// (`ArrayValue.values`, `KeyValueList.values`, `KeyValue.key`, every field of `EntityRef`); the
// functions below give each of them its default before the request is read, along every path
// of a logs request that holds one.

/// Fills the defaults of an `ExportLogsServiceRequest`.
fn fill_request(request: &mut Json) {
    drop_nulls(request);
    for resource_logs in elements(request, "resourceLogs") {
        drop_nulls(resource_logs);
        if let Some(resource) = member(resource_logs, "resource") {
            drop_nulls(resource);
            for pair in elements(resource, "attributes") {
                fill_key_value(pair);
            }
            for entity in elements(resource, "entityRefs") {
                drop_nulls(entity);
                for (field, empty) in [
                    ("schemaUrl", Json::from("")),
                    ("type", Json::from("")),
                    ("idKeys", Json::Array(Vec::new())),
                    ("descriptionKeys", Json::Array(Vec::new())),
                ] {
                    default_to(entity, field, empty);
                }
            }
        }
        for scope_logs in elements(resource_logs, "scopeLogs") {
            drop_nulls(scope_logs);
            if let Some(scope) = member(scope_logs, "scope") {
                drop_nulls(scope);
                for pair in elements(scope, "attributes") {
                    fill_key_value(pair);
                }
            }
            for record in elements(scope_logs, "logRecords") {
                drop_nulls(record);
                if let Some(body) = member(record, "body") {
                    fill_any_value(body);
                }
                for pair in elements(record, "attributes") {
                    fill_key_value(pair);
                }
            }
        }
    }
}

fn fill_key_value(pair: &mut Json) {
    drop_nulls(pair);
    default_to(pair, "key", Json::from(""));
    if let Some(value) = member(pair, "value") {
        fill_any_value(value);
    }
}

fn fill_any_value(any: &mut Json) {
    if let Some(array) = member(any, "arrayValue") {
        drop_nulls(array);
        default_to(array, "values", Json::Array(Vec::new()));
        for value in elements(array, "values") {
            fill_any_value(value);
        }
    }
    if let Some(list) = member(any, "kvlistValue") {
        drop_nulls(list);
        default_to(list, "values", Json::Array(Vec::new()));
        for pair in elements(list, "values") {
            fill_key_value(pair);
        }
    }
}

/// Leaves out the fields of a message given as `null`, which then take their defaults.
fn drop_nulls(message: &mut Json) {
    if let Some(fields) = message.as_object_mut() {
        fields.retain(|_, value| !value.is_null());
    }
}

/// `object[field]` when `object` is an object with that field set (not `null`); `None`
/// otherwise, leaving what is not an object for the decoder to refuse.
fn member<'a>(object: &'a mut Json, field: &str) -> Option<&'a mut Json> {
    object.get_mut(field).filter(|value| !value.is_null())
}

/// The elements of the array `object[field]`, none when it is absent or not an array.
fn elements<'a>(object: &'a mut Json, field: &str) -> impl Iterator<Item = &'a mut Json> {
    member(object, field)
        .and_then(Json::as_array_mut)
        .into_iter()
        .flatten()
}

/// Sets `object[field]` to `empty` when it is absent or `null`.
fn default_to(object: &mut Json, field: &str, empty: Json) {
    if let Some(object) = object.as_object_mut() {
        let value = object.entry(field).or_insert(Json::Null);
        if value.is_null() {
            *value = empty;
        }
    }
}

/// proto3 JSON's names for the doubles JSON has no number for.
fn not_finite(d: f64) -> &'static str {
    if d.is_nan() {
        "NaN"
    } else if d > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

#[cfg(test)]
mod tests;
