//! `relay verify`: compares this data centre's copy of the relayed tables with a remote data
//! centre's, chunk by chunk in primary-key order, after pt-table-checksum and Vitess VDiff.
//!
//! Each server hashes its own rows: a chunk is `COUNT(*)` and the `BIT_XOR` of a 64-bit hash
//! per row (the first 16 hex digits of the MD5 of the row's text), read in a REPEATABLE READ
//! consistent snapshot, without locks. A row's text is every column as the hex of its bytes
//! (`CAST(col AS BINARY)`: exact for strings and binary, the server's own text for numbers,
//! decimals and times), NULL as `N` (which hex never is), joined by `#`: NULL and '' differ and
//! no value can shift into its neighbour. Rows are unique by key and the key is in the text, so
//! no two rows of a chunk cancel out in the XOR.
//!
//! Chunk bounds come from this data centre's rows (the key of every `chunk_rows`-th row); the
//! remote is queried with the same bounds, and the last chunk is open-ended, so a row on either
//! side beyond the other's is counted. A chunk whose hashes differ is narrowed to rows by
//! fetching both sides' per-row hashes and images. Rows can differ only because a change is
//! still on its way through the relay: then verify waits until both directions drained past
//! where the servers were after the read (capture checkpointed past the server's GTID position,
//! and the other side's applier reached the topic's end offset then), reads the chunk again and
//! keeps only the rows that still differ, up to [`RECHECKS`] times. Rows that converge make the
//! chunk `in_flight`; rows that differ every time are reported as diverged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row, TxOpts, Value};
use serde::Serialize;

use super::checkpoint;
use super::context::{APPLIED_TABLE, RelayContext, RelayError};
use super::settings::{RemoteDc, TablePattern};
use super::sql::push_ident;
use super::status::end_offset;
use crate::mysql::bound::Bound;
use crate::mysql::rows::take;
use crate::mysql::{self, DbError, MysqlUrl};

/// How many times a differing chunk is read again after the relay's lag drained, before the
/// rows that differed every time are reported as diverged.
pub const RECHECKS: u32 = 3;
/// How often a lag drain is looked at.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// What to compare and how patiently.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Rows per chunk, at least 1.
    pub chunk_rows: u64,
    /// How long each wait for the relay's lag to drain may take.
    pub lag_wait: Duration,
    /// Only the relayed tables this matches; `None` for all.
    pub only: Option<TablePattern>,
}

/// A relayed table as verify reads it, its names quoted for SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedTable {
    pub schema: String,
    pub name: String,
    pub columns: Vec<String>,
    /// Indexes into `columns` of the primary key's columns, in key order.
    pub key: Vec<usize>,
    quoted_table: String,
    quoted_columns: Vec<String>,
}

