//! The JSON API under `/api/`: rows, histogram, tables, ID decode and health. IDs travel as
//! decimal strings: JavaScript's numbers hold integers exactly only up to 2^53.

use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{SecondsFormat, Utc};
use futures_util::stream;
use mysql_async::prelude::Queryable;
use serde::Serialize;
use serde::ser::SerializeMap;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::request::{ApiError, Params, assemble, interval, parts, rollup_answers, unix_range};
use super::{Server, bounded, counted, db_error};
use crate::store::filter_language::{Condition, parse_filter};
use crate::store::line_counts::Time;
use crate::store::log_table::TableSpec;
use crate::store::query::{self, EventQuery, Order, Record, TimeQuery};
use crate::store::schema::{ColumnSpec, ColumnType};
use crate::store::{partitions, rollup};
use crate::time::format_utc;

pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/api/rows", get(rows))
        .route("/api/histogram", get(histogram))
        .route("/api/range", get(range))
        .route("/api/tables", get(tables))
        .route("/api/id/{id}", get(decode_id))
        .route("/api/health", get(health))
        .fallback(|| async { ApiError::NotFound("no such path".into()) })
        .layer(middleware::from_fn_with_state(server.clone(), authorize))
        .with_state(server)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json(
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &self.body(),
        )
    }
}

fn json(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// With `serve.token` set, every API request must carry it as a bearer token. Tokens are
/// compared by their digests, so the time a comparison takes says nothing of the token.
async fn authorize(State(server): State<Arc<Server>>, request: Request, next: Next) -> Response {
    if let Some(expected) = server.settings.token.given() {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if Sha256::digest(given.trim()) != Sha256::digest(expected) {
            return ApiError::Unauthorized.into_response();
        }
    }
    next.run(request).await
}

/// The table named by `table`, or the log table.
fn table<'a>(server: &'a Server, params: &Params) -> Result<&'a TableSpec, ApiError> {
    let tables = &server.catalog.tables;
    match params.get("table") {
        None => tables
            .first()
            .ok_or_else(|| ApiError::Internal("no tables configured".into())),
        Some(name) => tables
            .iter()
            .find(|t| t.table.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = tables.iter().map(|t| t.table.as_str()).collect();
                ApiError::bad(
                    "table",
                    format!(
                        "{name} is not a table of the settings ({})",
                        names.join(", ")
                    ),
                )
            }),
    }
}

/// The `where` filter, its error naming where reading stopped.
fn filter(spec: &TableSpec, params: &Params) -> Result<Vec<Condition>, ApiError> {
    match params.get("where") {
        None => Ok(Vec::new()),
        Some(text) => parse_filter(text, &spec.columns).map_err(|e| ApiError::BadParameter {
            parameter: "where".into(),
            message: e.reason,
            at: Some(e.at),
        }),
    }
}

/// The query of a request's table, range and filter.
fn time_query(
    server: &Server,
    spec: &TableSpec,
    params: &Params,
) -> Result<(TimeQuery, (u64, u64)), ApiError> {
    let (from, to) = params.time_range(server.settings.max_range, Utc::now())?;
    let mut query = TimeQuery::between(&server.catalog.layout, from, to)
        .map_err(|e| ApiError::bad("from", e))?;
    query.filter = filter(spec, params)?;
    Ok((query, unix_range(from, to)))
}

/// A row with its ID as a decimal string.
struct ApiRecord<'a>(&'a Record);

