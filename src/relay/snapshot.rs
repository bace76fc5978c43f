//! Online snapshots, after Netflix's DBLog (Andreakis and Papapanagiotou, 2020): a relayed
//! table's existing rows are copied into the data centre's topic while it keeps being written,
//! without locks, in primary-key chunks interleaved with the binlog.
//!
//! For each chunk the snapshot task, which runs inside capture, writes a low watermark (a new
//! `mark` in `relay_watermarks`), reads the chunk (one short `SELECT`, keyset pagination after
//! the last key copied), and writes a high watermark. Capture recognises both writes in its own
//! binlog stream. Between them it notes the key of every change of the table; at the high
//! watermark it drops those rows from the chunk (the binlog has a newer version of each, which
//! wins) and publishes the rest as inserts (applied as upserts) in the high watermark's
//! transaction, so they take their place in the stream like any other change, with that
//! transaction's GTID. The SELECT ran between the two watermarks, so a row not changed between
//! them had the value read at the high watermark's place in the binlog.
//!
//! Progress (the last key copied, rows and chunks) is recorded in `relay_snapshots` once
//! capture's checkpoint passed a chunk's high watermark, which Kafka acknowledged then. A killed
//! relay goes on after that key; chunks published after it are published again, which changes
//! nothing an upsert had not. A capture that starts again reads watermarks of an earlier run
//! again: no chunk waits for them, so they publish nothing.
//!
//! Why inside capture rather than in the `relay snapshot` command: the chunk must be handed to
//! the binlog reader before the high watermark is read, and its rows dropped by key there; a
//! separate process would have to pass whole chunks through the database. The command writes
//! a request row, which the running capture picks up, and follows its progress.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row as SqlRow, Value as Sql, from_value_opt};
use serde::Serialize;
use tokio::sync::oneshot;

use super::apply::{local_columns, local_key};
use super::change::{ChangeKind, Kind, Position, Row, RowChange, Value, row_to_json};
use super::context::{
    APPLIED_TABLES_TABLE, RelayContext, RelayError, SNAPSHOTS_TABLE, WATERMARKS_TABLE,
};
use super::contract::{Contract, binary_length, local_contract};
use super::events::Rows;
use super::settings::SnapshotMode;
use super::sql::{local_kind, push_ident};
use super::verify::key_after;
use crate::mysql::bound::Bound;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};

/// How often the snapshot task looks for a request when it has none.
const POLL: Duration = Duration::from_secs(1);
/// How often a finished table waits for capture's checkpoint to pass its last chunk.
const ACK_POLL: Duration = Duration::from_millis(100);
/// The state of a relayed table's row in `relay_snapshots` when no snapshot of it was asked
/// for: capture has taken its changes since. Not a snapshot, so `relay status` leaves it out.
const CAPTURED: &str = "captured";
/// Rows per chunk when a request does not say.
pub const DEFAULT_CHUNK_ROWS: u64 = 2000;

/// The chunk between a low and a high watermark, shared by the snapshot task and capture.
#[derive(Debug, Default)]
pub struct Watermarks {
    window: Mutex<Option<Window>>,
}

#[derive(Debug)]
struct Window {
    schema: String,
    table: String,
    low: u64,
    high: u64,
    /// Capture read the low watermark.
    open: bool,
    /// The keys (as [`key_text`]) the binlog changed since the low watermark.
    changed: HashSet<String>,
    chunk: Vec<RowChange>,
    done: Option<oneshot::Sender<Published>>,
}

/// A chunk as capture published it.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Where the high watermark's rows event is in the binlog: once capture's checkpoint is
    /// past it, Kafka acknowledged the chunk.
    pub at: Position,
    pub rows: u64,
    pub dropped: u64,
}

impl Watermarks {
    fn lock(&self) -> MutexGuard<'_, Option<Window>> {
        // A panic while holding it leaves nothing half-done that matters: the window is
        // replaced with the next chunk.
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the chunk of `schema.table` between watermarks `low` and `high`.
    fn begin(
        &self,
        schema: &str,
        table: &str,
        low: u64,
        high: u64,
    ) -> oneshot::Receiver<Published> {
        let (done, published) = oneshot::channel();
        *self.lock() = Some(Window {
            schema: schema.to_string(),
            table: table.to_string(),
            low,
            high,
            open: false,
            changed: HashSet::new(),
            chunk: Vec::new(),
            done: Some(done),
        });
        published
    }

    /// The chunk read between the watermarks, before the high one is written.
    fn fill(&self, chunk: Vec<RowChange>) {
        if let Some(window) = self.lock().as_mut() {
            window.chunk = chunk;
        }
    }