impl KeyedTable {
    pub fn new(
        schema: &str,
        name: &str,
        columns: Vec<String>,
        key_columns: &[String],
    ) -> Result<KeyedTable, RelayError> {
        let shown = format!("{schema}.{name}");
        let key = key_columns
            .iter()
            .map(|k| columns.iter().position(|c| c == k))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| RelayError::Refused(format!("{shown}: a key column is missing")))?;
        if key.is_empty() {
            return Err(RelayError::Refused(format!(
                "{shown} has no primary key: verify walks tables by it (and the relay needs one)"
            )));
        }
        let quoted_columns = columns
            .iter()
            .map(|c| quoted(c))
            .collect::<Result<_, _>>()?;
        Ok(KeyedTable {
            quoted_table: format!("{}.{}", quoted(schema)?, quoted(name)?),
            schema: schema.to_string(),
            name: name.to_string(),
            columns,
            key,
            quoted_columns,
        })
    }

    pub fn shown(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    fn quoted_key(&self) -> Vec<&str> {
        self.key
            .iter()
            .map(|&i| self.quoted_columns[i].as_str())
            .collect()
    }

    /// `COUNT(*)` and the XOR of the row hashes of the rows within `bounds`.
    pub fn checksum_sql(&self, bounds: &Bounds) -> (String, Vec<Value>) {
        let (filter, params) = bounds.filter(&self.quoted_key());
        let sql = format!(
            "SELECT COUNT(*), COALESCE(BIT_XOR({}), 0) FROM {} WHERE {filter}",
            row_hash(&self.quoted_columns),
            self.quoted_table
        );
        (sql, params)
    }

    /// Each row within `bounds`, in key order: its hash, then every column's bytes.
    pub fn rows_sql(&self, bounds: &Bounds) -> (String, Vec<Value>) {
        let (filter, params) = bounds.filter(&self.quoted_key());
        let images: Vec<String> = self
            .quoted_columns
            .iter()
            .map(|c| format!("CAST({c} AS BINARY)"))
            .collect();
        let sql = format!(
            "SELECT {}, {} FROM {} WHERE {filter} ORDER BY {}",
            row_hash(&self.quoted_columns),
            images.join(", "),
            self.quoted_table,
            self.quoted_key().join(", ")
        );
        (sql, params)
    }

    /// The key of the `rows`-th row after `after`: the inclusive end of the next chunk.
    pub fn chunk_end_sql(&self, after: Option<&[Value]>, rows: u64) -> (String, Vec<Value>) {
        let bounds = Bounds {
            after: after.map(<[Value]>::to_vec),
            up_to: None,
        };
        let key = self.quoted_key().join(", ");
        let (filter, params) = bounds.filter(&self.quoted_key());
        let sql = format!(
            "SELECT {key} FROM {} WHERE {filter} ORDER BY {key} LIMIT 1 OFFSET {}",
            self.quoted_table,
            rows.saturating_sub(1)
        );
        (sql, params)
    }
}

fn quoted(name: &str) -> Result<String, RelayError> {
    let mut out = String::new();
    push_ident(&mut out, name).map_err(RelayError::Refused)?;
    Ok(out)
}

/// The text a row is hashed as (see the module's comment); `columns` are quoted.
pub fn row_text(columns: &[String]) -> String {
    let parts: Vec<String> = columns
        .iter()
        .map(|c| format!("COALESCE(HEX(CAST({c} AS BINARY)), 'N')"))
        .collect();
    format!("CONCAT_WS('#', {})", parts.join(", "))
}

/// A row's 64-bit hash, as an unsigned integer the server can XOR.
pub fn row_hash(columns: &[String]) -> String {
    format!(
        "CAST(CONV(LEFT(MD5({}), 16), 16, 10) AS UNSIGNED)",
        row_text(columns)
    )
}

/// A chunk: the keys after `after` (excluded; `None`: from the first) up to `up_to` (included;
/// `None`: to the last), with the key values as the server sent them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    pub after: Option<Vec<Value>>,
    pub up_to: Option<Vec<Value>>,
}

impl Bounds {
    /// A condition on the quoted `key` columns selecting the chunk, and its parameters.
    pub fn filter(&self, key: &[&str]) -> (String, Vec<Value>) {
        let mut parts = Vec::new();
        let mut params = Vec::new();
        if let Some(after) = &self.after {
            let (sql, order) = key_after(key);
            parts.push(format!("({sql})"));
            params.extend(order.iter().map(|&i| after[i].clone()));
        }
        if let Some(up_to) = &self.up_to {
            // Key columns are NOT NULL, so "not after" is "at or before".
            let (sql, order) = key_after(key);
            parts.push(format!("NOT ({sql})"));
            params.extend(order.iter().map(|&i| up_to[i].clone()));
        }
        if parts.is_empty() {
            ("TRUE".to_string(), params)
        } else {
            (parts.join(" AND "), params)
        }
    }
}

