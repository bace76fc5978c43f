//! `logstamp serve`'s JSON API against MariaDB, checked against plain SQL: pages of rows
//! follow their cursor to exactly the range's rows, filters hold, histograms (from the rollup
//! and from the table) count what SQL counts, and bad requests are refused with a status and a
//! message naming the parameter, before any SQL runs.

mod support;

use std::collections::BTreeMap;

use mysql_async::prelude::Queryable;
use serde_json::Value;

use logstamp::serve::Server;
use logstamp::time::format_utc;
use support::explorer::{LINES, Loaded, id_of, lines_between, loaded, run_logstamp};
use support::http;

/// Serves the API of `loaded`'s settings (with `overrides`) on a free port, in this runtime.
async fn serve(loaded: &Loaded, overrides: &[(&str, &str)]) -> String {
    let settings = loaded
        .db
        .settings_with_file(Some(loaded.config.path()), overrides);
    let server = Server::new(
        settings.serve.clone(),
        settings.serve_catalog(),
        &settings.mysql.url,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { server.serve(listener).await });
    address
}

/// A GET of the API, with the bearer token if given: status and JSON.
async fn get(address: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let (address, path) = (address.to_string(), path.to_string());
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    tokio::task::spawn_blocking(move || {
        let (status, body) = http::get_with(&address, &path, &auth);
        let json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"));
        (status, json)
    })
    .await
    .unwrap()
}