    /// Capture's view of each rows event, in binlog order, before the loop filter: notes the
    /// keys the binlog changes inside the window, and at the high watermark puts the chunk's
    /// rows that it did not change into `rows`, to be published in that transaction.
    pub fn observe(&self, rows: &mut Rows) {
        let mut guard = self.lock();
        let Some(window) = guard.as_mut() else {
            return;
        };
        match rows.watermark {
            Some(mark) if mark == window.low => window.open = true,
            Some(mark) if mark == window.high && window.open => {
                let Some(window) = guard.take() else { return };
                let total = window.chunk.len();
                let kept: Vec<RowChange> = window
                    .chunk
                    .into_iter()
                    .filter(|row| !window.changed.contains(&key_text(&row.key)))
                    .collect();
                let published = Published {
                    at: rows.at.clone(),
                    rows: kept.len() as u64,
                    dropped: (total - kept.len()) as u64,
                };
                rows.changes = kept;
                if let Some(done) = window.done {
                    // The task may have gone away (capture stopping); the rows go out anyway.
                    let _ = done.send(published);
                }
            }
            // A watermark of an earlier run, read again after a restart.
            Some(_) => {}
            None if window.open => {
                for change in &rows.changes {
                    if change.schema == window.schema && change.table == window.table {
                        window.changed.insert(key_text(&change.key));
                        if change.kind == ChangeKind::Update {
                            // An update may move the row to another key.
                            let mut after = change.key.clone();
                            for (name, value) in after.iter_mut() {
                                if let Some(new) = change.values.get(name) {
                                    value.clone_from(new);
                                }
                            }
                            window.changed.insert(key_text(&after));
                        }
                    }
                }
            }
            None => {}
        }
    }
}

/// A key as one comparable string: its columns' message values, by name.
fn key_text(key: &Row) -> String {
    serde_json::Value::Object(row_to_json(key).into_iter().collect()).to_string()
}

/// Capture's snapshot task, stopped when capture drops it.
pub struct SnapshotTask(tokio::task::JoinHandle<()>);

impl Drop for SnapshotTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts capture's snapshot task, which starts [`run`] again after each failure.
pub fn spawn(context: RelayContext, watermarks: Arc<Watermarks>) -> SnapshotTask {
    SnapshotTask(tokio::spawn(async move {
        let mut waits = RetryPolicy::FOREVER.waits();
        loop {
            let e = match run(context.clone(), watermarks.clone()).await {
                Ok(never) => match never {},
                Err(e) => e,
            };
            context
                .stats
                .snapshot
                .running
                .store(false, Ordering::Relaxed);
            let wait = waits.next().unwrap_or(RetryPolicy::FOREVER.longest_wait);
            tracing::warn!(retry_in = ?wait, "relay snapshot failed, starting again: {e}");
            tokio::time::sleep(wait).await;
        }
    }))
}

/// Runs capture's snapshot task: records the relayed tables (with `relay.snapshot = "initial"`
/// requesting a snapshot of each never captured here), then picks up this data centre's
/// requests and copies one table after the other. Returns only on a database error; capture
/// runs it alongside its binlog reader and stops it with it.
pub async fn run(
    context: RelayContext,
    watermarks: Arc<Watermarks>,
) -> Result<std::convert::Infallible, RelayError> {
    let bound = context.statement_bound();
    let mut conn = session(&context, &bound).await?;
    record_relayed(&context, &bound, &mut conn).await?;
    loop {
        let asked = next_request(&mut conn, context.dc());
        let found = bound
            .wait(|| "reading the snapshot requests".into(), asked)
            .await?;
        let Some(request) = found else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let shown = format!("{}.{}", request.schema, request.table);
        match copy(&context, &watermarks, &mut conn, &request).await {
            Ok(()) => {}
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                tracing::error!(table = shown, "snapshot failed: {e}");
                let why = e.to_string();
                let failed = fail(&mut conn, context.dc(), &request, &why);
                bound
                    .wait(
                        || format!("recording the failed snapshot of {shown}"),
                        failed,
                    )
                    .await?;
            }
        }
        context
            .stats
            .snapshot
            .running
            .store(false, Ordering::Relaxed);
    }
}

/// A connection in UTC (TIMESTAMP values travel in UTC) whose writes go to the binlog.
async fn session(context: &RelayContext, bound: &Bound) -> Result<Conn, RelayError> {
    let mut conn = mysql::connect(context.url()).await?;
    for statement in [
        "SET time_zone = '+00:00'",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    ] {
        let what = || format!("preparing the snapshot's session: {statement}");
        bound.call(what, conn.query_drop(statement)).await?;
    }
    Ok(conn)
}

/// A snapshot request or one in progress, as `relay_snapshots` holds it.
#[derive(Debug, Clone)]
struct Request {
    schema: String,
    table: String,
    chunk_rows: u64,
    last_key: Option<String>,
    copied_rows: u64,
    dropped_rows: u64,
    chunks: u64,
}

async fn next_request(conn: &mut Conn, dc: &str) -> Result<Option<Request>, RelayError> {
    let row: Option<SqlRow> = conn
        .exec_first(
            format!(
                "SELECT table_schema, table_name, chunk_rows, last_key, copied_rows, \
                 dropped_rows, chunks FROM `{SNAPSHOTS_TABLE}` WHERE dc = ? \
                 AND state IN ('requested', 'running') ORDER BY requested_at LIMIT 1"
            ),
            (dc,),
        )
        .await
        .map_err(DbError::mysql("reading the snapshot requests"))?;
    let Some(mut row) = row else { return Ok(None) };
    Ok(Some(Request {
        schema: take(&mut row, 0, "relay_snapshots.table_schema")?,
        table: take(&mut row, 1, "relay_snapshots.table_name")?,
        chunk_rows: take::<u64>(&mut row, 2, "relay_snapshots.chunk_rows")?.max(1),
        last_key: take(&mut row, 3, "relay_snapshots.last_key")?,
        copied_rows: take(&mut row, 4, "relay_snapshots.copied_rows")?,
        dropped_rows: take(&mut row, 5, "relay_snapshots.dropped_rows")?,
        chunks: take(&mut row, 6, "relay_snapshots.chunks")?,
    }))
}