/// "The key is after a bound" on the quoted `key` columns, spelled out column by column
/// (`(a > ?) OR (a = ? AND b > ?)`) so that the server can use the primary key's index; and for
/// each `?`, the index of the bound's value it takes.
pub fn key_after(key: &[&str]) -> (String, Vec<usize>) {
    let mut disjuncts = Vec::new();
    let mut order = Vec::new();
    for i in 0..key.len() {
        let mut terms: Vec<String> = key[..i].iter().map(|k| format!("{k} = ?")).collect();
        terms.push(format!("{} > ?", key[i]));
        order.extend(0..=i);
        disjuncts.push(format!("({})", terms.join(" AND ")));
    }
    (disjuncts.join(" OR "), order)
}

/// A row as read for narrowing: its hash and every column's bytes (`None`: NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowImage {
    pub hash: u64,
    pub values: Vec<Option<Vec<u8>>>,
}

/// A row's key as bytes, which is how rows of the two sides are matched.
pub type KeyBytes = Vec<Option<Vec<u8>>>;

/// A row that differs: its image on each side (`None`: missing there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPair {
    pub local: Option<RowImage>,
    pub remote: Option<RowImage>,
}

/// The rows that differ between two reads of a chunk, by key; `key` indexes the key columns.
pub fn differing(
    local: Vec<RowImage>,
    remote: Vec<RowImage>,
    key: &[usize],
) -> BTreeMap<KeyBytes, RowPair> {
    let key_of =
        |row: &RowImage| -> KeyBytes { key.iter().map(|&i| row.values[i].clone()).collect() };
    let mut pairs: BTreeMap<KeyBytes, RowPair> = BTreeMap::new();
    for row in local {
        pairs.insert(
            key_of(&row),
            RowPair {
                local: Some(row),
                remote: None,
            },
        );
    }
    for row in remote {
        let key = key_of(&row);
        pairs
            .entry(key)
            .or_insert(RowPair {
                local: None,
                remote: None,
            })
            .remote = Some(row);
    }
    pairs.retain(|_, pair| match (&pair.local, &pair.remote) {
        (Some(l), Some(r)) => l.hash != r.hash,
        _ => true,
    });
    pairs
}

/// A value as shown: text when it is UTF-8, otherwise its bytes in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Shown {
    Text(String),
    Hex { hex: String },
}