fn enc(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn range(from: u64, to: u64) -> String {
    format!("from={}&to={}", format_utc(from), format_utc(to))
}

#[tokio::test]
async fn pages_filters_and_histograms_match_plain_sql() {
    let loaded = loaded("serve_api").await;
    let address = serve(&loaded, &[]).await;
    let start = loaded.start;
    // Not on whole minutes: the rollup takes the inner minutes, the table the edges.
    let (from, to) = (start + 17, start + 4_000 + 43);
    let expected = lines_between(&loaded.db, from, to).await;
    assert_eq!(expected.len(), 4_026);

    // Newest first, page by page along the cursor: every row once, in descending ID order.
    let mut got: Vec<u64> = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = get(
            &address,
            &format!("/api/rows?{}&limit=1000{cursor}", range(from, to)),
            None,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert!(page.get("error").is_none(), "{page}");
        let rows = page["rows"].as_array().unwrap();
        assert_eq!(page["count"], rows.len());
        got.extend(
            rows.iter()
                .map(|r| r["id"].as_str().unwrap().parse::<u64>().unwrap()),
        );
        match page["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    let mut want: Vec<u64> = expected.iter().map(|(id, _)| *id).collect();
    want.reverse();
    assert_eq!(got, want);

    // Oldest first, with a filter: only errors, all of them.
    let errors: Vec<u64> = expected
        .iter()
        .filter(|(_, level)| level == "error")
        .map(|(id, _)| *id)
        .collect();
    let (status, page) = get(
        &address,
        &format!(
            "/api/rows?{}&order=oldest&limit=1000&where={}",
            range(from, to),
            enc("level = 'error' and host like 'web-%'")
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let rows = page["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["level"] == "error"));
    let ids: Vec<u64> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, errors);
    // The whole document of a row: its payload as JSON.
    assert_eq!(rows[0]["payload"]["http"]["status"], 200);

    // The histogram per minute: the rollup for whole minutes, the table for the edges, each
    // bar as SQL counts it.
    let (status, h) = get(
        &address,
        &format!("/api/histogram?{}&interval=60", range(from, to)),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    let sources: Vec<&str> = h["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(sources.len(), 3, "{sources:?}");
    assert!(sources[0].starts_with("table logs"), "{sources:?}");
    assert!(
        sources[1].starts_with("rollup per_minute_level"),
        "{sources:?}"
    );
    assert_eq!(h["total"], expected.len());
    let mut bars: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for (id, level) in &expected {
        *bars
            .entry(((id >> 32) / 60 * 60, level.clone()))
            .or_default() += 1;
    }
    let mut counted: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for bar in h["bars"].as_array().unwrap() {
        for (level, n) in bar["counts"].as_object().unwrap() {
            counted.insert(
                (bar["start"].as_u64().unwrap(), level.clone()),
                n.as_u64().unwrap(),
            );
        }
    }
    assert_eq!(counted, bars);

    // Filtered by a dimension of the rollup, `=`: still the rollup, counting only errors.
    let (status, h) = get(
        &address,
        &format!(
            "/api/histogram?{}&interval=60&where={}",
            range(from, to),
            enc("level = 'error'")
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    assert!(
        h["sources"][1].as_str().unwrap().starts_with("rollup"),
        "{h}"
    );
    let mut error_bars: BTreeMap<u64, u64> = BTreeMap::new();
    for (id, level) in &expected {
        if level == "error" {
            *error_bars.entry((id >> 32) / 60 * 60).or_default() += 1;
        }
    }
    let counted: BTreeMap<u64, u64> = h["bars"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|bar| {
            let n = bar["counts"].get("error")?.as_u64()?;
            Some((bar["start"].as_u64().unwrap(), n))
        })
        .collect();
    assert_eq!(counted, error_bars);
    assert_eq!(h["keys"], serde_json::json!(["error"]));

    // With a filter on another column the table is counted, by the column asked for.
    let (status, h) = get(
        &address,
        &format!(
            "/api/histogram?{}&by=service&where={}",
            range(from, to),
            enc("level = 'error'")
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    assert_eq!(h["total"], errors.len());
    assert_eq!(h["by"], "service");
    assert_eq!(h["sources"].as_array().unwrap().len(), 1);
    assert!(h["bars"].as_array().unwrap().len() <= 100);

    // The catalog, an ID decoded, the store's health.
    let (_, tables) = get(&address, "/api/tables", None).await;
    assert_eq!(tables["tables"][0]["name"], "logs");
    assert_eq!(
        tables["tables"][0]["rollups"][0]["name"],
        "per_minute_level"
    );
    let id = id_of(start, 5);
    let (status, decoded) = get(&address, &format!("/api/id/{id}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(decoded["id"], id.to_string());
    assert_eq!(decoded["unix_seconds"], start + 5);
    assert_eq!(decoded["service_id"], 1);
    assert_eq!(decoded["counter"], 5);
    let (status, health) = get(&address, "/api/health", None).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        health["tables"][0]["newest_id"],
        id_of(start, LINES).to_string()
    );
}

#[tokio::test]
async fn bad_requests_say_whose_fault_and_reach_no_sql() {
    let loaded = loaded("serve_bad").await;
    let address = serve(&loaded, &[("serve.max_rows", "50")]).await;
    let ok = range(loaded.start, loaded.start + 600);
    let refused =
        |path: String, status: u16, parameter: Option<&'static str>, needle: &'static str| {
            let address = address.clone();
            async move {
                let (got, body) = get(&address, &path, None).await;
                assert_eq!(got, status, "{path}: {body}");
                let error = &body["error"];
                assert_eq!(error["status"], status);
                if let Some(parameter) = parameter {
                    assert_eq!(error["parameter"], parameter, "{path}: {body}");
                }
                let message = error["message"].as_str().unwrap();
                assert!(message.contains(needle), "{path}: {message}");
                body
            }
        };
    let body = refused(
        format!(
            "/api/rows?{ok}&where={}",
            enc("level = 'x'; DROP TABLE logs")
        ),
        400,
        Some("where"),
        "unexpected character ';'",
    )
    .await;
    assert_eq!(body["error"]["at"], 11);
    refused(
        format!("/api/histogram?{ok}&where={}", enc("nosuch = 1")),
        400,
        Some("where"),
        "unknown column `nosuch`",
    )
    .await;
    refused(
        format!("/api/rows?{ok}&limit=51"),
        400,
        Some("limit"),
        "from 1 to 50",
    )
    .await;
    refused(
        format!("/api/rows?{ok}&x=1"),
        400,
        Some("x"),
        "unknown parameter",
    )
    .await;
    refused(
        format!("/api/rows?{ok}&cursor=abc"),
        400,
        Some("cursor"),
        "not a cursor",
    )
    .await;
    refused(
        "/api/rows?from=2040-01-02&to=2040-01-01".into(),
        400,
        Some("to"),
        "after from",
    )
    .await;
    refused(
        "/api/rows?from=2040-01-01&to=2040-03-01".into(),
        400,
        Some("from"),
        "serve.max_range",
    )
    .await;
    refused(
        "/api/rows?to=2040-03-01".into(),
        400,
        Some("from"),
        "missing",
    )
    .await;
    refused(
        format!("/api/rows?{ok}&table=users"),
        400,
        Some("table"),
        "not a table",
    )
    .await;
    refused(
        format!("/api/histogram?{ok}&by=message"),
        400,
        Some("by"),
        "count by one of",
    )
    .await;
    refused(
        format!("/api/histogram?{ok}&by={}", enc("level`; --")),
        400,
        Some("by"),
        "count by one of",
    )
    .await;
    refused(
        format!("/api/histogram?{ok}&interval=1&from=2040-01-01&to=2040-01-02"),
        400,
        Some("from"),
        "more than once",
    )
    .await;
    refused("/api/id/-1".into(), 400, Some("id"), "not an ID").await;
    refused("/api/nosuch".into(), 404, None, "no such path").await;
    // Nothing reached SQL unbound: the table is whole.
    assert_eq!(
        lines_between(&loaded.db, loaded.start, loaded.start + LINES + 1)
            .await
            .len() as u64,
        LINES
    );
}

/// The forms `query --from`/`--to` take, relative ones too, as the README says: the range's
/// instants from `/api/range`, and counts over them.
#[tokio::test]
async fn relative_times_are_read_as_the_cli_reads_them() {
    let loaded = loaded("serve_relative").await;
    let address = serve(&loaded, &[]).await;
    for (from, to) in [
        ("-24h", "now"),
        ("now-24h", "now"),
        ("24h ago", "now"),
        ("now-1d", "now+1h"),
    ] {
        let query = format!("from={}&to={}", enc(from), enc(to));
        let (status, h) = get(&address, &format!("/api/histogram?{query}"), None).await;
        assert_eq!(status, 200, "{query}: {h}");
        assert_eq!(h["total"], LINES, "{query}: {h}");
        let (status, range) = get(&address, &format!("/api/range?{query}"), None).await;
        assert_eq!(status, 200, "{query}: {range}");
        let instant = |key: &str| {
            chrono::DateTime::parse_from_rfc3339(range[key].as_str().unwrap())
                .unwrap()
                .timestamp()
        };
        let span = instant("to") - instant("from");
        let hours = if to == "now" { 24 } else { 25 };
        assert_eq!(span, hours * 3_600, "{query}: {range}");
        let now = chrono::Utc::now().timestamp();
        assert!(
            (now - 5..=now).contains(&(instant("from") + 86_400)),
            "{range}"
        );
    }
    let (status, body) = get(&address, "/api/range?from=-2h&to=-3h", None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["parameter"], "to");
}

/// Requests hyper refuses before any route answer JSON too, naming the limit.
#[tokio::test]
async fn a_url_past_the_limit_is_refused_in_json() {
    let loaded = loaded("serve_long_url").await;
    let address = serve(&loaded, &[]).await;
    let filter = |bytes: usize| format!("level = '{}'", "x".repeat(bytes));
    let path = |bytes: usize| {
        format!(
            "/api/rows?{}&where={}",
            range(loaded.start, loaded.start + 60),
            enc(&filter(bytes))
        )
    };
    // Under the limit: the API itself answers (no line has that level).
    let (status, body) = get(&address, &path(60_000), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 0);
    for (bytes, status, limit) in [(70_000, 414, "65534 bytes"), (500_000, 431, "417792 bytes")] {
        let (got, body) = get(&address, &path(bytes), None).await;
        assert_eq!(got, status, "{body}");
        assert_eq!(body["error"]["status"], status, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(limit), "{message}");
    }
}

#[tokio::test]
async fn a_token_is_asked_for_when_set() {
    let loaded = loaded("serve_token").await;
    let address = serve(&loaded, &[("serve.token", "s3cret")]).await;
    let (status, body) = get(&address, "/api/tables", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(!body.to_string().contains("s3cret"));
    let (status, _) = get(&address, "/api/tables", Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, body) = get(&address, "/api/tables", Some("s3cret")).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_statement_past_its_time_is_stopped_by_the_server() {
    let loaded = loaded("serve_timeout").await;
    let address = serve(&loaded, &[("serve.statement_timeout", "1ms")]).await;
    // Counting every line by a column no rollup has reads the table, and a write lock held on
    // it makes the count wait well past the millisecond, however fast the server scans: a
    // statement waiting for a table lock is stopped by max_statement_time as one that reads.
    let mut holder = loaded.db.conn().await;
    holder.query_drop("LOCK TABLES logs WRITE").await.unwrap();
    let (status, body) = get(
        &address,
        &format!(
            "/api/histogram?{}&by=service",
            range(loaded.start, loaded.start + LINES + 1)
        ),
        None,
    )
    .await;
    holder.query_drop("UNLOCK TABLES").await.unwrap();
    holder.disconnect().await.unwrap();
    assert_eq!(status, 504, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("serve.statement_timeout"), "{message}");
    // Stopped by the server (ER_STATEMENT_TIMEOUT), not by the API's own deadline a second on.
    assert!(message.contains("max_statement_time"), "{message}");
    // Counted from the table: the remedy is named.
    assert!(
        message.contains("rollup of logs with service as a dimension"),
        "{message}"
    );
}

/// Every ID of `loaded`'s lines (newest first) from `path`'s pages of rows, along the cursor.
async fn paged_ids(address: &str, path: &str) -> Vec<u64> {
    let mut got = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = get(address, &format!("{path}{cursor}"), None).await;
        assert_eq!(status, 200, "{page}");
        assert!(page.get("error").is_none(), "{page}");
        let rows = page["rows"].as_array().unwrap();
        got.extend(
            rows.iter()
                .map(|r| r["id"].as_str().unwrap().parse::<u64>().unwrap()),
        );
        match page["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return got,
        }
    }
}

#[tokio::test]
async fn rows_by_event_time_match_plain_sql() {
    let loaded = loaded("serve_event").await;
    let start = loaded.start;
    // Lines arrive late: each one's event time is up to an hour before its ID time, so event
    // order is not ID order and an event range takes IDs from far apart.
    let mut conn = loaded.db.conn().await;
    conn.query_drop(
        "UPDATE logs SET event_time = event_time - INTERVAL ((id & 0x3FFFFF) * 7919 % 3600) SECOND",
    )
    .await
    .unwrap();
    run_logstamp(
        loaded.config.path(),
        &loaded.db.url,
        &["zonemap", "rebuild"],
        &[("LOGSTAMP__STORE__EVENT_TIME", "event_time")],
    );
    let (from, to) = (start + 1_000, start + 2_500);
    let oracle = |filter: &str| {
        format!(
            "SELECT id FROM logs WHERE event_time >= DATE_ADD('1970-01-01', INTERVAL ? SECOND) \
             AND event_time < DATE_ADD('1970-01-01', INTERVAL ? SECOND){filter} ORDER BY id"
        )
    };
    let every: Vec<u64> = conn.exec(oracle(""), (from, to)).await.unwrap();
    let errors: Vec<u64> = conn
        .exec(oracle(" AND level = 'error'"), (from, to))
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    // Not the ID range's rows: some lines of the event range were stamped after it.
    assert_ne!(
        every,
        lines_between(&loaded.db, from, to)
            .await
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>()
    );
    assert!(every.len() > 1_000 && !errors.is_empty(), "{}", every.len());

    let address = serve(&loaded, &[("store.event_time", "event_time")]).await;
    let by_event = format!("/api/rows?{}&time=event&limit=300", range(from, to));
    let mut newest = every.clone();
    newest.reverse();
    assert_eq!(paged_ids(&address, &by_event).await, newest);
    let oldest_errors = format!("{by_event}&order=oldest&where={}", enc("level = 'error'"));
    assert_eq!(paged_ids(&address, &oldest_errors).await, errors);

    // A table without an event time, or a time that is neither: the caller's fault, named.
    let no_event_time = serve(&loaded, &[]).await;
    for (address, time) in [(&no_event_time, "event"), (&address, "arrival")] {
        let (status, body) = get(
            address,
            &format!("/api/rows?{}&time={time}", range(from, to)),
            None,
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["parameter"], "time", "{body}");
    }

    // Histograms by event time, and by ID time with no rollup: whole minutes summed from the
    // line counts (rebuilt for the moved lines), the partial minutes at either end counted
    // from the table; each bar is plain SQL's count.
    run_logstamp(
        loaded.config.path(),
        &loaded.db.url,
        &["counts", "rebuild"],
        &[("LOGSTAMP__STORE__EVENT_TIME", "event_time")],
    );
    let mut settings = loaded.db.settings_with_file(
        Some(loaded.config.path()),
        &[("store.event_time", "event_time")],
    );
    settings.rollup_plans.clear();
    let server = Server::new(
        settings.serve.clone(),
        settings.serve_catalog(),
        &settings.mysql.url,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { server.serve(listener).await });
    let mut conn = loaded.db.conn().await;
    conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
    let by_event: Vec<(u64, String, u64)> = conn
        .exec(
            "SELECT FLOOR(UNIX_TIMESTAMP(event_time) / 60) * 60, level, COUNT(*) FROM logs \
             WHERE event_time >= FROM_UNIXTIME(?) AND event_time < FROM_UNIXTIME(?) \
             GROUP BY 1, 2",
            (from, to),
        )
        .await
        .unwrap();
    let by_id: Vec<(u64, String, u64)> = conn
        .exec(
            "SELECT (id >> 32) DIV 60 * 60, level, COUNT(*) FROM logs \
             WHERE id >= ? AND id < ? GROUP BY 1, 2",
            (from << 32, to << 32),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    for (time, oracle) in [("event", by_event), ("id", by_id)] {
        let oracle: BTreeMap<(u64, String), u64> =
            oracle.into_iter().map(|(m, l, n)| ((m, l), n)).collect();
        let (status, h) = get(
            &bare,
            &format!("/api/histogram?{}&time={time}&interval=60", range(from, to)),
            None,
        )
        .await;
        assert_eq!(status, 200, "{h}");
        let sources: Vec<&str> = h["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(sources.len(), 3, "{sources:?}");
        assert!(sources[1].starts_with("line counts of logs"), "{sources:?}");
        let mut bars: BTreeMap<(u64, String), u64> = BTreeMap::new();
        for bar in h["bars"].as_array().unwrap() {
            for (level, n) in bar["counts"].as_object().unwrap() {
                let start = bar["start"].as_u64().unwrap();
                bars.insert((start, level.clone()), n.as_u64().unwrap());
            }
        }
        assert_eq!(bars, oracle, "by {time} time");
    }
    // Intervals under a minute by event time: the table, through the zone map.
    let (status, h) = get(
        &bare,
        &format!("/api/histogram?{}&time=event", range(from, to)),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    assert_eq!(h["total"], every.len(), "{h}");
    assert!(h["interval"].as_u64().unwrap() < 60, "{h}");
}