/// Gives every relayed table with no row in `relay_snapshots` yet one: `requested` with
/// `relay.snapshot = "initial"`, else `captured`. Either way the table's changes are captured
/// from now on, so a later start with `initial` copies only tables never captured here: a table
/// captured before (perhaps written in several data centres) is not copied back over the others
/// with this data centre's possibly older version of their rows.
async fn record_relayed(
    context: &RelayContext,
    bound: &Bound,
    conn: &mut Conn,
) -> Result<(), RelayError> {
    let listing = conn.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
         WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN \
         ('mysql', 'information_schema', 'performance_schema', 'sys')",
    );
    let tables: Vec<(String, String)> = bound
        .call(|| "listing the relayed tables".into(), listing)
        .await?;
    let initial = context.relay.snapshot == SnapshotMode::Initial;
    let record = if initial {
        Record::Request
    } else {
        Record::Captured
    };
    for (schema, table) in tables {
        if context.is_relayed(&schema, &table) {
            let recording = record_table(
                conn,
                context.dc(),
                &schema,
                &table,
                DEFAULT_CHUNK_ROWS,
                record,
            );
            let new = bound
                .wait(|| format!("recording {schema}.{table}"), recording)
                .await?;
            if new && initial {
                tracing::info!(
                    table = format!("{schema}.{table}"),
                    "initial snapshot requested"
                );
            }
        }
    }
    Ok(())
}

/// What [`record_table`] records of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// A snapshot, unless the table has a row.
    Request,
    /// A snapshot, also starting over one done, failed or never asked for (not one running).
    RequestAgain,
    /// That capture takes the table's changes, unless it has a row.
    Captured,
}

/// Records `schema.table` in `relay_snapshots` as `record` says. Whether a row was written.
async fn record_table(
    conn: &mut Conn,
    dc: &str,
    schema: &str,
    table: &str,
    chunk_rows: u64,
    record: Record,
) -> Result<bool, RelayError> {
    let state = if record == Record::Captured {
        CAPTURED
    } else {
        "requested"
    };
    let on_duplicate = if record == Record::RequestAgain {
        "ON DUPLICATE KEY UPDATE state = IF(state = 'running', state, 'requested'), \
         chunk_rows = IF(state = 'running', chunk_rows, VALUES(chunk_rows)), \
         last_key = IF(state = 'running', last_key, NULL), \
         copied_rows = IF(state = 'running', copied_rows, 0), \
         dropped_rows = IF(state = 'running', dropped_rows, 0), \
         chunks = IF(state = 'running', chunks, 0), \
         started_at = IF(state = 'running', started_at, NULL), \
         finished_at = IF(state = 'running', finished_at, NULL), \
         last_error = IF(state = 'running', last_error, NULL), \
         requested_at = IF(state = 'running', requested_at, VALUES(requested_at))"
    } else {
        "ON DUPLICATE KEY UPDATE dc = dc"
    };
    let result = conn
        .exec_iter(
            format!(
                "INSERT INTO `{SNAPSHOTS_TABLE}` (dc, table_schema, table_name, state, chunk_rows, \
                 requested_at) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6)) {on_duplicate}"
            ),
            (dc, schema, table, state, chunk_rows),
        )
        .await
        .map_err(DbError::mysql(format!(
            "requesting a snapshot of {schema}.{table}"
        )))?;
    // 1: inserted; 2: updated; 0: left as it was.
    Ok(result.affected_rows() > 0)
}

async fn fail(conn: &mut Conn, dc: &str, request: &Request, why: &str) -> Result<(), RelayError> {
    conn.exec_drop(
        format!(
            "UPDATE `{SNAPSHOTS_TABLE}` SET state = 'failed', last_error = ? \
             WHERE dc = ? AND table_schema = ? AND table_name = ?"
        ),
        (why, dc, &request.schema, &request.table),
    )
    .await
    .map_err(DbError::mysql("recording a failed snapshot"))?;
    Ok(())
}

/// A table as the snapshot reads it.
struct Source {
    schema: String,
    table: String,
    /// Column names in table order, and how each is selected and read.
    columns: Vec<(String, Kind, bool)>,
    key: Vec<String>,
    kinds: std::collections::BTreeMap<String, Kind>,
    contract: Arc<Contract>,
    /// `SELECT` of a chunk after a key (`{after}` stands for the condition).
    select_after: String,
    select_first: String,
    after_params: Vec<usize>,
}

