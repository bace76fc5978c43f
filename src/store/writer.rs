//! The store writer: each batch's rows (in the log table and in every fan-out table a record is
//! routed to), its dead letters, its rollup increments and its partition's next Kafka offset are
//! committed in one MySQL transaction, so every message is stored, and counted, exactly once.
//!
//! The offset is claimed first, with an update conditional on the offset the batch starts from:
//! a stale owner (after a rebalance) or a second copy of the batch changes nothing, and its
//! transaction is rolled back before any row is written ([`WriteOutcome::OffsetMoved`]). The
//! claim also locks the partition's offset row, so two writers of one partition run one after
//! the other.
//!
//! Rows the database refuses (bad data for a column), and rollup totals it refuses (a DOUBLE
//! sum out of range), do not stop the writer: the batch is written again in a fresh transaction
//! that isolates the refused records by bisection (a record is refused whole: in all its tables
//! and rollups), moves them to the dead letters with the server's message, and commits the rest
//! with the offset; rollups count only what is committed.
//! Transient failures (lost connection, deadlock) retry the whole batch with backoff, for at
//! most `store.give_up_after`.

mod infile;
mod insert;
mod line_counts;
mod sharded;
mod text_filter;

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{
    Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts, Row as MysqlRow, Transaction, TxOpts, Value,
};
use tokio::sync::OnceCell;

use super::follow;
use super::rollup;
use super::zone_map;
use super::zone_plan::ZonePlan;
use crate::id::Layout;
use crate::mysql::rows::first;
use crate::mysql::{self, DbError, Ident, MysqlUrl, SqlValue};
use crate::store::rollup_plan::RollupPlan;
use crate::store::settings::{InsertMethod, PayloadMode, StoreSettings};
use infile::{InfileHandler, InfileServer};
use insert::{InsertError, Statement, TableRow, Target};
use line_counts::LineCounts;

/// Where each partition's next offset is kept.
pub const OFFSETS_TABLE: &str = "ingest_offsets";
/// Where messages that could not be stored are kept, with the reason.
pub const DEAD_LETTERS_TABLE: &str = "dead_letters";

/// Longest reason kept for a dead letter (the column is `TEXT`, 65,535 bytes).
const MAX_REASON_BYTES: usize = 16 * 1024;

/// Statements stay this far below `max_allowed_packet` (or at half of it, when that is less),
/// for the packet header and the statement text around the values.
const PACKET_HEADROOM: usize = 64 * 1024;

/// Session settings every writer connection runs once. Strict mode makes bad data an error
/// instead of a silent truncation; the literal escaper relies on backslash escapes, so
/// `NO_BACKSLASH_ESCAPES` must be off; READ COMMITTED keeps the offset claim of a new partition
/// from taking gap locks that would deadlock two first writers.
const SESSION_SETUP: &[&str] = &[
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'",
    "SET SESSION time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET NAMES utf8mb4",
];

/// The messages of one Kafka partition from `start_offset` up to (not including) `next_offset`:
/// each became a row or a dead letter.
#[derive(Debug, Clone)]
pub struct Batch {
    pub consumer_group: String,
    pub topic: String,
    pub partition: i32,
    /// The partition's stored next offset, which this batch continues from.
    pub start_offset: i64,
    /// The offset after the batch's last message.
    pub next_offset: i64,
    pub rows: Vec<Row>,
    /// Messages that could not be mapped.
    pub dead_letters: Vec<DeadLetter>,
}

/// A mapped message: one value per column, in the mapper's column order, and the message text.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedRow {
    pub values: Vec<SqlValue>,
    /// The message exactly as received: valid UTF-8 and JSON that MariaDB's `JSON` accepts, so it
    /// can fill the `payload` column and numbers keep every digit.
    pub document: String,
    /// The record's residual in each table whose `payload` keeps one (index 0 the log table,
    /// then the fan-out tables; `None`: nothing left, or not kept); empty when no table keeps
    /// one. See [`crate::store::residual`].
    pub residuals: Vec<Option<String>>,
    /// The record's rows in the fan-out tables (`[[store.tables]]`, in order): `None` where it is
    /// not routed.
    pub fanout: Vec<Option<Vec<SqlValue>>>,
    /// Columns whose string was cut to the column's length (those with `truncate`), in all the
    /// record's tables.
    pub truncated: u32,
    /// The record's index in its message, for messages of several records (OTLP); `None` for
    /// a message that is one record.
    pub record: Option<u32>,
}