impl Serialize for ApiRecord<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.columns.len() + 1))?;
        map.serialize_entry("id", &self.0.id.to_string())?;
        for (name, value) in &self.0.columns {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// What the query task hands the response as it reads.
enum Piece {
    Row(u64, Vec<u8>),
    Done,
    Failed(ApiError),
}

/// What a rows request reads: a range of ID time, or of event time through the zone map.
enum RowsQuery {
    Id(TimeQuery),
    Event(EventQuery),
}

/// `GET /api/rows?from&to[&tz][&time=id|event][&table][&where][&limit][&order=newest|oldest]
/// [&cursor]`: `{"rows": [...], "count": n, "next": cursor or null}`, streamed as MySQL reads.
/// `next` continues the same query past the last row. An error after the first row ends the
/// document with `"error"` (the status was sent already); one before it is the response.
async fn rows(State(server): State<Arc<Server>>, RawQuery(q): RawQuery) -> Response {
    match read_rows(server, q).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn read_rows(server: Arc<Server>, q: Option<String>) -> Result<Response, ApiError> {
    let params = Params::parse(
        q.as_deref(),
        &[
            "from", "to", "tz", "time", "table", "where", "limit", "order", "cursor",
        ],
    )?;
    let spec = table(&server, &params)?.clone();
    let max = server.settings.max_rows;
    let limit = params.count("limit", max.min(100), max)?;
    let order = match params.get("order") {
        None | Some("newest") => Order::NewestFirst,
        Some("oldest") => Order::OldestFirst,
        Some(other) => {
            return Err(ApiError::bad(
                "order",
                format!("{other:?}: use newest or oldest"),
            ));
        }
    };
    let cursor = match params.get("cursor") {
        None => None,
        Some(cursor) => Some(
            cursor
                .parse::<u64>()
                .map_err(|_| ApiError::bad("cursor", "not a cursor this API gave"))?,
        ),
    };
    let query = match params.get("time") {
        None | Some("id") => {
            let (mut query, _) = time_query(&server, &spec, &params)?;
            query.limit = Some(limit);
            match (order, cursor) {
                (_, None) => {}
                (Order::NewestFirst, Some(id)) => query.range.end = query.range.end.min(id),
                (Order::OldestFirst, Some(id)) => {
                    query.range.start = query.range.start.max(id.saturating_add(1));
                }
            }
            RowsQuery::Id(query)
        }
        Some("event") => {
            query::event_column(&spec).map_err(|e| ApiError::bad("time", e))?;
            let (from, to) = params.time_range(server.settings.max_range, Utc::now())?;
            let mut query = EventQuery::between(from, to);
            query.filter = filter(&spec, &params)?;
            query.limit = Some(limit);
            query.order = order;
            query.past = cursor;
            RowsQuery::Event(query)
        }
        Some(other) => {
            return Err(ApiError::bad(
                "time",
                format!("{other:?}: use id (the stamp's time) or event"),
            ));
        }
    };
    let mut conn = server.conn().await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    // The statement's own limit stops it in the server; this one also covers the network.
    let deadline = server.settings.statement_timeout + Duration::from_secs(1);
    tokio::spawn(async move {
        let each = |record: Record| {
            let sent = serde_json::to_vec(&ApiRecord(&record))
                .map_err(|e| ApiError::Internal(e.to_string()))
                .map_or_else(Piece::Failed, |bytes| Piece::Row(record.id, bytes));
            match tx.send(sent) {
                Ok(()) => ControlFlow::Continue(()),
                // The client went away.
                Err(_) => ControlFlow::Break(()),
            }
        };
        let read = async {
            match &query {
                RowsQuery::Id(query) => {
                    query::run_in_order(&mut conn, &spec, query, order, each).await
                }
                RowsQuery::Event(query) => query::run_by_event(&mut conn, &spec, query, each)
                    .await
                    .map(|(_, count)| count),
            }
        };
        let end = match tokio::time::timeout(deadline, read).await {
            Ok(Ok(_)) => Piece::Done,
            Ok(Err(e)) => Piece::Failed(db_error(e)),
            Err(_) => Piece::Failed(ApiError::Timeout(
                "the rows did not arrive within serve.statement_timeout".into(),
            )),
        };
        let _ = tx.send(end);
    });
    let first = match rx.recv().await {
        Some(Piece::Failed(e)) => return Err(e),
        first => first,
    };
    let head = stream::once(async { Ok::<Bytes, Infallible>(Bytes::from_static(b"{\"rows\":[")) });
    let body = stream::unfold(
        Some((rx, first, 0u64, None::<u64>)),
        move |state| async move {
            let (mut rx, pending, count, last) = state?;
            let piece = match pending {
                Some(piece) => Some(piece),
                None => rx.recv().await,
            };
            let (chunk, next) = match piece {
                Some(Piece::Row(id, bytes)) => {
                    let mut chunk = Vec::with_capacity(bytes.len() + 1);
                    if count > 0 {
                        chunk.push(b',');
                    }
                    chunk.extend(bytes);
                    (chunk, Some((rx, None, count + 1, Some(id))))
                }
                Some(Piece::Done) => {
                    let next = last.filter(|_| count == limit);
                    (tail(count, next, None), None)
                }
                Some(Piece::Failed(e)) => (tail(count, None, Some(e)), None),
                None => (
                    tail(
                        count,
                        None,
                        Some(ApiError::Internal("the query stopped".into())),
                    ),
                    None,
                ),
            };
            Some((Ok::<Bytes, Infallible>(Bytes::from(chunk)), next))
        },
    );
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(futures_util::StreamExt::chain(head, body)),
    )
        .into_response())
}

