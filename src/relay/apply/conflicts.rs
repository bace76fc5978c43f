//! Applying a part change by change when one does not find its row, and recording each
//! conflict as `relay.on_conflict` says.

use super::*;

/// Applies changes one at a time and records each conflict, resolved as `relay.on_conflict`
/// says.
pub(super) struct Conflicts<'a> {
    pub(super) context: &'a RelayContext,
    pub(super) source_dc: &'a str,
    pub(super) stats: &'a ApplyStats,
    /// The change applying waits at, if it does: recorded once, however often tried again.
    pub(super) waiting_at: &'a mut Option<TxnRef>,
    /// Under the cache filter, the keys of the changes that write their rows, recorded in
    /// `relay_loop_keys` with them: a conflicting change's own key gives way to the keys of
    /// the writes that made it win.
    pub(super) loop_keys: Vec<CacheKey>,
    /// Conflicts resolved by applying the change, counted once committed.
    pub(super) resolved: u64,
}

impl Conflicts<'_> {
    /// Applies `change` in the open transaction; on a conflict records it and either makes the
    /// change win or returns why applying waits (the caller rolls back).
    pub(super) async fn apply_one(
        &mut self,
        conn: &mut Conn,
        change: &Change,
    ) -> Result<Option<String>, RelayError> {
        let Some(statement) = self.statement(&change.row)? else {
            return Ok(None);
        };
        let table = format!("{}.{}", change.row.schema, change.row.table);
        let source_dc = self.source_dc;
        let failed = || format!("applying a change of {table} from {source_dc}");
        let limit = self.context.relay.apply_timeout;
        on_target(limit, failed, conn.query_drop(&statement.sql)).await?;
        if !statement.finds_row || conn.affected_rows() == 1 {
            return Ok(None);
        }
        let found: Option<String> = on_target(
            limit,
            failed,
            conn.query_first(self.sql(sql::found_row(&change.row))?),
        )
        .await?;
        let stop = self.context.relay.on_conflict == OnConflict::Stop;
        if stop && *self.waiting_at == Some(change.txn) {
            return Ok(Some(self.waiting_reason(change, &table)));
        }
        if stop {
            // Recorded outside the transaction, which is rolled back.
            on_target(limit, failed, conn.query_drop("ROLLBACK")).await?;
        }
        self.record(conn, change, found.as_deref(), stop).await?;
        if stop {
            *self.waiting_at = Some(change.txn);
            self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(self.waiting_reason(change, &table)));
        }
        // The change itself wrote nothing to the binlog, so its key is not recorded.
        self.drop_key(CacheKey::of(&change.row));
        for forced in sql::forced(&change.row) {
            if let Some(statement) = self.statement(&forced)? {
                on_target(limit, failed, conn.query_drop(&statement.sql)).await?;
                // Only a row written reaches the binlog, so only its key is recorded.
                if conn.affected_rows() > 0 {
                    self.keep_key(CacheKey::of(&forced));
                }
            }
        }
        self.resolved += 1;
        tracing::warn!(
            source = self.source_dc,
            table,
            "a {} from {} did not find its row here as it was there: recorded in \
             {CONFLICTS_TABLE}, and the change applied",
            change.row.kind,
            self.source_dc
        );
        Ok(None)
    }

    /// Under the cache filter, records the key of a row written, for capture to drop.
    pub(super) fn keep_key(&mut self, key: CacheKey) {
        if self.context.loop_filter() == LoopFilterMode::Cache {
            self.loop_keys.push(key);
        }
    }

    /// Takes back one recording of `key`.
    pub(super) fn drop_key(&mut self, key: CacheKey) {
        if let Some(at) = self.loop_keys.iter().position(|k| *k == key) {
            self.loop_keys.swap_remove(at);
        }
    }

    pub(super) fn statement(&self, row: &RowChange) -> Result<Option<sql::Statement>, RelayError> {
        self.sql(sql::statement(row))
    }

    /// A statement the reading half already wrote once for the same change cannot fail.
    pub(super) fn sql<T>(&self, written: Result<T, String>) -> Result<T, RelayError> {
        written.map_err(|e| RelayError::Refused(format!("a change from {}: {e}", self.source_dc)))
    }

    pub(super) fn waiting_reason(&self, change: &Change, table: &str) -> String {
        format!(
            "a {} of {table} from {} (transaction {}, {}) did not find its row here as it was \
             there (see {CONFLICTS_TABLE}); relay.on_conflict is stop, so applying from {} \
             waits: make the row here equal the expected image (insert it if it is missing), \
             or set relay.on_conflict = \"apply\" and restart, and applying goes on",
            change.row.kind,
            self.source_dc,
            change.txn.seq,
            change.position.gtid.as_deref().unwrap_or("no GTID"),
            self.source_dc
        )
    }

    pub(super) async fn record(
        &self,
        conn: &mut Conn,
        change: &Change,
        found: Option<&str>,
        stopped: bool,
    ) -> Result<(), RelayError> {
        let row = &change.row;
        let json =
            |r: &Row| serde_json::Value::Object(row_to_json(r).into_iter().collect()).to_string();
        let insert = conn.exec_drop(
            format!(
                "INSERT INTO `{CONFLICTS_TABLE}` (source_dc, source_gtid, table_schema, \
                 table_name, change_type, row_key, expected, found, change_message, resolution) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                self.source_dc,
                change.position.gtid.as_deref().unwrap_or_default(),
                &row.schema,
                &row.table,
                row.kind.to_string(),
                json(&row.key),
                row.before.as_ref().map(json).unwrap_or_default(),
                found,
                String::from_utf8_lossy(&change.to_json()).into_owned(),
                if stopped { "stopped" } else { "applied" },
            ),
        );
        on_target(
            self.context.relay.apply_timeout,
            || {
                format!(
                    "recording a conflict of {}.{} from {}",
                    row.schema, row.table, self.source_dc
                )
            },
            insert,
        )
        .await?;
        Ok(())
    }
}