/// A mapped message with its ID.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: u64,
    pub offset: i64,
    pub mapped: MappedRow,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub offset: i64,
    /// The record's index in its message, when one record of several is refused; `None`: the
    /// whole message.
    pub record: Option<u32>,
    pub reason: String,
    pub raw: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Rows, dead letters and the new offset are committed.
    Committed(Committed),
    /// The partition's stored offset is not the batch's start (another writer moved it, or this
    /// batch was already written): nothing was written; seek to `stored` and read again. After a
    /// retry this may also be this batch's own earlier commit, whose acknowledgement was lost;
    /// either way every message is stored once and `stored` is where to read on.
    OffsetMoved { stored: Option<i64> },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Rows stored in the log table.
    pub rows: usize,
    /// Dead letters stored: the batch's own plus the refused rows.
    pub dead_letters: usize,
    /// Rows the database refused, as they were stored among the dead letters.
    pub refused: Vec<DeadLetter>,
}

pub use sharded::Writer;

/// Writes batches to one database on a pool of `store.concurrency` connections; batches of
/// different partitions may be written at once. [`Writer`] holds one per shard.
struct ServerWriter {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    infiles: Arc<InfileServer>,
    /// The log table.
    target: Target,
    /// The fan-out tables, in the order of [`MappedRow::fanout`].
    fanout: Vec<Target>,
    rollups: Vec<RollupTarget>,
    /// The tables with an event time, whose zone rows each batch adds to.
    zones: Vec<ZonePlan>,
    /// The zone map's upsert text, built once.
    zone_upsert: (String, String, usize),
    /// Every table's line counts.
    line_counts: LineCounts,
    text_filters: text_filter::TextFilters,
    layout: Layout,
    method: InsertMethod,
    /// How long one attempt may wait on the server (`store.write_timeout`).
    write_timeout: std::time::Duration,
    /// How long after its stamping a batch may still commit (`None`: no limit).
    commit_window: Option<std::time::Duration>,
    /// Largest statement, from the server's `max_allowed_packet`.
    statement_budget: OnceCell<usize>,
    /// `method` as the server allows it (see [`insert::method_on`]), once the server is known.
    method_on_server: OnceCell<InsertMethod>,
}

