//! Realistic log messages (JSON, about 300 bytes) for the demo and the benchmarks.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

const LEVELS: &[&str] = &["info", "info", "info", "info", "warn", "error", "debug"];
const SERVICES: &[&str] = &["checkout", "search", "auth", "payments", "catalog"];
const METHODS: &[&str] = &["GET", "GET", "POST", "PUT"];
const STATUSES: &[u16] = &[200, 200, 201, 404, 500];

/// Message `n` of a stream, its `time` field at `at`; other fields vary a little with `n`, and
/// its `trace_id` is distinct for every `n`.
pub fn log_message(n: u64, at: DateTime<Utc>) -> String {
    // A cheap, fixed scramble (a bijection of u64) so values are not all alike.
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let i = n as usize;
    let level = LEVELS[i % LEVELS.len()];
    let mut message = json!({
        "time": at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "level": level,
        "host": format!("web-{:03}.eu-west-1.example.com", h % 200),
        "service": SERVICES[i % SERVICES.len()],
        "message": format!(
            "GET /api/v1/orders/{} 200 in {}.{}ms user={} request_id={:016x} upstream=orders-db-primary",
            h % 1_000_000,
            h % 90 + 1,
            h % 10,
            h % 50_000,
            h
        ),
        "trace_id": format!("{h:016x}{:016x}", h.rotate_left(17)),
        "client": format!("10.{}.{}.{}", h % 256, (h >> 8) % 256, (h >> 16) % 256),
    });
    // Every other message is an HTTP access record, and errors carry their details, for the
    // fan-out tables of config/examples/pipeline.toml.
    if n.is_multiple_of(2) {
        message["http"] = json!({
            "request": { "method": METHODS[(h % 4) as usize] },
            "path": format!("/api/v1/orders/{}", h % 1_000),
            "status": STATUSES[(h % 5) as usize],
            "latency_ms": h % 90 + 1,
        });
    }
    if level == "error" {
        message["error"] = json!({
            "code": format!("E{}", h % 40),
            "stack": "at orders::handler (src/orders.rs:120)",
        });
    }
    message.to_string()
}

/// The time of message `n` of `count` spread evenly over `[start, start + span)`.
pub fn spread(start: DateTime<Utc>, span: chrono::Duration, n: u64, count: u64) -> DateTime<Utc> {
    let millis = span.num_milliseconds().max(0) as u128 * n as u128 / count.max(1) as u128;
    start + chrono::Duration::milliseconds(i64::try_from(millis).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_json_with_the_given_time_and_distinct_trace_ids() {
        let at = DateTime::from_timestamp(1_714_566_896, 0).unwrap_or_default();
        let a: serde_json::Value = serde_json::from_str(&log_message(1, at)).unwrap();
        let b: serde_json::Value = serde_json::from_str(&log_message(2, at)).unwrap();
        assert_eq!(a["time"], "2024-05-01T12:34:56.000Z");
        assert_ne!(a["trace_id"], b["trace_id"]);
    }

    #[test]
    fn spread_covers_the_span_evenly() {
        let start = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let day = chrono::Duration::days(1);
        assert_eq!(spread(start, day, 0, 4), start);
        assert_eq!(
            spread(start, day, 2, 4),
            start + chrono::Duration::hours(12)
        );
        assert!(spread(start, day, 3, 4) < start + day);
    }
}