impl Shown {
    fn of(bytes: &[u8]) -> Shown {
        match std::str::from_utf8(bytes) {
            Ok(text) => Shown::Text(text.to_string()),
            Err(_) => Shown::Hex {
                hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
    }
}

pub type ShownRow = BTreeMap<String, Option<Shown>>;

/// A row that differs between the data centres after the lag drained.
#[derive(Debug, Clone, Serialize)]
pub struct Diverged {
    pub status: &'static str,
    pub dc: String,
    pub remote_dc: String,
    pub table: String,
    pub key: ShownRow,
    /// The data centre that lacks the row, if one does.
    pub missing_in: Option<String>,
    pub local: Option<ShownRow>,
    pub remote: Option<ShownRow>,
}

/// A chunk that differed while changes were on their way and converged once they arrived.
#[derive(Debug, Clone, Serialize)]
pub struct InFlight {
    pub status: &'static str,
    pub dc: String,
    pub remote_dc: String,
    pub table: String,
    /// The chunk's number in the table, from 0.
    pub chunk: u64,
    /// Rows that differed at first.
    pub rows: usize,
}

/// The outcome of verifying against one remote data centre.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub status: &'static str,
    pub dc: String,
    pub remote_dc: String,
    pub tables: u64,
    pub chunks: u64,
    /// Rows of this data centre compared.
    pub rows: u64,
    pub in_flight_chunks: u64,
    pub in_flight_rows: u64,
    pub diverged_rows: u64,
}

/// What verify reports while it works.
#[derive(Debug)]
pub enum Event<'a> {
    Diverged(&'a Diverged),
    InFlight(&'a InFlight),
    /// A chunk of `table` done: `chunks` and `rows` so far in it.
    Checked {
        table: &'a str,
        chunks: u64,
        rows: u64,
    },
    TableDone {
        table: &'a str,
        chunks: u64,
        rows: u64,
    },
}

/// One data centre as verify reaches it: its database, and the Kafka holding its topic.
struct Side {
    dc: String,
    url: MysqlUrl,
    brokers: String,
    /// Each statement on its database, within `relay.apply_timeout`.
    bound: Bound,
}

/// Compares the relayed tables here with `remote`'s, calling `on` with each finding and
/// progress.
pub async fn verify(
    context: &RelayContext,
    remote: &RemoteDc,
    options: &VerifyOptions,
    mut on: impl FnMut(Event<'_>),
) -> Result<Summary, RelayError> {
    let remote_url = remote.url_for(context.shard).cloned().ok_or_else(|| {
        RelayError::Refused(match context.shard {
            None => format!(
                "relay.remotes {}: no url, so its database cannot be compared",
                remote.dc
            ),
            Some(shard) => format!(
                "relay.remotes {}: its shards list no shard {shard}, so that shard cannot be \
                 compared",
                remote.dc
            ),
        })
    })?;
    let local_brokers = context.kafka.brokers.clone();
    let sides = [
        Side {
            dc: context.dc().to_string(),
            url: context.url().clone(),
            brokers: local_brokers.clone(),
            bound: context.statement_bound(),
        },
        Side {
            dc: remote.dc.clone(),
            brokers: remote.brokers_or(&local_brokers).to_string(),
            bound: Bound::new(&remote_url, context.relay.apply_timeout),
            url: remote_url,
        },
    ];
    let mut local = mysql::connect(&sides[0].url).await?;
    let mut there = mysql::connect(&sides[1].url).await?;
    let only = options.only.as_ref();
    let listing = || "listing the relayed tables".to_string();
    let tables = sides[0]
        .bound
        .wait(listing, relayed_tables(&mut local, context, only))
        .await?;
    let remote_tables = sides[1]
        .bound
        .wait(listing, relayed_tables(&mut there, context, only))
        .await?;
    let mut summary = Summary {
        status: "summary",
        dc: sides[0].dc.clone(),
        remote_dc: sides[1].dc.clone(),
        ..Summary::default()
    };
    let lag_stuck = AtomicBool::new(false);
    for table in &tables {
        let same = remote_tables.iter().any(|r| {
            r.shown() == table.shown() && r.columns == table.columns && r.key == table.key
        });
        if !same {
            return Err(RelayError::SchemaMismatch(format!(
                "{} has other columns or another primary key in {} (or is missing there)",
                table.shown(),
                remote.dc
            )));
        }
        let walk = Walk {
            context,
            sides: &sides,
            options,
            lag_stuck: &lag_stuck,
            table,
        };
        walk.run(&mut local, &mut there, &mut summary, &mut on)
            .await?;
        summary.tables += 1;
    }
    let _ = local.disconnect().await;
    let _ = there.disconnect().await;
    Ok(summary)
}

/// The relayed tables of the server behind `conn` (those `only` matches, if given), with their
/// columns and primary keys.
async fn relayed_tables(
    conn: &mut Conn,
    context: &RelayContext,
    only: Option<&TablePattern>,
) -> Result<Vec<KeyedTable>, RelayError> {
    let rows: Vec<Row> = conn
        .query(
            "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, \
             COALESCE(s.SEQ_IN_INDEX, 0) \
             FROM information_schema.COLUMNS c \
             JOIN information_schema.TABLES t \
               ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
             LEFT JOIN information_schema.STATISTICS s \
               ON s.TABLE_SCHEMA = c.TABLE_SCHEMA AND s.TABLE_NAME = c.TABLE_NAME \
               AND s.COLUMN_NAME = c.COLUMN_NAME AND s.INDEX_NAME = 'PRIMARY' \
             WHERE t.TABLE_TYPE = 'BASE TABLE' AND c.TABLE_SCHEMA NOT IN \
               ('mysql', 'information_schema', 'performance_schema', 'sys') \
             ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
        )
        .await
        .map_err(DbError::mysql("listing the relayed tables' columns"))?;
    let mut found: BTreeMap<(String, String), CatalogColumns> = BTreeMap::new();
    for mut row in rows {
        let schema: String = take(&mut row, 0, "TABLE_SCHEMA")?;
        let table: String = take(&mut row, 1, "TABLE_NAME")?;
        let column: String = take(&mut row, 2, "COLUMN_NAME")?;
        let seq: u32 = take(&mut row, 3, "SEQ_IN_INDEX")?;
        let wanted =
            context.is_relayed(&schema, &table) && only.is_none_or(|p| p.matches(&schema, &table));
        if !wanted {
            continue;
        }
        let table = found.entry((schema, table)).or_default();
        if seq > 0 {
            table.key.insert(seq, column.clone());
        }
        table.columns.push(column);
    }
    if found.is_empty() && only.is_some() {
        return Err(RelayError::Refused(
            "no relayed table matches --table".to_string(),
        ));
    }
    found
        .into_iter()
        .map(|((schema, table), found)| {
            let key: Vec<String> = found.key.into_values().collect();
            KeyedTable::new(&schema, &table, found.columns, &key)
        })
        .collect()
}

/// A table's columns as the catalog lists them, and its primary key's by position in the key.
#[derive(Default)]
struct CatalogColumns {
    columns: Vec<String>,
    key: BTreeMap<u32, String>,
}

/// One table's walk, chunk by chunk.
struct Walk<'a> {
    context: &'a RelayContext,
    sides: &'a [Side; 2],
    options: &'a VerifyOptions,
    /// Set once a wait for the lag to drain ran out, for the rest of the run.
    lag_stuck: &'a AtomicBool,
    table: &'a KeyedTable,
}

impl Walk<'_> {
    async fn run(
        &self,
        local: &mut Conn,
        there: &mut Conn,
        summary: &mut Summary,
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), RelayError> {
        let shown = self.table.shown();
        let (mut chunks, mut rows) = (0, 0);
        let mut after: Option<Vec<Value>> = None;
        loop {
            let up_to = self.chunk_end(local, after.as_deref()).await?;
            let bounds = Bounds {
                after: after.clone(),
                up_to: up_to.clone(),
            };
            let what = || format!("checksumming a chunk of {shown}");
            let [at_local, at_remote] = self.bounds();
            let (here, remote) = tokio::try_join!(
                at_local.wait(what, checksum(local, self.table, &bounds)),
                at_remote.wait(what, checksum(there, self.table, &bounds))
            )?;
            if here != remote {
                self.narrow(local, there, &bounds, chunks, summary, on)
                    .await?;
            }
            chunks += 1;
            rows += here.0;
            on(Event::Checked {
                table: &shown,
                chunks,
                rows,
            });
            match up_to {
                Some(end) => after = Some(end),
                None => break,
            }
        }
        summary.chunks += chunks;
        summary.rows += rows;
        on(Event::TableDone {
            table: &shown,
            chunks,
            rows,
        });
        Ok(())
    }

    /// The inclusive end of the chunk after `after`, from this data centre's rows; `None` when
    /// fewer than a chunk's rows are left (the chunk is then open-ended).
    async fn chunk_end(
        &self,
        local: &mut Conn,
        after: Option<&[Value]>,
    ) -> Result<Option<Vec<Value>>, RelayError> {
        let (sql, params) = self.table.chunk_end_sql(after, self.options.chunk_rows);
        let what = || format!("reading {}'s chunk bounds", self.table.shown());
        let row: Option<Row> = self.sides[0]
            .bound
            .call(what, local.exec_first(sql, params))
            .await?;
        Ok(row.map(Row::unwrap))
    }

    /// Each side's bound on a statement: here, then the remote.
    fn bounds(&self) -> [&Bound; 2] {
        [&self.sides[0].bound, &self.sides[1].bound]
    }

    /// Narrows a differing chunk to rows, tells changes in flight from divergence and reports.
    async fn narrow(
        &self,
        local: &mut Conn,
        there: &mut Conn,
        bounds: &Bounds,
        chunk: u64,
        summary: &mut Summary,
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), RelayError> {
        let mut suspects = self.differing_rows(local, there, bounds).await?;
        let first = suspects.len();
        for _ in 0..RECHECKS {
            if suspects.is_empty() {
                break;
            }
            self.drain_lag().await?;
            let now = self.differing_rows(local, there, bounds).await?;
            suspects = now
                .into_iter()
                .filter(|(key, _)| suspects.contains_key(key))
                .collect();
        }
        if suspects.is_empty() {
            summary.in_flight_chunks += 1;
            summary.in_flight_rows += first as u64;
            on(Event::InFlight(&InFlight {
                status: "in_flight",
                dc: self.sides[0].dc.clone(),
                remote_dc: self.sides[1].dc.clone(),
                table: self.table.shown(),
                chunk,
                rows: first,
            }));
        }
        for (key, pair) in suspects {
            summary.diverged_rows += 1;
            on(Event::Diverged(&self.diverged(&key, pair)));
        }
        Ok(())
    }

    async fn differing_rows(
        &self,
        local: &mut Conn,
        there: &mut Conn,
        bounds: &Bounds,
    ) -> Result<BTreeMap<KeyBytes, RowPair>, RelayError> {
        let what = || format!("reading a chunk of {}", self.table.shown());
        let [at_local, at_remote] = self.bounds();
        let (here, remote) = tokio::try_join!(
            at_local.wait(what, row_images(local, self.table, bounds)),
            at_remote.wait(what, row_images(there, self.table, bounds))
        )?;
        Ok(differing(here, remote, &self.table.key))
    }

    /// Waits until each side applied what the other had written when this was called; not
    /// any more once a wait ran out (a relay that is stopped or far behind would make every
    /// differing chunk wait as long).
    async fn drain_lag(&self) -> Result<(), RelayError> {
        if self.lag_stuck.load(Ordering::Relaxed) {
            return Ok(());
        }
        let [here, remote] = self.sides;
        let (to_remote, to_here) = tokio::try_join!(
            drain(self.context, here, remote, self.options.lag_wait),
            drain(self.context, remote, here, self.options.lag_wait)
        )?;
        if !(to_remote && to_here) {
            self.lag_stuck.store(true, Ordering::Relaxed);
            tracing::warn!(
                table = %self.table.shown(),
                "the relay's lag did not drain within {:?}: comparing again without waiting \
                 from now on (rows still in flight may be reported as diverged)",
                self.options.lag_wait
            );
        }
        Ok(())
    }

    fn diverged(&self, key: &KeyBytes, pair: RowPair) -> Diverged {
        let names = |indexes: &[usize]| -> Vec<String> {
            indexes
                .iter()
                .map(|&i| self.table.columns[i].clone())
                .collect()
        };
        let key_names = names(&self.table.key);
        let shown =
            |image: Option<RowImage>| image.map(|row| shown_row(&self.table.columns, &row.values));
        let missing_in = match (&pair.local, &pair.remote) {
            (None, _) => Some(self.sides[0].dc.clone()),
            (_, None) => Some(self.sides[1].dc.clone()),
            _ => None,
        };
        Diverged {
            status: "diverged",
            dc: self.sides[0].dc.clone(),
            remote_dc: self.sides[1].dc.clone(),
            table: self.table.shown(),
            key: shown_row(&key_names, key),
            missing_in,
            local: shown(pair.local),
            remote: shown(pair.remote),
        }
    }
}

fn shown_row(columns: &[String], values: &[Option<Vec<u8>>]) -> ShownRow {
    columns
        .iter()
        .zip(values)
        .map(|(c, v)| (c.clone(), v.as_deref().map(Shown::of)))
        .collect()
}

/// The rows `sql` reads on the server behind `conn`, in a read-only REPEATABLE READ transaction
/// on a consistent snapshot: no locks taken. `what` names the read in errors.
async fn read_in_snapshot(
    conn: &mut Conn,
    (sql, params): (String, Vec<Value>),
    what: &str,
) -> Result<Vec<Row>, DbError> {
    let mut opts = TxOpts::default();
    opts.with_consistent_snapshot(true)
        .with_isolation_level(IsolationLevel::RepeatableRead)
        .with_readonly(true);
    let mut tx = conn
        .start_transaction(opts)
        .await
        .map_err(DbError::mysql(what))?;
    let rows: Vec<Row> = tx.exec(sql, params).await.map_err(DbError::mysql(what))?;
    tx.commit().await.map_err(DbError::mysql(what))?;
    Ok(rows)
}

/// A chunk's row count and hash on the server behind `conn`.
async fn checksum(
    conn: &mut Conn,
    table: &KeyedTable,
    bounds: &Bounds,
) -> Result<(u64, u64), RelayError> {
    let what = format!("checksumming a chunk of {}", table.shown());
    let rows = read_in_snapshot(conn, table.checksum_sql(bounds), &what).await?;
    let mut row = rows
        .into_iter()
        .next()
        .ok_or_else(|| DbError::Refused(format!("{what}: no answer")))?;
    Ok((
        take(&mut row, 0, "COUNT(*)")?,
        take(&mut row, 1, "BIT_XOR")?,
    ))
}

/// A chunk's rows on the server behind `conn`, in key order.
async fn row_images(
    conn: &mut Conn,
    table: &KeyedTable,
    bounds: &Bounds,
) -> Result<Vec<RowImage>, RelayError> {
    let what = format!("reading a chunk of {}", table.shown());
    let rows = read_in_snapshot(conn, table.rows_sql(bounds), &what).await?;
    rows.into_iter()
        .map(|mut row| {
            let hash = take(&mut row, 0, "row hash")?;
            let values = (1..=table.columns.len())
                .map(|i| take(&mut row, i, "a column's bytes"))
                .collect::<Result<_, DbError>>()?;
            Ok(RowImage { hash, values })
        })
        .collect()
}

/// Waits up to `wait` until `to` applied everything `from` had written when this was called:
/// `from`'s capture checkpointed past its server's GTID position then, and `to`'s applier of
/// `from` reached the end its topic had once that was so. Whether it did in time.
async fn drain(
    context: &RelayContext,
    from: &Side,
    to: &Side,
    wait: Duration,
) -> Result<bool, RelayError> {
    let deadline = Instant::now() + wait;
    let mut source = mysql::connect(&from.url).await?;
    let (_, _, written) = from
        .bound
        .wait(
            || "reading the binlog position".into(),
            checkpoint::server_position(&mut source),
        )
        .await?;
    let captured = loop {
        let reading = checkpoint::load(&mut source, &from.dc);
        let done = from
            .bound
            .wait(|| format!("reading the checkpoint of {}", from.dc), reading)
            .await?
            .is_some_and(|c| c.gtid_state.includes(&written));
        if done || Instant::now() > deadline {
            break done;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    };
    let _ = source.disconnect().await;
    if !captured {
        return Ok(false);
    }
    let Some(end) = end_offset(context, &from.brokers, &context.topic(&from.dc)).await else {
        return Ok(false);
    };
    let mut target = mysql::connect(&to.url).await?;
    let applied = loop {
        let reading = target.exec_first(
            format!("SELECT next_offset FROM `{APPLIED_TABLE}` WHERE source_dc = ?"),
            (&from.dc,),
        );
        let next: Option<i64> = to
            .bound
            .call(|| "reading relay_applied".into(), reading)
            .await?;
        let done = next.is_some_and(|n| n >= end);
        if done || Instant::now() > deadline {
            break done;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    };
    let _ = target.disconnect().await;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> KeyedTable {
        let columns = ["id", "note", "amount"].map(String::from).to_vec();
        KeyedTable::new("app", "items", columns, &["id".to_string()]).unwrap()
    }

    #[test]
    fn rows_hash_every_column_as_hex_with_null_apart() {
        let text = row_text(&["`a`".to_string(), "`b`".to_string()]);
        assert_eq!(
            text,
            "CONCAT_WS('#', COALESCE(HEX(CAST(`a` AS BINARY)), 'N'), \
             COALESCE(HEX(CAST(`b` AS BINARY)), 'N'))"
        );
        assert!(row_hash(&["`a`".to_string()]).starts_with("CAST(CONV(LEFT(MD5(CONCAT_WS("));
    }

    #[test]
    fn a_composite_key_is_compared_column_by_column() {
        let (sql, order) = key_after(&["`a`", "`b`"]);
        assert_eq!(sql, "(`a` > ?) OR (`a` = ? AND `b` > ?)");
        assert_eq!(order, vec![0, 0, 1]);
    }

    #[test]
    fn chunks_are_bounded_by_keys_and_open_at_the_ends() {
        let bounds = Bounds {
            after: Some(vec![Value::UInt(10)]),
            up_to: Some(vec![Value::UInt(20)]),
        };
        let (filter, params) = bounds.filter(&["`id`"]);
        assert_eq!(filter, "((`id` > ?)) AND NOT ((`id` > ?))");
        assert_eq!(params, vec![Value::UInt(10), Value::UInt(20)]);
        let (all, none) = Bounds::default().filter(&["`id`"]);
        assert_eq!((all.as_str(), none.len()), ("TRUE", 0));
        let (sql, params) = items().chunk_end_sql(Some(&[Value::UInt(10)]), 1000);
        assert_eq!(
            sql,
            "SELECT `id` FROM `app`.`items` WHERE ((`id` > ?)) ORDER BY `id` LIMIT 1 OFFSET 999"
        );
        assert_eq!(params, vec![Value::UInt(10)]);
        assert!(items().chunk_end_sql(None, 1).0.contains("WHERE TRUE"));
    }

    #[test]
    fn a_table_without_a_primary_key_is_refused() {
        let columns = vec!["a".to_string()];
        assert!(KeyedTable::new("app", "t", columns.clone(), &[]).is_err());
        assert!(KeyedTable::new("app", "t", columns, &["b".to_string()]).is_err());
    }

    fn row(id: &str, hash: u64) -> RowImage {
        RowImage {
            hash,
            values: vec![Some(id.as_bytes().to_vec()), None, Some(b"1.5".to_vec())],
        }
    }

    #[test]
    fn narrowing_finds_missing_and_changed_rows_by_key() {
        let local = vec![row("1", 1), row("2", 2), row("3", 3)];
        let remote = vec![row("1", 1), row("3", 30), row("4", 4)];
        let diffs = differing(local, remote, &[0]);
        let keys: Vec<&[u8]> = diffs.keys().map(|k| k[0].as_deref().unwrap()).collect();
        assert_eq!(keys, vec![b"2".as_slice(), b"3", b"4"]);
        let two = &diffs[&vec![Some(b"2".to_vec())]];
        assert!(two.local.is_some() && two.remote.is_none());
        let three = &diffs[&vec![Some(b"3".to_vec())]];
        assert_eq!(
            (
                three.local.as_ref().unwrap().hash,
                three.remote.as_ref().unwrap().hash
            ),
            (3, 30)
        );
        assert!(differing(vec![row("1", 1)], vec![row("1", 1)], &[0]).is_empty());
    }

    #[test]
    fn values_show_as_text_or_hex() {
        assert_eq!(Shown::of(b"abc"), Shown::Text("abc".into()));
        assert_eq!(Shown::of(&[0xff, 0x00]), Shown::Hex { hex: "ff00".into() });
    }
}