impl Source {
    async fn read(conn: &mut Conn, schema: &str, table: &str) -> Result<Source, RelayError> {
        let shown = format!("{schema}.{table}");
        let local = local_columns(conn, schema, table).await?;
        if local.is_empty() {
            return Err(RelayError::Refused(format!("{shown} does not exist")));
        }
        let key = local_key(conn, schema, table).await?;
        if key.is_empty() {
            return Err(RelayError::Refused(format!(
                "{shown} has no primary key: the snapshot reads it in key order (and the relay \
                 needs one)"
            )));
        }
        let contract = Arc::new(local_contract(&local, key.clone()));
        let mut columns = Vec::with_capacity(local.len());
        let mut exprs = Vec::with_capacity(local.len() + key.len());
        for column in &local {
            let kind = local_kind(column).ok_or_else(|| {
                RelayError::Refused(format!(
                    "column {} of {shown} has a type the relay does not carry ({})",
                    column.name, column.column_type
                ))
            })?;
            let padded = contract
                .types
                .get(&column.name)
                .and_then(|t| binary_length(t))
                .is_some();
            exprs.push(select_expr(&quoted(&column.name)?, kind));
            columns.push((column.name.clone(), kind, padded));
        }
        let quoted_key: Vec<String> = key.iter().map(|k| quoted(k)).collect::<Result<_, _>>()?;
        // The key as stored, to go on after: compared as the column, not as its message value.
        exprs.extend(quoted_key.iter().cloned());
        let key_refs: Vec<&str> = quoted_key.iter().map(String::as_str).collect();
        let (after, after_params) = key_after(&key_refs);
        let base = format!(
            "SELECT {} FROM {}.{}",
            exprs.join(", "),
            quoted(schema)?,
            quoted(table)?
        );
        let order = format!("ORDER BY {} LIMIT ?", quoted_key.join(", "));
        Ok(Source {
            schema: schema.to_string(),
            table: table.to_string(),
            kinds: columns.iter().map(|(n, k, _)| (n.clone(), *k)).collect(),
            columns,
            key,
            contract,
            select_after: format!("{base} WHERE {after} {order}"),
            select_first: format!("{base} {order}"),
            after_params,
        })
    }

    /// The next chunk after `after` (`None`: from the first row): its rows as insert changes,
    /// and the last row's key as stored.
    async fn chunk(
        &self,
        conn: &mut Conn,
        after: Option<&[Sql]>,
        rows: u64,
    ) -> Result<(Vec<RowChange>, Option<Vec<Sql>>), RelayError> {
        let shown = format!("{}.{}", self.schema, self.table);
        let read: Vec<SqlRow> = match after {
            None => conn.exec(&self.select_first, (rows,)).await,
            Some(after) => {
                let mut params: Vec<Sql> = self
                    .after_params
                    .iter()
                    .map(|&i| after[i].clone())
                    .collect();
                params.push(Sql::from(rows));
                conn.exec(&self.select_after, params).await
            }
        }
        .map_err(DbError::mysql(format!("reading a chunk of {shown}")))?;
        let mut changes = Vec::with_capacity(read.len());
        let mut last = None;
        for mut row in read {
            let mut values: Vec<Sql> = (0..row.len())
                .map(|i| row.take(i).unwrap_or(Sql::NULL))
                .collect();
            let stored_key = values.split_off(self.columns.len());
            let mut image = Row::new();
            for ((name, kind, padded), value) in self.columns.iter().zip(values) {
                let value = message_value(*kind, *padded, value)
                    .map_err(|e| RelayError::Refused(format!("{shown} column {name}: {e}")))?;
                image.insert(name.clone(), value);
            }
            let key: Row = self
                .key
                .iter()
                .map(|k| (k.clone(), image.get(k).cloned().flatten()))
                .collect();
            changes.push(RowChange {
                schema: self.schema.clone(),
                table: self.table.clone(),
                kind: ChangeKind::Insert,
                columns: self.kinds.clone(),
                key,
                values: image,
                before: None,
                contract: Some(self.contract.clone()),
            });
            last = Some(stored_key);
        }
        Ok((changes, last))
    }
}

fn quoted(name: &str) -> Result<String, RelayError> {
    let mut out = String::new();
    push_ident(&mut out, name).map_err(RelayError::Refused)?;
    Ok(out)
}

/// How a column is selected so that it reads as capture decodes it from the binlog.
fn select_expr(column: &str, kind: Kind) -> String {
    match kind {
        // Their numbers: ENUM's index, SET's bit mask, BIT's value, YEAR 0000 as 0.
        Kind::Year | Kind::Bit | Kind::Enum | Kind::Set => format!("{column} + 0"),
        // The server's text keeps every digit and the column's fraction (TIMESTAMP in the
        // session's UTC).
        Kind::Decimal | Kind::Date | Kind::Datetime | Kind::Timestamp | Kind::Time => {
            format!("CAST({column} AS CHAR)")
        }
        Kind::Binary => format!("CAST({column} AS BINARY)"),
        Kind::Int | Kind::Uint | Kind::Float | Kind::Double | Kind::Text => column.to_string(),
    }
}

/// A selected value as a message carries it (see [`super::change`]); `padded`: a BINARY(n)
/// column, whose trailing zero bytes the binlog leaves out.
fn message_value(kind: Kind, padded: bool, value: Sql) -> Result<Option<Value>, String> {
    if value == Sql::NULL {
        return Ok(None);
    }
    let wrong = |e: mysql_async::FromValueError| format!("unexpected value {:?}", e.0);
    let text = |value: Sql| -> Result<String, String> {
        String::from_utf8(from_value_opt::<Vec<u8>>(value).map_err(wrong)?)
            .map_err(|_| "a UTF-8 column holds bytes that are not UTF-8".to_string())
    };
    Ok(Some(match kind {
        Kind::Int => Value::Int(from_value_opt(value).map_err(wrong)?),
        Kind::Uint | Kind::Year | Kind::Bit | Kind::Enum | Kind::Set => {
            Value::Uint(from_value_opt(value).map_err(wrong)?)
        }
        Kind::Float => {
            let f: f32 = from_value_opt(value).map_err(wrong)?;
            // As the binlog decoder reads a FLOAT: the shortest decimal of the f32.
            Value::Float(f.to_string().parse::<f64>().map_err(|e| e.to_string())?)
        }
        Kind::Double => Value::Float(from_value_opt(value).map_err(wrong)?),
        Kind::Decimal | Kind::Date | Kind::Datetime | Kind::Timestamp | Kind::Time | Kind::Text => {
            Value::Text(text(value)?)
        }
        Kind::Binary => {
            let mut bytes: Vec<u8> = from_value_opt(value).map_err(wrong)?;
            if padded {
                let len = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
                bytes.truncate(len);
            }
            Value::Bytes(bytes)
        }
    }))
}