impl ServerWriter {
    /// A writer of `store`'s tables and `rollups`, stamping IDs of `layout`, on the server at
    /// `url`.
    pub fn new(
        url: &MysqlUrl,
        store: &StoreSettings,
        rollups: &[RollupPlan],
        layout: Layout,
    ) -> Result<ServerWriter, DbError> {
        let idents = |columns: &[crate::store::schema::ColumnSpec]| {
            columns
                .iter()
                .map(|c| c.ident().map_err(|e| DbError::config("store.columns", e)))
                .collect::<Result<Vec<Ident>, _>>()
        };
        let fanout = store
            .tables
            .iter()
            .map(|t| Ok(Target::new(t.name.clone(), idents(&t.columns)?, t.payload)))
            .collect::<Result<Vec<Target>, DbError>>()?;
        let infiles = Arc::new(InfileServer::default());
        let constraints = PoolConstraints::new(1, store.concurrency.max(1)).ok_or_else(|| {
            DbError::config(
                "store.concurrency",
                format!("invalid pool size {}", store.concurrency),
            )
        })?;
        let opts = OptsBuilder::from_opts(mysql::opts(url)?)
            .setup(SESSION_SETUP.to_vec())
            .local_infile_handler(Some(InfileHandler(infiles.clone())))
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    // The session is set up once and owned by the writer; a reset on every
                    // return to the pool would cost round trips and undo the setup.
                    .with_reset_connection(false),
            );
        Ok(ServerWriter {
            inner: Arc::new(Inner {
                pool: Pool::new(opts),
                infiles,
                target: Target::new(store.table.clone(), idents(&store.columns)?, store.payload),
                fanout,
                rollups: rollups.iter().map(RollupTarget::new).collect(),
                zones: store.zone_plans(),
                zone_upsert: zone_map::upsert_statement(),
                line_counts: LineCounts::new(store),
                text_filters: text_filter::TextFilters::new(store),
                layout,
                method: store.insert_method,
                write_timeout: store.write_timeout,
                commit_window: store.commit_window(),
                statement_budget: OnceCell::new(),
                method_on_server: OnceCell::new(),
            }),
        })
    }

    pub fn method(&self) -> InsertMethod {
        self.inner.method
    }

    /// A partition's stored next offset, to seek to on assignment; `None` for a partition
    /// never written. Tried once, within `store.write_timeout`: the caller retries.
    async fn stored_offset(
        &self,
        consumer_group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<i64>, DbError> {
        mysql::bound::within(
            self.inner.write_timeout,
            || format!("reading the stored offset of {topic}/{partition}"),
            self.read_stored_offset(consumer_group, topic, partition),
        )
        .await
    }

    async fn read_stored_offset(
        &self,
        consumer_group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<i64>, DbError> {
        let mut conn = self.conn().await?;
        let row: Option<MysqlRow> = conn
            .exec_first(
                format!(
                    "SELECT next_offset FROM `{OFFSETS_TABLE}` \
                     WHERE consumer_group = ? AND topic = ? AND kafka_partition = ?"
                ),
                (consumer_group, topic, partition),
            )
            .await
            .map_err(DbError::mysql(format!(
                "reading the stored offset of {topic}/{partition}"
            )))?;
        first(row, "ingest_offsets.next_offset")
    }

    /// Loads rows with one `LOAD DATA LOCAL INFILE` outside any batch, offset or transaction:
    /// the ceiling the benchmark compares the writer with. Returns the rows loaded.
    pub async fn load_unbatched(&self, rows: &[Row]) -> Result<u64, DbError> {
        let mut conn = self.conn().await?;
        let budget = self.statement_budget(&mut conn).await?;
        let rows: Vec<TableRow> = rows
            .iter()
            .map(|row| main_row(row, &self.inner.target))
            .collect();
        insert::load_data(
            &mut conn,
            &self.inner.infiles,
            &self.inner.target,
            &rows,
            budget,
        )
        .await
        .map_err(InsertError::into_store)
    }

    /// Closes the pool's connections once every clone's work is done.
    async fn close(&self) -> Result<(), DbError> {
        self.inner
            .pool
            .clone()
            .disconnect()
            .await
            .map_err(DbError::mysql("closing the writer's connections"))
    }

    async fn conn(&self) -> Result<Conn, DbError> {
        self.inner
            .pool
            .get_conn()
            .await
            .map_err(DbError::mysql("connecting the writer"))
    }

    /// Mistakes of the caller, refused before any work.
    pub(super) fn check(&self, batch: &Batch) -> Result<(), DbError> {
        let refuse = |why: String| {
            Err(DbError::Invariant(format!(
                "batch of {}/{} from offset {}: {why}",
                batch.topic, batch.partition, batch.start_offset
            )))
        };
        if batch.next_offset <= batch.start_offset {
            return refuse(format!("next offset {} is not after it", batch.next_offset));
        }
        let in_range = |offset: i64| (batch.start_offset..batch.next_offset).contains(&offset);
        let columns = self.inner.target.columns.len();
        for row in &batch.rows {
            if !in_range(row.offset) {
                return refuse(format!("row offset {} is outside the batch", row.offset));
            }
            if row.mapped.values.len() != columns {
                return refuse(format!(
                    "row at offset {} has {} values for {columns} columns",
                    row.offset,
                    row.mapped.values.len()
                ));
            }
            if row.mapped.fanout.len() != self.inner.fanout.len() {
                return refuse(format!(
                    "row at offset {} is routed among {} fan-out tables, not {}",
                    row.offset,
                    row.mapped.fanout.len(),
                    self.inner.fanout.len()
                ));
            }
            let widths = row.mapped.fanout.iter().zip(&self.inner.fanout);
            if let Some((values, table)) = widths
                .filter_map(|(values, table)| Some((values.as_ref()?, table)))
                .find(|(values, table)| values.len() != table.columns.len())
            {
                return refuse(format!(
                    "row at offset {} has {} values for the {} columns of {}",
                    row.offset,
                    values.len(),
                    table.columns.len(),
                    table.table
                ));
            }
        }
        if let Some(d) = batch.dead_letters.iter().find(|d| !in_range(d.offset)) {
            return refuse(format!(
                "dead letter offset {} is outside the batch",
                d.offset
            ));
        }
        Ok(())
    }

    /// Writes a batch exactly once, or fails; the caller retries what is transient. Bounded by
    /// `store.write_timeout`: past it the connection is dropped mid-work, and a commit sent
    /// but not answered is settled by the retry's offset claim (the claim waits on the row
    /// lock of a transaction still open, and then finds the offset moved or not).
    async fn attempt(&self, batch: &Batch) -> Result<WriteOutcome, DbError> {
        let outcome = mysql::bound::within(
            self.inner.write_timeout,
            || batch_context(batch, "writing the batch"),
            self.attempt_unbounded(batch),
        )
        .await;
        if outcome.is_err() {
            self.inner.text_filters.forget();
        }
        outcome
    }

    async fn attempt_unbounded(&self, batch: &Batch) -> Result<WriteOutcome, DbError> {
        let mut conn = self.conn().await?;
        let budget = self.statement_budget(&mut conn).await?;
        self.method_on_server(&mut conn).await?;
        // Fast path: the whole batch at once; slow path (only when the database refused a row):
        // again, isolating the refused rows.
        for isolating in [false, true] {
            let mut tx =
                conn.start_transaction(TxOpts::default())
                    .await
                    .map_err(DbError::mysql(batch_context(
                        batch,
                        "starting a transaction",
                    )))?;
            let step = self.in_transaction(&mut tx, batch, budget, isolating).await;
            match step {
                Ok(Step::Commit(committed, sent)) => {
                    if let Err(e) = self.check_commit_window(&mut tx, batch).await {
                        if let Err(rollback) = tx.rollback().await {
                            tracing::debug!("rolling back a late batch: {rollback}");
                        }
                        return Err(e);
                    }
                    tx.commit()
                        .await
                        .map_err(DbError::mysql(batch_context(batch, "committing")))?;
                    self.inner.text_filters.committed(sent);
                    return Ok(WriteOutcome::Committed(committed));
                }
                Ok(Step::Moved(stored)) => {
                    if let Err(e) = tx.rollback().await {
                        // Nothing was written; the pool rolls back or drops the connection.
                        tracing::debug!("rolling back an unclaimed batch: {e}");
                    }
                    return Ok(WriteOutcome::OffsetMoved { stored });
                }
                Ok(Step::Refused(reason)) => {
                    tracing::info!(
                        topic = %batch.topic,
                        partition = batch.partition,
                        start_offset = batch.start_offset,
                        "{reason}; finding which records"
                    );
                    tx.rollback()
                        .await
                        .map_err(DbError::mysql(batch_context(batch, "rolling back")))?;
                }
                Err(e) => {
                    // Roll back now, so the partition's offset row is unlocked before the error
                    // is returned rather than whenever the pool gets to the connection.
                    if let Err(rollback) = tx.rollback().await {
                        tracing::debug!("rolling back after a failure: {rollback}");
                    }
                    return Err(e);
                }
            }
        }
        Err(DbError::Invariant(batch_context(
            batch,
            "a row was refused, then none was when isolating it",
        )))
    }

    /// Refuses to commit a batch whose lowest ID is more than the commit window
    /// ([`StoreSettings::commit_window`]) older than the database's clock: the last statement
    /// before `COMMIT`, after every row is inserted. This is what lets `query --follow` (see
    /// [`crate::store::follow`]) know when no more rows of a second can appear. The batch is not
    /// retried with the same IDs (it would only be later still): the worker stops, and the next
    /// owner of the partition reads the messages again and stamps them anew.
    async fn check_commit_window(
        &self,
        tx: &mut Transaction<'_>,
        batch: &Batch,
    ) -> Result<(), DbError> {
        let Some(window) = self.inner.commit_window else {
            return Ok(());
        };
        let Some(lowest) = batch.rows.iter().map(|r| r.id).min() else {
            return Ok(());
        };
        let stamped = self.inner.layout.decode(lowest).unix_seconds;
        let deadline = stamped.saturating_add(window.as_secs());
        let row: Option<MysqlRow> = tx
            .exec_first(
                "SELECT UTC_TIMESTAMP(6) < ?",
                (follow::datetime_value(deadline),),
            )
            .await
            .map_err(DbError::mysql(batch_context(
                batch,
                "checking the commit window",
            )))?;
        let in_time: Option<bool> = first(row, "the commit window check")?;
        if in_time == Some(true) {
            return Ok(());
        }
        Err(DbError::Refused(batch_context(
            batch,
            &format!(
                "not committing: its IDs were stamped at {} and store.commit_window ({}s) has \
                 passed by the database's clock; the worker's clock may be behind the \
                 database's. The next owner reads the batch again",
                crate::time::format_utc(stamped),
                window.as_secs(),
            ),
        )))
    }

    /// Claims the offset, then writes the records (all at once, or `isolating` refused ones)
    /// and the dead letters. Commits nothing.
    async fn in_transaction(
        &self,
        tx: &mut Transaction<'_>,
        batch: &Batch,
        budget: usize,
        isolating: bool,
    ) -> Result<Step, DbError> {
        if let Some(stored) = claim_offset(tx, batch).await? {
            return Ok(Step::Moved(stored));
        }
        // What the isolating path sent is not recorded: savepoints rolled back some of it.
        let (refused, sent) = if isolating {
            (
                self.write_isolating(tx, &batch.rows, budget).await?,
                text_filter::Sent::default(),
            )
        } else {
            match self.write_records(tx, &batch.rows, budget).await {
                Ok(sent) => (Vec::new(), sent),
                Err(InsertError::Refused(reason)) => return Ok(Step::Refused(reason)),
                Err(InsertError::Store(e)) => return Err(e),
            }
        };
        let refused: Vec<DeadLetter> = refused
            .into_iter()
            .map(|(i, reason)| {
                let row = &batch.rows[i];
                DeadLetter {
                    offset: row.offset,
                    record: row.mapped.record,
                    reason,
                    raw: row.mapped.document.as_bytes().to_vec(),
                }
            })
            .collect();
        let mut dead_letters = batch.dead_letters.clone();
        dead_letters.extend(refused.iter().cloned());
        let dead = insert_dead_letters(tx, batch, &dead_letters, budget).await?;
        Ok(Step::Commit(
            Committed {
                rows: batch.rows.len() - refused.len(),
                dead_letters: dead,
                refused,
            },
            sent,
        ))
    }

    /// Inserts the records' rows: every record into the log table, and into each fan-out table
    /// the records routed there.
    async fn insert(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[Row],
        budget: usize,
    ) -> Result<(), InsertError> {
        let main: Vec<TableRow> = rows
            .iter()
            .map(|row| main_row(row, &self.inner.target))
            .collect();
        self.insert_into(tx, &self.inner.target, &main, budget)
            .await?;
        for (index, target) in self.inner.fanout.iter().enumerate() {
            let routed: Vec<TableRow> = rows
                .iter()
                .filter_map(|row| {
                    let values = row.mapped.fanout.get(index)?.as_deref()?;
                    Some(TableRow {
                        id: row.id,
                        offset: row.offset,
                        values,
                        payload: payload(row, index + 1, target.mode),
                    })
                })
                .collect();
            self.insert_into(tx, target, &routed, budget).await?;
        }
        Ok(())
    }

    async fn insert_into(
        &self,
        tx: &mut Transaction<'_>,
        target: &Target,
        rows: &[TableRow<'_>],
        budget: usize,
    ) -> Result<(), InsertError> {
        if rows.is_empty() {
            return Ok(());
        }
        // Known by now: `attempt` asks before its first transaction.
        let method = self.inner.method_on_server.get().copied();
        match method.unwrap_or(self.inner.method) {
            InsertMethod::Text => insert::text(tx, target, rows, budget).await,
            InsertMethod::Prepared => insert::prepared(tx, target, rows, budget).await,
            InsertMethod::Batch => insert::batch(tx, target, rows, budget).await,
            InsertMethod::LoadData => {
                insert::load_data(tx, &self.inner.infiles, target, rows, budget)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Writes the records whole: their rows in every table they go to, then their share of
    /// every rollup. A refusal's reason says which of these the database refused.
    async fn write_records(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[Row],
        budget: usize,
    ) -> Result<text_filter::Sent, InsertError> {
        // The text filter's bits are computed while the database inserts the rows, the writer's
        // CPU and the server's in parallel rather than one after the other: the insert is
        // polled first, and again after the filter's side yields once, so its statement is on
        // its way before the filter's work holds this task. (A statement larger than the
        // socket's buffer is only partly sent by then: with one connection the server waits
        // for the rest; with several, other batches' statements keep it busy.)
        let layout = &self.inner.layout;
        let (inserted, filter_rows) =
            futures_util::future::join(self.insert(tx, rows, budget), async {
                tokio::task::yield_now().await;
                self.inner.text_filters.aggregate(layout, rows)
            })
            .await;
        inserted.map_err(|e| {
            e.refused_as(|reason| format!("the database refused the row: {reason}"))
        })?;
        self.add_to_rollups(tx, rows, budget).await?;
        let sent = self
            .inner
            .text_filters
            .send(tx, filter_rows, budget)
            .await?;
        self.add_to_zone_map(tx, rows, budget).await?;
        self.inner.line_counts.add(tx, layout, rows, budget).await?;
        Ok(sent)
    }

    /// Widens the zone rows of the records' buckets in every table with an event time. Last in
    /// the batch's writes, so the shared rows of the current minute are held briefly.
    async fn add_to_zone_map(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[Row],
        budget: usize,
    ) -> Result<(), InsertError> {
        let (prefix, suffix, width) = &self.inner.zone_upsert;
        for plan in &self.inner.zones {
            let zones = plan.aggregate(
                &self.inner.layout,
                rows.iter()
                    .filter_map(|row| Some((row.id, table_values(row, plan.table_index)?))),
            );
            let values = zones
                .iter()
                .map(|zone| zone_map::upsert_values(&plan.table, zone))
                .collect();
            let what = || format!("the zone map of {}", plan.table);
            upsert(tx, (prefix, suffix, *width), values, budget, what).await?;
        }
        Ok(())
    }

    /// Adds the records to every rollup. A total out of its column's range (a DOUBLE sum past
    /// 1.8e308, among the records or with the total already stored) is refused by the server
    /// like a bad row, so the records that cause it can be isolated like refused rows.
    async fn add_to_rollups(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[Row],
        budget: usize,
    ) -> Result<(), InsertError> {
        for RollupTarget {
            plan,
            prefix,
            suffix,
            width,
        } in &self.inner.rollups
        {
            let stored = rows
                .iter()
                .filter_map(|row| Some((row.id, table_values(row, plan.source_index)?)));
            let aggregate = plan.aggregate(&self.inner.layout, stored);
            let values = aggregate.iter().map(rollup::upsert_values).collect();
            let what = || format!("rollup {}", plan.name);
            upsert(tx, (prefix, suffix, *width), values, budget, what).await?;
        }
        Ok(())
    }

    /// Writes the records the database accepts, each part under a savepoint so a refused part
    /// leaves nothing behind (no row, no rollup share), halving refused parts down to single
    /// records. Parts are written in offset order, so of records that overflow a rollup's
    /// total only together, the one whose share pushes it out of range is refused. Returns
    /// the refused records' indexes with the reason.
    async fn write_isolating(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[Row],
        budget: usize,
    ) -> Result<Vec<(usize, String)>, DbError> {
        let context = "isolating refused rows";
        let mut refused = Vec::new();
        let mut parts = vec![(0, rows.len())];
        while let Some((from, to)) = parts.pop() {
            if from == to {
                continue;
            }
            tx.query_drop("SAVEPOINT logstamp_part")
                .await
                .map_err(DbError::mysql(context))?;
            match self.write_records(tx, &rows[from..to], budget).await {
                Ok(_) => {}
                Err(InsertError::Refused(reason)) => {
                    tx.query_drop("ROLLBACK TO SAVEPOINT logstamp_part")
                        .await
                        .map_err(DbError::mysql(context))?;
                    if to - from == 1 {
                        refused.push((from, reason));
                    } else {
                        let middle = from + (to - from) / 2;
                        parts.push((middle, to));
                        parts.push((from, middle));
                    }
                }
                Err(InsertError::Store(e)) => return Err(e),
            }
        }
        Ok(refused)
    }

    /// The insert method for this pool's server, decided on its first connection.
    async fn method_on_server(&self, conn: &mut Conn) -> Result<InsertMethod, DbError> {
        self.inner
            .method_on_server
            .get_or_try_init(|| async {
                let configured = self.inner.method;
                let method = insert::method_on(configured, mysql::flavor(conn).await?);
                if method != configured {
                    tracing::warn!(
                        "store.insert_method = \"{configured}\" is MariaDB's bulk execute, which \
                         this MySQL server lacks (it would cost a round trip per row): writing \
                         with \"{method}\" instead"
                    );
                }
                Ok::<InsertMethod, DbError>(method)
            })
            .await
            .copied()
    }

    async fn statement_budget(&self, conn: &mut Conn) -> Result<usize, DbError> {
        self.inner
            .statement_budget
            .get_or_try_init(|| async {
                let row: Option<MysqlRow> =
                    conn.query_first("SELECT @@max_allowed_packet")
                        .await
                        .map_err(DbError::mysql("reading max_allowed_packet"))?;
                let server: u64 = first(row, "@@max_allowed_packet")?.ok_or_else(|| {
                    DbError::Invariant("the server did not say its max_allowed_packet".into())
                })?;
                let server = usize::try_from(server).unwrap_or(usize::MAX);
                // A lower limit of the client's own (`max_allowed_packet` in mysql.url) makes
                // the driver refuse larger packets.
                let max = conn
                    .opts()
                    .max_allowed_packet()
                    .map_or(server, |client| client.min(server));
                Ok::<usize, DbError>(max.saturating_sub(PACKET_HEADROOM).max(max / 2))
            })
            .await
            .copied()
    }
}

/// A rollup with its upsert statement's text, built once.
struct RollupTarget {
    plan: RollupPlan,
    prefix: String,
    suffix: String,
    width: usize,
}

impl RollupTarget {
    fn new(plan: &RollupPlan) -> RollupTarget {
        let (prefix, suffix, width) = rollup::upsert_statement(plan);
        RollupTarget {
            plan: plan.clone(),
            prefix,
            suffix,
            width,
        }
    }
}

/// What a transaction came to, before it is committed or rolled back.
enum Step {
    /// To commit; the text filter rows sent, known once committed.
    Commit(Committed, text_filter::Sent),
    /// The stored offset is elsewhere (or absent).
    Moved(Option<i64>),
    /// The database refused some row of the batch, for this reason.
    Refused(String),
}

fn batch_context(batch: &Batch, what: &str) -> String {
    format!(
        "{what} for {}/{} from offset {}",
        batch.topic, batch.partition, batch.start_offset
    )
}

/// Moves the partition's offset from the batch's start to its end; `Some(stored)` (nothing
/// claimed) when the stored offset is elsewhere.
async fn claim_offset(
    tx: &mut Transaction<'_>,
    batch: &Batch,
) -> Result<Option<Option<i64>>, DbError> {
    let context = || {
        format!(
            "claiming offset {} of {}/{} for group {}",
            batch.start_offset, batch.topic, batch.partition, batch.consumer_group
        )
    };
    let key = (
        batch.consumer_group.as_str(),
        batch.topic.as_str(),
        batch.partition,
    );
    tx.exec_drop(
        format!(
            "UPDATE `{OFFSETS_TABLE}` SET next_offset = ?, updated_at = CURRENT_TIMESTAMP(6) \
             WHERE consumer_group = ? AND topic = ? AND kafka_partition = ? AND next_offset = ?"
        ),
        (batch.next_offset, key.0, key.1, key.2, batch.start_offset),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    if tx.affected_rows() == 1 {
        return Ok(None);
    }
    // No row moved: either the partition has none yet, or its offset is elsewhere. Of two first
    // writers, one inserts; the other waits on its key lock and then finds the row (0 affected).
    // ON DUPLICATE KEY with a no-op, not INSERT IGNORE, which would also hide bad values.
    tx.exec_drop(
        format!(
            "INSERT INTO `{OFFSETS_TABLE}` (consumer_group, topic, kafka_partition, next_offset) \
             VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE next_offset = next_offset"
        ),
        (key.0, key.1, key.2, batch.next_offset),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    if tx.affected_rows() == 1 {
        return Ok(None);
    }
    let row: Option<MysqlRow> = tx
        .exec_first(
            format!(
                "SELECT next_offset FROM `{OFFSETS_TABLE}` \
                 WHERE consumer_group = ? AND topic = ? AND kafka_partition = ?"
            ),
            key,
        )
        .await
        .map_err(DbError::mysql(context()))?;
    Ok(Some(first(row, "ingest_offsets.next_offset")?))
}

async fn insert_dead_letters(
    tx: &mut Transaction<'_>,
    batch: &Batch,
    dead_letters: &[DeadLetter],
    budget: usize,
) -> Result<usize, DbError> {
    if dead_letters.is_empty() {
        return Ok(0);
    }
    let rows: Vec<(usize, Vec<Value>)> = dead_letters
        .iter()
        .map(|d| {
            let mut reason = clip(&d.reason, MAX_REASON_BYTES).to_string();
            // A message too big for any statement is kept as its reason and place only.
            let raw = if d.raw.len() > budget / 2 {
                reason.push_str(&format!(
                    " (the raw message of {} bytes is not kept: too large for max_allowed_packet)",
                    d.raw.len()
                ));
                Value::NULL
            } else {
                Value::Bytes(d.raw.clone())
            };
            let size = reason.len() + d.raw.len().min(budget / 2) + batch.topic.len() + 64;
            let values = vec![
                Value::Bytes(batch.topic.as_bytes().to_vec()),
                Value::Int(i64::from(batch.partition)),
                Value::Int(d.offset),
                d.record.map_or(Value::NULL, |r| Value::UInt(u64::from(r))),
                Value::Bytes(reason.into_bytes()),
                raw,
            ];
            (size, values)
        })
        .collect();
    let prefix = format!(
        "INSERT INTO `{DEAD_LETTERS_TABLE}` \
         (topic, kafka_partition, kafka_offset, record_index, reason, raw) VALUES "
    );
    let statement = Statement {
        prefix: &prefix,
        suffix: "",
        width: 6,
        one_affected_per_row: true,
    };
    insert::prepared_values(tx, &statement, rows, budget)
        .await
        .map_err(|e| match e {
            InsertError::Store(e) => e,
            // Nothing about a dead letter can be refused but its size, which is bounded above.
            InsertError::Refused(reason) => {
                DbError::Refused(format!("storing dead letters: {reason}"))
            }
        })?;
    Ok(dead_letters.len())
}

/// A record's values in table `index` (0: the log table, then the fan-out tables); `None`
/// where it was not routed.
fn table_values(row: &Row, index: usize) -> Option<&[SqlValue]> {
    match index {
        0 => Some(row.mapped.values.as_slice()),
        n => row.mapped.fanout.get(n - 1)?.as_deref(),
    }
}

/// A record's row in the log table.
fn main_row<'a>(row: &'a Row, target: &Target) -> TableRow<'a> {
    TableRow {
        id: row.id,
        offset: row.offset,
        values: &row.mapped.values,
        payload: payload(row, 0, target.mode),
    }
}

/// What the `payload` column of table `index` (0: the log table, then the fan-out tables)
/// keeps of a record, in `mode`. A record mapped without its residuals (by a mapping that keeps
/// none) keeps its whole document, which reads back the same.
fn payload(row: &Row, index: usize, mode: PayloadMode) -> Option<&str> {
    match (mode, row.mapped.residuals.get(index)) {
        (PayloadMode::None, _) => None,
        (PayloadMode::Residual, Some(residual)) => residual.as_deref(),
        (PayloadMode::Full | PayloadMode::Residual, _) => Some(&row.mapped.document),
    }
}

/// The longest prefix of `s` within `max` bytes, on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Upserts the aggregated rows of a rollup, a zone map or line counts (`what`) in the batch's transaction;
/// a refusal names it.
async fn upsert(
    tx: &mut Transaction<'_>,
    (prefix, suffix, width): (&str, &str, usize),
    values: Vec<(usize, Vec<Value>)>,
    budget: usize,
    what: impl Fn() -> String,
) -> Result<(), InsertError> {
    if values.is_empty() {
        return Ok(());
    }
    let statement = Statement {
        prefix,
        suffix,
        width,
        one_affected_per_row: false,
    };
    insert::prepared_values(tx, &statement, values, budget)
        .await
        .map_err(|e| {
            e.refused_as(|reason| {
                format!(
                    "the database refused adding the record to {}: {reason}",
                    what()
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_whole_characters() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("a😀b", 3), "a");
        assert_eq!(clip("a😀b", 5), "a😀");
    }

    #[test]
    fn batch_on_mysql_writes_prepared_and_nothing_else_changes() {
        use InsertMethod::*;
        use mysql::Flavor::{MariaDb, MySql};
        assert_eq!(insert::method_on(Batch, MySql), Prepared);
        for method in [Text, Prepared, Batch, LoadData] {
            assert_eq!(insert::method_on(method, MariaDb), method);
        }
        for method in [Text, Prepared, LoadData] {
            assert_eq!(insert::method_on(method, MySql), method);
        }
    }
}