/// The end of the rows document.
fn tail(count: u64, next: Option<u64>, error: Option<ApiError>) -> Vec<u8> {
    let mut end = serde_json::json!({
        "count": count,
        "next": next.map(|id| id.to_string()),
    });
    if let Some(e) = error {
        end["error"] = e.body()["error"].clone();
    }
    // `{"count":..}` becomes `],"count":..}`, closing the rows array.
    let mut text = b"],".to_vec();
    text.extend(end.to_string().bytes().skip(1));
    text
}

/// `GET /api/histogram?from&to[&tz][&time=id|event][&table][&where][&by][&interval]`: counts
/// per interval of ID time (default) or event time and per value of `by` (default `level`).
/// Whole buckets of a rollup of the table that has `by` as a dimension are read from it; else,
/// by level (unfiltered or for one level) and by event time, whole minutes are summed from
/// the line counts (see `counted`); only the partial ones at either end are counted from the
/// table.
async fn histogram(State(server): State<Arc<Server>>, RawQuery(q): RawQuery) -> Response {
    match count_histogram(&server, q).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn count_histogram(server: &Server, q: Option<String>) -> Result<Response, ApiError> {
    let params = Params::parse(
        q.as_deref(),
        &[
            "from", "to", "tz", "time", "table", "where", "by", "interval",
        ],
    )?;
    let spec = table(server, &params)?;
    let time = counted::time_of(&params, spec)?;
    let (query, range) = time_query(server, spec, &params)?;
    let by_name = params.get("by").unwrap_or("level");
    let countable = |c: &&ColumnSpec| {
        matches!(
            c.column_type,
            ColumnType::String | ColumnType::Int | ColumnType::Uint | ColumnType::Bool
        )
    };
    let by = spec
        .columns
        .iter()
        .filter(countable)
        .find(|c| c.name.eq_ignore_ascii_case(by_name))
        .ok_or_else(|| {
            let names: Vec<&str> = spec
                .columns
                .iter()
                .filter(countable)
                .map(|c| c.name.as_str())
                .collect();
            ApiError::bad(
                "by",
                format!("{by_name}: count by one of {}", names.join(", ")),
            )
        })?;
    let by = by.ident().map_err(|e| ApiError::bad("by", e))?;
    let interval = interval(&params, range)?;
    let rollups = &server.catalog.rollups;
    let candidates: Vec<(usize, u64)> = rollups
        .iter()
        .enumerate()
        .filter(|(_, p)| p.source == spec.table && rollup_answers(p, &by, &query.filter))
        .map(|(i, p)| (i, p.bucket.seconds()))
        .collect();
    let mut conn = server.conn().await?;
    // A rollup the settings keep answers by ID time first (its buckets may be coarser); then
    // the line counts every table keeps; then the table.
    let by_rollup = time == Time::Id
        && parts(range.0, range.1, interval, &candidates)
            .iter()
            .any(|p| p.rollup.is_some());
    if !by_rollup {
        let context = (spec, &server.catalog.layout);
        let filtered = (&by, query.filter.as_slice());
        let counting = counted::histogram(&mut conn, context, time, filtered, interval, range);
        if let Some((counts, sources)) = bounded(&server.settings, counting).await? {
            let histogram = assemble(range, interval, by.as_str(), counts, sources);
            return Ok(json(StatusCode::OK, &histogram));
        }
    }
    let mut counts = Vec::new();
    let mut sources = Vec::new();
    for part in parts(range.0, range.1, interval, &candidates) {
        let counted = match part.rollup.and_then(|i| rollups.get(i)) {
            Some(plan) => {
                sources.push(format!(
                    "rollup {} {} to {}",
                    plan.name.as_str(),
                    format_utc(part.from),
                    format_utc(part.to)
                ));
                let counting = rollup::histogram(
                    &mut conn,
                    plan,
                    &by,
                    &query.filter,
                    interval,
                    (part.from, part.to),
                );
                bounded(&server.settings, async { counting.await.map_err(db_error) }).await
            }
            None => {
                sources.push(format!(
                    "table {} {} to {}",
                    spec.table.as_str(),
                    format_utc(part.from),
                    format_utc(part.to)
                ));
                let seconds = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
                let mut part_query = query.clone();
                part_query.range = server
                    .catalog
                    .layout
                    .id_range(seconds(part.from), seconds(part.to))
                    .map_err(|e| ApiError::bad("from", e))?;
                let counting = query::histogram(&mut conn, spec, &part_query, &by, interval);
                bounded(&server.settings, async { counting.await.map_err(db_error) })
                    .await
                    .map_err(|e| match e {
                        ApiError::Timeout(message) => ApiError::Timeout(format!(
                            "{message}; or keep a rollup of {} with {} as a dimension (see \
                             [[rollups]]), which counts a day in milliseconds",
                            spec.table.as_str(),
                            by.as_str()
                        )),
                        other => other,
                    })
            }
        };
        counts.extend(counted?);
    }
    Ok(json(
        StatusCode::OK,
        &assemble(range, interval, by.as_str(), counts, sources),
    ))
}

/// `GET /api/range?from&to[&tz]`: the instants `from` and `to` denote now, checked as the
/// other endpoints check them. The page resolves its URL's times (`now-1h`, `-2h`,
/// `yesterday`) here, so one grammar reads them all, and its histogram and rows then ask for
/// the same instants.
async fn range(State(server): State<Arc<Server>>, RawQuery(q): RawQuery) -> Response {
    let resolved = Params::parse(q.as_deref(), &["from", "to", "tz"])
        .and_then(|params| params.time_range(server.settings.max_range, Utc::now()));
    match resolved {
        Ok((from, to)) => {
            let text = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
            json(
                StatusCode::OK,
                &serde_json::json!({"from": text(from), "to": text(to)}),
            )
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /api/tables`: the tables, their columns and rollups, the ID layout, the limits, and
/// what live mode needs.
async fn tables(State(server): State<Arc<Server>>) -> Response {
    let catalog = &server.catalog;
    let tables: Vec<serde_json::Value> = catalog
        .tables
        .iter()
        .map(|t| {
            let rollups: Vec<serde_json::Value> = catalog
                .rollups
                .iter()
                .filter(|p| p.source == t.table)
                .map(|p| {
                    serde_json::json!({
                        "name": p.name.as_str(),
                        "bucket_seconds": p.bucket.seconds(),
                        "dimensions": p.dimensions.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            serde_json::json!({
                "name": t.table.as_str(),
                "columns": t.columns.iter().map(|c| serde_json::json!({
                    "name": c.name,
                    "type": c.column_type,
                })).collect::<Vec<_>>(),
                "payload": t.payload,
                "event_time": t.event_time.as_ref().map(|c| c.as_str()),
                "rollups": rollups,
            })
        })
        .collect();
    let settings = &server.settings;
    json(
        StatusCode::OK,
        &serde_json::json!({
            "tables": tables,
            "id": {
                "service_bits": catalog.layout.service_bits(),
                "epoch_unix_seconds": catalog.layout.epoch_unix_seconds(),
            },
            "limits": {
                "max_rows": settings.max_rows,
                "max_range_seconds": settings.max_range.as_secs(),
                "statement_timeout_ms": u64::try_from(settings.statement_timeout.as_millis()).unwrap_or(u64::MAX),
            },
            "live": {
                "window_seconds": settings.live_window.as_secs_f64(),
                "ahead_seconds": catalog.ids_ahead.as_secs_f64(),
            },
        }),
    )
}

/// `GET /api/id/{id}`: the ID's time, service ID and counter.
async fn decode_id(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    let Ok(id) = id.trim().parse::<u64>() else {
        return ApiError::bad("id", format!("{id:?} is not an ID (an integer below 2^64)"))
            .into_response();
    };
    let decoded = server.catalog.layout.decode(id);
    json(
        StatusCode::OK,
        &serde_json::json!({
            "id": id.to_string(),
            "time": format_utc(decoded.unix_seconds),
            "unix_seconds": decoded.unix_seconds,
            "service_id": decoded.service_id,
            "counter": decoded.counter,
        }),
    )
}

/// `GET /api/health`: 200 when MySQL answers and every table exists with a partition ready
/// for now; 503 with the reasons otherwise. Each table's newest row says how fresh it is.
async fn health(State(server): State<Arc<Server>>) -> Response {
    let mut conn = match server.conn().await {
        Ok(conn) => conn,
        Err(e) => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({"ok": false, "problems": [e.to_string()]}),
            );
        }
    };
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0);
    let mut problems = Vec::new();
    let mut tables = Vec::new();
    for spec in &server.catalog.tables {
        let name = spec.table.as_str();
        let listing = async {
            partitions::list(&mut conn, spec)
                .await
                .map_err(|e| ApiError::Unavailable(e.to_string()))
        };
        let listed = match bounded(&server.settings, listing).await {
            Ok(listed) => listed,
            // The session of a server that gave no answer is not asked again.
            Err(e @ ApiError::Timeout(_)) => {
                problems.push(format!("table {name}: {e}"));
                break;
            }
            Err(e) => {
                problems.push(format!("table {name}: {e}"));
                continue;
            }
        };
        let ready_until = listed
            .iter()
            .filter_map(|p| p.less_than)
            .max()
            .map(|bound| server.catalog.layout.decode(bound).unix_seconds);
        if ready_until.is_none_or(|until| until <= now) {
            problems.push(format!(
                "table {name} has no partition for the current time: run logstamp partitions ensure"
            ));
        }
        let reading = async {
            conn.query_first::<Option<u64>, _>(format!("SELECT MAX(`id`) FROM {}", spec.table))
                .await
                .map_err(|e| ApiError::Unavailable(e.to_string()))
        };
        let newest = bounded(&server.settings, reading).await;
        let timed_out = matches!(newest, Err(ApiError::Timeout(_)));
        let newest = match newest {
            Ok(newest) => newest.flatten(),
            Err(e) => {
                problems.push(format!("table {name}: {e}"));
                None
            }
        };
        tables.push(serde_json::json!({
            "table": name,
            "partitions": listed.len(),
            "ready_until": ready_until.map(format_utc),
            "newest_id": newest.map(|id| id.to_string()),
            "newest_time": newest.map(|id| format_utc(server.catalog.layout.decode(id).unix_seconds)),
        }));
        if timed_out {
            break;
        }
    }
    let status = if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(
        status,
        &serde_json::json!({"ok": problems.is_empty(), "tables": tables, "problems": problems}),
    )
}