/// Copies one table, chunk by chunk, from where its request left off.
async fn copy(
    context: &RelayContext,
    watermarks: &Watermarks,
    conn: &mut Conn,
    request: &Request,
) -> Result<(), RelayError> {
    let dc = context.dc();
    let shown = format!("{}.{}", request.schema, request.table);
    if !context.is_relayed(&request.schema, &request.table) {
        return Err(RelayError::Refused(format!(
            "{shown} is not in relay.tables here"
        )));
    }
    // Each statement within the bound: a hung server fails the copy, which starts again from
    // the progress recorded.
    let bound = context.statement_bound();
    let checking = only_written_here(conn, &request.schema, &request.table);
    bound
        .wait(|| format!("reading who changed {shown} here"), checking)
        .await?;
    let reading = Source::read(conn, &request.schema, &request.table);
    let source = bound
        .wait(|| format!("reading the columns of {shown}"), reading)
        .await?;
    let estimating = conn.exec_first(
        "SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        (&request.schema, &request.table),
    );
    let estimate: u64 = bound
        .call(|| format!("estimating the rows of {shown}"), estimating)
        .await?
        .unwrap_or(0);
    let starting = conn.exec_drop(
        format!(
            "UPDATE `{SNAPSHOTS_TABLE}` SET state = 'running', estimated_rows = ?, \
             started_at = COALESCE(started_at, UTC_TIMESTAMP(6)) \
             WHERE dc = ? AND table_schema = ? AND table_name = ?"
        ),
        (estimate, dc, &request.schema, &request.table),
    );
    bound
        .call(|| format!("recording the start of {shown}"), starting)
        .await?;
    let mut after = request
        .last_key
        .as_deref()
        .map(key_from_json)
        .transpose()
        .map_err(|e| RelayError::Refused(format!("the recorded last key of {shown}: {e}")))?;
    let stats = &context.stats.snapshot;
    stats.running.store(true, Ordering::Relaxed);
    let mut done = Progress {
        last_key: request.last_key.clone(),
        copied_rows: request.copied_rows,
        dropped_rows: request.dropped_rows,
        chunks: request.chunks,
    };
    stats
        .remaining_rows
        .store(estimate.saturating_sub(done.copied_rows), Ordering::Relaxed);
    tracing::info!(table = shown, from = ?done.last_key, estimate, "snapshot started");
    // Chunks published, waiting for capture's checkpoint to pass them.
    let mut unacknowledged: VecDeque<(Position, Progress)> = VecDeque::new();
    let mut published = done.clone();
    loop {
        let (low, high) = (rand::random::<u64>(), rand::random::<u64>());
        let chunk_published = watermarks.begin(&request.schema, &request.table, low, high);
        bound
            .wait(
                || "writing a low watermark".into(),
                write_mark(conn, dc, low),
            )
            .await?;
        let reading = source.chunk(conn, after.as_deref(), request.chunk_rows);
        let (chunk, last) = bound
            .wait(|| format!("reading a chunk of {shown}"), reading)
            .await?;
        let read = chunk.len() as u64;
        watermarks.fill(chunk);
        bound
            .wait(
                || "writing a high watermark".into(),
                write_mark(conn, dc, high),
            )
            .await?;
        let chunk_done = chunk_published.await.map_err(|_| {
            RelayError::Interrupted("capture stopped before it read the high watermark".into())
        })?;
        stats.chunks.fetch_add(1, Ordering::Relaxed);
        stats
            .copied_rows
            .fetch_add(chunk_done.rows, Ordering::Relaxed);
        stats
            .dropped_rows
            .fetch_add(chunk_done.dropped, Ordering::Relaxed);
        published.copied_rows += chunk_done.rows;
        published.dropped_rows += chunk_done.dropped;
        published.chunks += 1;
        if let Some(last) = &last {
            published.last_key = Some(key_to_json(last));
        }
        stats.remaining_rows.store(
            estimate.saturating_sub(published.copied_rows + published.dropped_rows),
            Ordering::Relaxed,
        );
        unacknowledged.push_back((chunk_done.at, published.clone()));
        let saving = save_acknowledged(context, conn, request, &mut unacknowledged, &mut done);
        bound
            .wait(|| format!("recording the progress of {shown}"), saving)
            .await?;
        if read < request.chunk_rows {
            break;
        }
        after = last;
    }
    while !unacknowledged.is_empty() {
        tokio::time::sleep(ACK_POLL).await;
        let saving = save_acknowledged(context, conn, request, &mut unacknowledged, &mut done);
        bound
            .wait(|| format!("recording the progress of {shown}"), saving)
            .await?;
    }
    let finishing = conn.exec_drop(
        format!(
            "UPDATE `{SNAPSHOTS_TABLE}` SET state = 'done', finished_at = UTC_TIMESTAMP(6) \
             WHERE dc = ? AND table_schema = ? AND table_name = ?"
        ),
        (dc, &request.schema, &request.table),
    );
    bound
        .call(|| format!("recording the end of {shown}"), finishing)
        .await?;
    stats.remaining_rows.store(0, Ordering::Relaxed);
    tracing::info!(
        table = shown,
        rows = done.copied_rows,
        dropped = done.dropped_rows,
        chunks = done.chunks,
        "snapshot done"
    );
    Ok(())
}

/// What `relay_snapshots` records of a table's copy.
#[derive(Debug, Clone)]
struct Progress {
    last_key: Option<String>,
    copied_rows: u64,
    dropped_rows: u64,
    chunks: u64,
}

/// Records the progress of the last chunk capture's checkpoint has passed, if any.
async fn save_acknowledged(
    context: &RelayContext,
    conn: &mut Conn,
    request: &Request,
    unacknowledged: &mut VecDeque<(Position, Progress)>,
    done: &mut Progress,
) -> Result<(), RelayError> {
    let capture = &context.stats.capture;
    let checkpoint = (
        capture.checkpoint_file.load(Ordering::Relaxed),
        capture.checkpoint_pos.load(Ordering::Relaxed),
    );
    let mut newest = None;
    while let Some((at, _)) = unacknowledged.front() {
        if at.order().is_some_and(|at| at < checkpoint) {
            newest = unacknowledged.pop_front().map(|(_, p)| p);
        } else {
            break;
        }
    }
    let Some(progress) = newest else {
        return Ok(());
    };
    conn.exec_drop(
        format!(
            "UPDATE `{SNAPSHOTS_TABLE}` SET last_key = ?, copied_rows = ?, dropped_rows = ?, \
             chunks = ? WHERE dc = ? AND table_schema = ? AND table_name = ?"
        ),
        (
            &progress.last_key,
            progress.copied_rows,
            progress.dropped_rows,
            progress.chunks,
            context.dc(),
            &request.schema,
            &request.table,
        ),
    )
    .await
    .map_err(DbError::mysql("recording a snapshot's progress"))?;
    *done = progress;
    Ok(())
}

/// Writes a watermark: one row per data centre, its `mark` replaced.
async fn write_mark(conn: &mut Conn, dc: &str, mark: u64) -> Result<(), RelayError> {
    conn.exec_drop(
        format!(
            "INSERT INTO `{WATERMARKS_TABLE}` (dc, mark) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE mark = VALUES(mark)"
        ),
        (dc, mark),
    )
    .await
    .map_err(DbError::mysql("writing a snapshot watermark"))?;
    Ok(())
}

/// A stored key's values as JSON, each tagged with how the server sent it.
fn key_to_json(values: &[Sql]) -> String {
    use serde_json::json;
    let parts: Vec<serde_json::Value> = values
        .iter()
        .map(|v| match v {
            Sql::NULL => serde_json::Value::Null,
            Sql::Bytes(b) => json!({ "bytes": BASE64.encode(b) }),
            Sql::Int(n) => json!({ "int": n }),
            Sql::UInt(n) => json!({ "uint": n }),
            // By their bits: JSON's decimal text need not read back as the same binary value.
            Sql::Float(f) => json!({ "float_bits": f.to_bits() }),
            Sql::Double(f) => json!({ "double_bits": f.to_bits() }),
            Sql::Date(y, mo, d, h, mi, s, us) => json!({ "date": [y, mo, d, h, mi, s, us] }),
            Sql::Time(neg, d, h, mi, s, us) => json!({ "time": [neg, d, h, mi, s, us] }),
        })
        .collect();
    serde_json::Value::Array(parts).to_string()
}

fn key_from_json(text: &str) -> Result<Vec<Sql>, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Tagged {
        Bytes(String),
        Int(i64),
        Uint(u64),
        FloatBits(u32),
        DoubleBits(u64),
        Date((u16, u8, u8, u8, u8, u8, u32)),
        Time((bool, u32, u8, u8, u8, u32)),
    }
    let parts: Vec<Option<Tagged>> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    parts
        .into_iter()
        .map(|part| {
            Ok(match part {
                None => Sql::NULL,
                Some(Tagged::Bytes(b)) => Sql::Bytes(BASE64.decode(b).map_err(|e| e.to_string())?),
                Some(Tagged::Int(n)) => Sql::Int(n),
                Some(Tagged::Uint(n)) => Sql::UInt(n),
                Some(Tagged::FloatBits(f)) => Sql::Float(f32::from_bits(f)),
                Some(Tagged::DoubleBits(f)) => Sql::Double(f64::from_bits(f)),
                Some(Tagged::Date((y, mo, d, h, mi, s, us))) => Sql::Date(y, mo, d, h, mi, s, us),
                Some(Tagged::Time((neg, d, h, mi, s, us))) => Sql::Time(neg, d, h, mi, s, us),
            })
        })
        .collect()
}

/// A snapshot as `relay status` and `relay snapshot` show it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SnapshotStatus {
    pub table: String,
    pub state: String,
    pub chunk_rows: u64,
    pub copied_rows: u64,
    pub dropped_rows: u64,
    pub chunks: u64,
    pub estimated_rows: u64,
    /// The last key copied, as recorded (JSON).
    pub last_key: Option<String>,
    pub requested_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub last_error: Option<String>,
}

/// This data centre's snapshots, or the one of `table` (`schema.table`).
pub async fn status(
    context: &RelayContext,
    table: Option<(&str, &str)>,
) -> Result<Vec<SnapshotStatus>, RelayError> {
    let mut conn = mysql::connect(context.url()).await?;
    let (filter, params): (&str, Vec<Sql>) = match table {
        Some((schema, name)) => (
            " AND table_schema = ? AND table_name = ?",
            vec![context.dc().into(), schema.into(), name.into()],
        ),
        None => ("", vec![context.dc().into()]),
    };
    let reading = conn.exec(
        format!(
            "SELECT table_schema, table_name, state, chunk_rows, copied_rows, dropped_rows, \
             chunks, estimated_rows, last_key, CAST(requested_at AS CHAR), \
             CAST(started_at AS CHAR), CAST(finished_at AS CHAR), last_error \
             FROM `{SNAPSHOTS_TABLE}` WHERE dc = ? AND state <> '{CAPTURED}'{filter} \
             ORDER BY table_schema, table_name"
        ),
        params,
    );
    let rows: Vec<SqlRow> = context
        .statement_bound()
        .call(|| "reading the snapshots".into(), reading)
        .await?;
    let _ = conn.disconnect().await;
    rows.into_iter()
        .map(|mut row| {
            let schema: String = take(&mut row, 0, "table_schema")?;
            let name: String = take(&mut row, 1, "table_name")?;
            Ok(SnapshotStatus {
                table: format!("{schema}.{name}"),
                state: take(&mut row, 2, "state")?,
                chunk_rows: take(&mut row, 3, "chunk_rows")?,
                copied_rows: take(&mut row, 4, "copied_rows")?,
                dropped_rows: take(&mut row, 5, "dropped_rows")?,
                chunks: take(&mut row, 6, "chunks")?,
                estimated_rows: take(&mut row, 7, "estimated_rows")?,
                last_key: take(&mut row, 8, "last_key")?,
                requested_at: take(&mut row, 9, "requested_at")?,
                started_at: take(&mut row, 10, "started_at")?,
                finished_at: take(&mut row, 11, "finished_at")?,
                last_error: take(&mut row, 12, "last_error")?,
            })
        })
        .collect::<Result<_, DbError>>()
        .map_err(RelayError::from)
}

/// Refuses a snapshot of a table other data centres changed here. A snapshot publishes this
/// data centre's version of every row, which the others apply over theirs; a row another data
/// centre wrote whose latest change has not reached here yet would be set back there to the
/// older version. It cannot be made exact: rows do not say which data centre wrote them last,
/// and a change on its way is known only to the data centre it left.
async fn only_written_here(conn: &mut Conn, schema: &str, table: &str) -> Result<(), RelayError> {
    let sources: Vec<String> = conn
        .exec(
            format!(
                "SELECT source_dc FROM `{APPLIED_TABLES_TABLE}` WHERE table_schema = ? \
                 AND table_name = ? ORDER BY source_dc"
            ),
            (schema, table),
        )
        .await
        .map_err(DbError::mysql(
            "reading which data centres changed the table here",
        ))?;
    if sources.is_empty() {
        return Ok(());
    }
    Err(RelayError::Refused(format!(
        "{schema}.{table} is also written in {}: their changes were applied here, and a snapshot \
         from here would set the rows they wrote back to this data centre's versions wherever \
         their latest changes are still on the way; a table several data centres write is \
         copied by hand with writes stopped (README: \"Starting a stream anew\")",
        sources.join(", ")
    )))
}

/// `relay snapshot`: requests a snapshot of `schema.table` from this data centre's capture
/// (started over if it was done or failed; left alone while it runs).
pub async fn request(
    context: &RelayContext,
    schema: &str,
    table: &str,
    chunk_rows: u64,
) -> Result<(), RelayError> {
    if !context.is_relayed(schema, table) {
        return Err(RelayError::Refused(format!(
            "{schema}.{table} is not in relay.tables: add it (in every data centre) first"
        )));
    }
    let bound = context.statement_bound();
    let mut conn = mysql::connect(context.url()).await?;
    bound
        .wait(
            || format!("reading the columns of {schema}.{table}"),
            Source::read(&mut conn, schema, table),
        )
        .await?;
    bound
        .wait(
            || format!("reading who changed {schema}.{table} here"),
            only_written_here(&mut conn, schema, table),
        )
        .await?;
    let recording = record_table(
        &mut conn,
        context.dc(),
        schema,
        table,
        chunk_rows,
        Record::RequestAgain,
    );
    bound
        .wait(
            || format!("requesting a snapshot of {schema}.{table}"),
            recording,
        )
        .await?;
    let _ = conn.disconnect().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::gtid::{Gtid, GtidState};

    fn change(kind: ChangeKind, id: u64, values: &[(&str, u64)]) -> RowChange {
        let row = |pairs: &[(&str, u64)]| -> Row {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), Some(Value::Uint(*v))))
                .collect()
        };
        RowChange {
            schema: "app".into(),
            table: "t".into(),
            kind,
            columns: [
                ("id".to_string(), Kind::Uint),
                ("v".to_string(), Kind::Uint),
            ]
            .into_iter()
            .collect(),
            key: row(&[("id", id)]),
            values: row(values),
            before: (kind != ChangeKind::Insert).then(|| row(&[("id", id), ("v", 0)])),
            contract: None,
        }
    }

    fn rows(changes: Vec<RowChange>, watermark: Option<u64>, pos: u64) -> Rows {
        let gtid: Gtid = "0-1-5".parse().unwrap();
        Rows {
            at: Position {
                file: "bin.000001".into(),
                pos,
                gtid: Some(gtid.to_string()),
            },
            gtid,
            gtid_before: GtidState::default(),
            timestamp: 0,
            changes,
            has_marker: false,
            skip_flagged: false,
            loop_keys: Vec::new(),
            watermark,
        }
    }

    fn ids(changes: &[RowChange]) -> Vec<u64> {
        changes
            .iter()
            .map(|c| match c.key.get("id") {
                Some(Some(Value::Uint(id))) => *id,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn rows_the_binlog_changed_between_the_watermarks_are_dropped_from_the_chunk() {
        let marks = Watermarks::default();
        let mut published = marks.begin("app", "t", 10, 11);
        // Before the low watermark: not noted.
        marks.observe(&mut rows(
            vec![change(ChangeKind::Delete, 1, &[])],
            None,
            90,
        ));
        marks.observe(&mut rows(Vec::new(), Some(10), 100));
        marks.fill(
            (1..=6)
                .map(|id| change(ChangeKind::Insert, id, &[("id", id), ("v", 1)]))
                .collect(),
        );
        let mut other = change(ChangeKind::Delete, 3, &[]);
        other.table = "u".into();
        marks.observe(&mut rows(
            vec![
                change(ChangeKind::Update, 2, &[("v", 7)]),
                // The key moves from 4 to 9: both are the binlog's.
                change(ChangeKind::Update, 4, &[("id", 9)]),
                change(ChangeKind::Delete, 5, &[]),
                other,
            ],
            None,
            200,
        ));
        // A watermark of an earlier run changes nothing.
        marks.observe(&mut rows(Vec::new(), Some(99), 250));
        let mut high = rows(Vec::new(), Some(11), 300);
        marks.observe(&mut high);
        assert_eq!(ids(&high.changes), [1, 3, 6]);
        let done = published.try_recv().unwrap();
        assert_eq!((done.rows, done.dropped, done.at.pos), (3, 3, 300));
        // The window is closed: later changes and marks pass untouched.
        let mut later = rows(vec![change(ChangeKind::Delete, 1, &[])], None, 400);
        marks.observe(&mut later);
        assert_eq!(ids(&later.changes), [1]);
    }

    #[test]
    fn a_high_watermark_without_its_low_one_publishes_nothing() {
        let marks = Watermarks::default();
        let mut published = marks.begin("app", "t", 10, 11);
        marks.fill(vec![change(ChangeKind::Insert, 1, &[("id", 1), ("v", 1)])]);
        let mut high = rows(Vec::new(), Some(11), 300);
        marks.observe(&mut high);
        assert!(high.changes.is_empty());
        assert!(published.try_recv().is_err());
    }

    #[test]
    fn stored_keys_read_back_as_they_were() {
        let key = vec![
            Sql::NULL,
            Sql::Bytes(vec![0, 255, b'a']),
            Sql::Int(-5),
            Sql::UInt(u64::MAX),
            Sql::Float(0.5),
            Sql::Double(-1.25e300),
            Sql::Date(2024, 2, 29, 23, 59, 58, 999_999),
            Sql::Time(true, 34, 22, 59, 58, 1),
        ];
        assert_eq!(key_from_json(&key_to_json(&key)).unwrap(), key);
        assert!(key_from_json("[{\"what\": 1}]").is_err());
    }

    #[test]
    fn selected_values_read_as_the_binlog_decoder_reads_them() {
        let bytes = |s: &str| Sql::Bytes(s.as_bytes().to_vec());
        assert_eq!(
            message_value(Kind::Float, false, Sql::Float(0.1)).unwrap(),
            Some(Value::Float(0.1))
        );
        assert_eq!(
            message_value(Kind::Binary, true, Sql::Bytes(vec![1, 0, 0])).unwrap(),
            Some(Value::Bytes(vec![1]))
        );
        assert_eq!(
            message_value(Kind::Binary, false, Sql::Bytes(vec![1, 0])).unwrap(),
            Some(Value::Bytes(vec![1, 0]))
        );
        assert_eq!(
            message_value(Kind::Enum, false, Sql::Int(2)).unwrap(),
            Some(Value::Uint(2))
        );
        assert_eq!(
            message_value(Kind::Decimal, false, bytes("-1.50")).unwrap(),
            Some(Value::Text("-1.50".into()))
        );
        assert_eq!(message_value(Kind::Int, false, Sql::NULL).unwrap(), None);
        assert!(message_value(Kind::Text, false, Sql::Bytes(vec![0xff])).is_err());
        assert!(message_value(Kind::Uint, false, Sql::Int(-1)).is_err());
    }
}
