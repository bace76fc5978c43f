//! Applying parts in local transactions: waiting for matching tables, placing each part
//! after the last, committing with the recorded position.

use super::*;

/// The local transaction an applier has open (started, with its marker, by its first part).
#[derive(Default)]
pub(super) struct Open {
    pub(super) begun: bool,
    /// The source transactions applied in it, and their changes.
    pub(super) transactions: usize,
    pub(super) changes: u64,
    /// The end of the latest of them, and how far the source's stream is after it.
    pub(super) end: Option<(End, Followed)>,
    /// The rows of `relay_loop_keys` written in it (`cache` loop filter).
    pub(super) chunks: usize,
    /// Conflicts resolved by applying the change, counted once committed.
    pub(super) resolved: u64,
    /// Messages recorded in `relay_dead_letters`, counted once committed.
    pub(super) dead_letters: u64,
    /// The tables its changes went to (schema, table).
    pub(super) tables: BTreeSet<(String, String)>,
    /// What it held at the savepoint before the latest source transaction.
    pub(super) at_savepoint: Counts,
    /// Statements applied but not sent yet: what needs no answer goes with the next round trip
    /// that does, or with the commit (an applier that is behind sends up to
    /// `relay.apply_batch` source transactions in one round trip, as a statement budget allows).
    pub(super) unsent: Vec<String>,
    pub(super) unsent_bytes: usize,
}

impl Open {
    /// The statements not sent yet, followed by `then`.
    pub(super) fn send_with(&mut self, then: impl IntoIterator<Item = String>) -> Vec<String> {
        self.unsent_bytes = 0;
        let mut statements = std::mem::take(&mut self.unsent);
        statements.extend(then);
        statements
    }
}

/// What an open local transaction holds that a rollback to a savepoint takes back.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) changes: u64,
    pub(super) chunks: usize,
    pub(super) resolved: u64,
    pub(super) dead_letters: u64,
}

impl Open {
    pub(super) fn counts(&self) -> Counts {
        Counts {
            changes: self.changes,
            chunks: self.chunks,
            resolved: self.resolved,
            dead_letters: self.dead_letters,
        }
    }

    /// Back to what it held at a savepoint.
    pub(super) fn restore(&mut self, counts: Counts) {
        self.changes = counts.changes;
        self.chunks = counts.chunks;
        self.resolved = counts.resolved;
        self.dead_letters = counts.dead_letters;
    }
}

/// How applying a part went.
pub(super) enum Outcome {
    /// Applied, conflicts resolved by `relay.on_conflict = "apply"` included.
    All,
    /// Stopped at a conflict (`relay.on_conflict = "stop"`), for this reason; the caller rolls
    /// the local transaction back.
    WaitingAt(String),
}

/// Applies the parts handed on, in order, each once its tables match here. A source
/// transaction's parts go into one local transaction; when more are waiting, up to
/// `relay.apply_batch` whole source transactions share it, and one commit serves them all.
pub(super) async fn apply_all(
    context: &RelayContext,
    conn: &mut Conn,
    source_dc: &str,
    stats: &ApplyStats,
    limits: &Limits,
    mut ready: mpsc::Receiver<Item<'_>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let mut schemas = SchemaCache::default();
    let mut open: Option<Open> = None;
    let applier = Applier {
        context,
        source_dc,
        limits,
        recorded: Mutex::default(),
    };
    // Stopped at a bad message: what is still handed on is dropped, unapplied, until shutdown.
    let mut halted = false;
    // Where messages that are no change of this source's are recorded, apart from the open
    // local transaction: they belong to no source transaction, and one that is undone must not
    // take them with it.
    let mut strays: Option<Conn> = None;
    while let Some(item) = ready.recv().await {
        let part = match item {
            _ if halted => continue,
            Item::Part(part) => part,
            Item::Bad {
                why,
                txn: Some(txn),
            } if applier.dead_letters() => {
                return applier
                    .dead_letter_again(conn, &mut open, stats, txn, &why)
                    .await;
            }
            Item::Bad { why, .. } => {
                halted = true;
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.stopped, &why)
                    .await?;
                continue;
            }
            Item::Stray {
                offset,
                payload,
                why,
            } => {
                applier
                    .record_stray(&mut strays, offset, &payload, &why, stats)
                    .await?;
                continue;
            }
            Item::CutOff => {
                if let Some(open) = open.as_mut() {
                    applier.undo_to_savepoint(conn, open).await?;
                }
                continue;
            }
            Item::Resumed { next_offset, run } => {
                // Recorded, so that a topic whose last message is a resume message shows no
                // applier behind, and a restart starts in the new run. Not while stopped: the
                // transaction applying stopped at must be met again.
                if stats.stopped.load(Ordering::Relaxed) {
                    continue;
                }
                if let Some(done) = open.take() {
                    applier.finish(conn, done, stats).await?;
                }
                record_resumed(conn, limits.wait, source_dc, next_offset, run).await?;
                continue;
            }
            Item::Unordered { why, commit_ts } => {
                // Everything before it is applied; nothing after it is until the source's
                // stream starts anew. The transaction waiting ages in the lag.
                if let Some(done) = open.take() {
                    applier.finish(conn, done, stats).await?;
                }
                stats.lag.behind_since(commit_ts);
                stop_visibly(conn, limits.wait, &stats.stopped, source_dc, &why).await?;
                continue;
            }
        };
        stats.lag.behind_since(part.commit_ts);
        let placed = match applier
            .wait_for_schemas(conn, &mut schemas, &mut open, &part, stats, shutdown)
            .await
        {
            Ok(false) => return Ok(()),
            Ok(true) => applier.place(conn, &mut open, &part, &ready, stats).await,
            Err(e) => Err(e),
        };
        match placed {
            Ok(Outcome::All) => {}
            Ok(Outcome::WaitingAt(why)) => {
                // The local transaction goes whole, with the parts before the conflict that
                // are no longer in hand: applying starts again from the stored offset, and
                // meets the conflict again until the row here is repaired.
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.conflict_stopped, &why)
                    .await?;
                return Err(RelayError::Interrupted(why));
            }
            Err(e) if e.is_transient() => return Err(e),
            // A definite failure (a table not relayed here, a value the local column cannot
            // hold): the same transaction would fail again. Sent with the statements of
            // earlier parts, it may be one of theirs: they are applied again, each sent on its
            // own, to tell.
            Err(e) if !stats.sends_each_part(part.next_offset) => {
                open.take();
                rollback(conn, limits.wait, source_dc).await?;
                stats.send_each_part_until(part.next_offset);
                return Err(RelayError::Interrupted(format!(
                    "{e}; applying again part by part to find the transaction that failed"
                )));
            }
            Err(e) if applier.dead_letters() && part.dead_letters == 0 => {
                let why = e.to_string();
                let txn = part.lettering(why.clone());
                return applier
                    .dead_letter_again(conn, &mut open, stats, txn, &why)
                    .await;
            }
            Err(e) => {
                halted = true;
                applier
                    .roll_back_and_stop(conn, &mut open, &stats.stopped, &e.to_string())
                    .await?;
            }
        }
    }
    Ok(())
}

/// The applying half of an applier.
pub(super) struct Applier<'a> {
    pub(super) context: &'a RelayContext,
    pub(super) source_dc: &'a str,
    pub(super) limits: &'a Limits,
    /// The tables known to be in `relay_applied_tables` for this source.
    pub(super) recorded: Mutex<HashSet<(String, String)>>,
}

impl Applier<'_> {
    /// Waits until the tables of `part` are the same here as at the source; `false` when
    /// shutdown came first. Waiting with a transaction open would hold its locks: what it holds
    /// of whole source transactions is committed first; part of one is undone, and read again
    /// from the stored offset (its first part).
    pub(super) async fn wait_for_schemas(
        &self,
        conn: &mut Conn,
        schemas: &mut SchemaCache,
        open: &mut Option<Open>,
        part: &Part<'_>,
        stats: &ApplyStats,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, RelayError> {
        let (source_dc, limit) = (self.source_dc, self.limits.wait);
        loop {
            match check_schemas(conn, limit, schemas, self.context, part, source_dc).await {
                Ok(()) => {
                    stats.schema_mismatch.store(false, Ordering::Relaxed);
                    return Ok(true);
                }
                Err(RelayError::SchemaMismatch(message)) => {
                    stats.schema_mismatch.store(true, Ordering::Relaxed);
                    tracing::error!(source = source_dc, "{message}");
                    if let Some(before) = open.take() {
                        if part.starts {
                            self.finish(conn, before, stats).await?;
                        } else {
                            rollback(conn, limit, source_dc).await?;
                            record_error(conn, limit, source_dc, &message).await?;
                            return Err(RelayError::Interrupted(message));
                        }
                    }
                    record_error(conn, limit, source_dc, &message).await?;
                    tokio::select! {
                        _ = shutdown.changed() => return Ok(false),
                        _ = tokio::time::sleep(MISMATCH_RETRY) => {}
                    }
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Applies a part in the open local transaction, and commits it once its source
    /// transaction is whole and nothing more is waiting (or the batch is full).
    pub(super) async fn place(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        part: &Part<'_>,
        ready: &mpsc::Receiver<Item<'_>>,
        stats: &ApplyStats,
    ) -> Result<Outcome, RelayError> {
        let current = open.get_or_insert_with(Open::default);
        if let Outcome::WaitingAt(why) = self.apply_part(conn, current, part, stats).await? {
            return Ok(Outcome::WaitingAt(why));
        }
        let batch_full = current.transactions >= self.context.relay.apply_batch;
        if part.end.is_some()
            && (batch_full || ready.is_empty())
            && let Some(done) = open.take()
        {
            self.finish(conn, done, stats).await?;
            if ready.is_empty() {
                stats.lag.caught_up();
            }
        }
        Ok(Outcome::All)
    }

    /// `relay.on_bad_message = "dead_letter"`.
    pub(super) fn dead_letters(&self) -> bool {
        self.context.relay.on_bad_message == OnBadMessage::DeadLetter
    }

    /// A source transaction failed for good, perhaps after some of it was applied: rolls the
    /// local transaction back and ends the applier, which starts again from the stored offset
    /// and, reading `txn` again, records its messages in `relay_dead_letters` instead of
    /// applying them (their bytes were not kept).
    pub(super) async fn dead_letter_again(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        stats: &ApplyStats,
        txn: DeadLettering,
        why: &str,
    ) -> Result<(), RelayError> {
        open.take();
        rollback(conn, self.limits.wait, self.source_dc).await?;
        let gtid = txn.gtid.as_deref().unwrap_or("none");
        let restart = format!(
            "transaction {} ({gtid}) from {} cannot be applied; it goes to \
             {DEAD_LETTERS_TABLE}: {why}",
            txn.seq, self.source_dc
        );
        stats.dead_letter_next(txn);
        Err(RelayError::Interrupted(restart))
    }

    /// Records a message that is no change of this source's in `relay_dead_letters`, on a
    /// connection of its own (opened when first needed), at once. Reading it again (before the
    /// stored offset passes it) records it once.
    pub(super) async fn record_stray(
        &self,
        strays: &mut Option<Conn>,
        offset: i64,
        payload: &[u8],
        why: &str,
        stats: &ApplyStats,
    ) -> Result<(), RelayError> {
        let conn = match strays {
            Some(conn) => conn,
            None => strays.insert(mysql::connect(self.context.url()).await?),
        };
        let limit = self.limits.wait;
        let topic = self.context.topic(self.source_dc);
        tracing::warn!(
            source = self.source_dc,
            topic,
            offset,
            "a message that is no change of {}'s goes to {DEAD_LETTERS_TABLE}: {why}",
            self.source_dc
        );
        let insert = conn.exec_drop(
            format!(
                "INSERT INTO `{DEAD_LETTERS_TABLE}` (topic, kafka_offset, source_dc, message, \
                 reason) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE kafka_offset = kafka_offset"
            ),
            (&topic, offset, self.source_dc, payload, why),
        );
        let recorded = on_target(
            limit,
            || format!("recording {topic} offset {offset} in {DEAD_LETTERS_TABLE}"),
            insert,
        )
        .await;
        if recorded.is_err() {
            // Not reused after a wait that failed: the next stray opens another.
            strays.take();
        }
        recorded?;
        let Some(conn) = strays else {
            return Ok(());
        };
        // 0 rows: recorded before (read again after a restart).
        if conn.affected_rows() == 1 {
            stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Stops applying from the source, visibly (`stopped` is the flag its metric and readiness
    /// show): after a bad message or a definite failure, or at a conflict
    /// (`relay.on_conflict = "stop"`). The open local transaction is rolled back whole.
    pub(super) async fn roll_back_and_stop(
        &self,
        conn: &mut Conn,
        open: &mut Option<Open>,
        stopped: &AtomicBool,
        why: &str,
    ) -> Result<(), RelayError> {
        // Also when a failed commit took it already.
        open.take();
        let limit = self.limits.wait;
        rollback(conn, limit, self.source_dc).await?;
        stop_visibly(conn, limit, stopped, self.source_dc, why).await
    }

    /// Applies a part in the open local transaction, starting it (with the loop marker first)
    /// if it is not yet. When an UPDATE or DELETE of the part does not find its row as it was
    /// at the source, the part is undone to its savepoint and applied again change by change,
    /// each conflict handled as `relay.on_conflict` says (see [`Conflicts`]).
    pub(super) async fn apply_part(
        &self,
        conn: &mut Conn,
        open: &mut Open,
        part: &Part<'_>,
        stats: &ApplyStats,
    ) -> Result<Outcome, RelayError> {
        let mut first = Vec::new();
        if !open.begun {
            // The marker first: it changes the row (the transaction is not applied yet), so it
            // is logged, before any change capture could send back.
            first.push("START TRANSACTION".to_string());
            first.push(gtids_update(self.source_dc, &part.followed));
            open.begun = true;
        }
        if part.starts {
            first.push(SOURCE_SAVEPOINT.to_string());
            open.at_savepoint = open.counts();
        }
        let checks = !part.finders.is_empty();
        if checks {
            first.push(PART_SAVEPOINT.to_string());
        }
        let before = open.counts();
        // The keys before the changes they cover: capture reading the binlog meets them first.
        let keys = self.loop_keys_updates(open.chunks, part.next_offset, &part.keys);
        open.chunks += keys.len();
        first.extend(keys);
        let what = || {
            format!(
                "applying a part of transaction {} from {} ({} changes, {}:{})",
                part.seq, self.source_dc, part.changes, part.position.file, part.position.pos
            )
        };
        if !checks && !stats.sends_each_part(part.next_offset) {
            // Nothing to answer: it goes with the next round trip.
            let statements = first
                .into_iter()
                .chain(part.statements.iter().map(|s| s.sql.clone()));
            for sql in statements {
                open.unsent_bytes += sql.len();
                open.unsent.push(sql);
            }
            if open.unsent_bytes >= self.limits.statement_bytes {
                let statements = open.send_with([]);
                self.send(conn, statements.iter(), what).await?;
            }
            return Ok(self.applied(open, part));
        }
        let unsent = open.send_with(first);
        let statements = unsent.iter().map(|sql| (sql.as_str(), false)).chain(
            part.statements
                .iter()
                .map(|s| (s.sql.as_str(), s.finds_row)),
        );
        let limit = self.limits.wait;
        let all_found = run_batches(conn, statements, self.limits, what).await?;
        if !all_found {
            on_target(limit, what, conn.query_drop(UNDO_PART)).await?;
            open.restore(before);
            if let Some(why) = self.apply_one_by_one(conn, open, part, stats).await? {
                return Ok(Outcome::WaitingAt(why));
            }
        }
        Ok(self.applied(open, part))
    }

    /// Counts `part` as applied in `open`.
    pub(super) fn applied(&self, open: &mut Open, part: &Part<'_>) -> Outcome {
        open.changes += part.changes;
        open.dead_letters += part.dead_letters;
        if part.changes > 0 {
            open.tables.extend(
                part.tables
                    .iter()
                    .map(|t| (t.schema.clone(), t.table.clone())),
            );
        }
        if let Some(end) = &part.end {
            // A transaction dead-lettered is not counted as applied.
            if part.dead_letters == 0 {
                open.transactions += 1;
            }
            open.end = Some((end.clone(), part.followed.clone()));
        }
        Outcome::All
    }

    /// Applies a part's changes one at a time, each conflict recorded and resolved; its keys
    /// follow its changes, since only now is it known which changes wrote their rows. Returns
    /// why applying waits at a conflict (`relay.on_conflict = "stop"`).
    pub(super) async fn apply_one_by_one(
        &self,
        conn: &mut Conn,
        open: &mut Open,
        part: &Part<'_>,
        stats: &ApplyStats,
    ) -> Result<Option<String>, RelayError> {
        let what = || format!("applying transaction {} from {}", part.seq, self.source_dc);
        let mut waiting_at = stats.waiting_at();
        let mut conflicts = Conflicts {
            context: self.context,
            source_dc: self.source_dc,
            stats,
            waiting_at: &mut waiting_at,
            loop_keys: part.keys.clone(),
            resolved: 0,
        };
        let mut finders = part.finders.iter();
        let mut waits = None;
        for statement in &part.statements {
            if !statement.finds_row {
                on_target(self.limits.wait, what, conn.query_drop(&statement.sql)).await?;
                continue;
            }
            let Some(change) = finders.next() else {
                return Err(RelayError::Refused(format!(
                    "{}: fewer changes than statements that find rows",
                    what()
                )));
            };
            waits = conflicts.apply_one(conn, change).await?;
            if waits.is_some() {
                break;
            }
        }
        let (keys, resolved) = (std::mem::take(&mut conflicts.loop_keys), conflicts.resolved);
        stats.wait_at(waiting_at);
        if waits.is_some() {
            return Ok(waits);
        }
        let keys = self.loop_keys_updates(open.chunks, part.next_offset, &keys);
        open.chunks += keys.len();
        self.send(conn, keys.iter(), what).await?;
        open.resolved += resolved;
        Ok(None)
    }

    /// Undoes the parts of a source transaction that stopped short.
    pub(super) async fn undo_to_savepoint(
        &self,
        conn: &mut Conn,
        open: &mut Open,
    ) -> Result<(), RelayError> {
        let statements = open.send_with([UNDO_SOURCE.to_string()]);
        self.send(conn, statements.iter(), || {
            "undoing a transaction that stopped short".to_string()
        })
        .await?;
        open.restore(open.at_savepoint);
        Ok(())
    }

    /// Records the source transactions applied and commits them.
    pub(super) async fn finish(
        &self,
        conn: &mut Conn,
        mut open: Open,
        stats: &ApplyStats,
    ) -> Result<(), RelayError> {
        let Some((end, followed)) = open.end.clone() else {
            // Only parts that were undone: nothing to record.
            return rollback(conn, self.limits.wait, self.source_dc).await;
        };
        let new_tables: Vec<(String, String)> = {
            let recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            open.tables
                .iter()
                .filter(|t| !recorded.contains(*t))
                .cloned()
                .collect()
        };
        let records = applied_tables_update(self.source_dc, &new_tables)
            .into_iter()
            .chain([
                applied_update(self.source_dc, &end, open.transactions, open.changes),
                gtids_update(self.source_dc, &followed),
                "COMMIT".to_string(),
            ]);
        let statements = open.send_with(records);
        let what = || {
            format!(
                "committing transactions up to {} from {} ({}:{})",
                end.seq, self.source_dc, end.position.file, end.position.pos
            )
        };
        self.send(conn, statements.iter(), what).await?;
        // Known once committed: a rolled back record is written again with its changes.
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(new_tables);
        stats.stopped.store(false, Ordering::Relaxed);
        stats.conflict_stopped.store(false, Ordering::Relaxed);
        stats.wait_at(None);
        // Counted once committed: a rolled back resolution is found again on the replay.
        stats.conflicts.fetch_add(open.resolved, Ordering::Relaxed);
        stats
            .dead_letters
            .fetch_add(open.dead_letters, Ordering::Relaxed);
        stats
            .applied_transactions
            .fetch_add(open.transactions as u64, Ordering::Relaxed);
        stats
            .applied_changes
            .fetch_add(open.changes, Ordering::Relaxed);
        stats.next_offset.store(end.next_offset, Ordering::Relaxed);
        stats.apply_time.record(end.read_at.elapsed());
        Ok(())
    }

    /// Records the keys of a part's changes for the `cache` loop filter, in rows of
    /// `relay_loop_keys` numbered on from `chunk`: capture finds them in the binlog with the
    /// changes (see [`super::loop_filter`]). `next_offset` makes every write change its row.
    pub(super) fn loop_keys_updates(
        &self,
        chunk: usize,
        next_offset: i64,
        keys: &[CacheKey],
    ) -> Vec<String> {
        keys.chunks(self.limits.keys_per_chunk)
            .zip(chunk..)
            .map(|(keys, chunk)| {
                let mut sql = format!(
                    "INSERT INTO `{LOOP_KEYS_TABLE}` (source_dc, chunk, next_offset, cache_keys) \
                     VALUES ("
                );
                push_sql_string(&mut sql, self.source_dc);
                sql.push_str(&format!(", {chunk}, {next_offset}, "));
                let bytes = keys.iter().flat_map(|k| *k.as_bytes()).collect();
                sql::push_literal(&mut sql, Some(&Value::Bytes(bytes)));
                sql.push_str(
                    ") ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), \
                     cache_keys = VALUES(cache_keys)",
                );
                sql
            })
            .collect()
    }

    /// Sends statements in round trips of at most the statement limit. The server stops at the
    /// first failing statement, so a failure never reaches COMMIT; the transaction is rolled
    /// back with the connection (dropped with a transient error) or by the caller (after a
    /// definite one).
    pub(super) async fn send<'s>(
        &self,
        conn: &mut Conn,
        statements: impl Iterator<Item = &'s String>,
        what: impl Fn() -> String,
    ) -> Result<(), RelayError> {
        let statements = statements.map(|sql| (sql.as_str(), false));
        run_batches(conn, statements, self.limits, what).await?;
        Ok(())
    }
}

/// Sends `statements` in batches of at most the statement limit (a single statement may be
/// longer), each round trip within the applier's wait limit; whether each that must find its
/// row changed exactly one.
pub(super) async fn run_batches<'a>(
    conn: &mut Conn,
    statements: impl Iterator<Item = (&'a str, bool)>,
    limits: &Limits,
    what: impl Fn() -> String,
) -> Result<bool, DbError> {
    let budget = limits.statement_bytes;
    let mut all_found = true;
    let mut batch = String::new();
    let mut finds = Vec::new();
    for (sql, finds_row) in statements {
        if !batch.is_empty() && batch.len() + sql.len() > budget {
            let sent = run_batch(conn, std::mem::take(&mut batch), &finds);
            all_found &= on_target(limits.wait, &what, sent).await?;
            finds.clear();
        }
        if !batch.is_empty() {
            batch.push_str(";\n");
        }
        batch.push_str(sql);
        finds.push(finds_row);
    }
    if !batch.is_empty() {
        all_found &= on_target(limits.wait, &what, run_batch(conn, batch, &finds)).await?;
    }
    Ok(all_found)
}

/// Runs one multi-statement batch; whether each statement marked in `finds` changed one row
/// (the session leaves CLIENT_FOUND_ROWS off, so an UPDATE counts the rows it changed).
pub(super) async fn run_batch(
    conn: &mut Conn,
    batch: String,
    finds: &[bool],
) -> Result<bool, mysql_async::Error> {
    let mut result = conn.query_iter(batch).await?;
    let mut all_found = true;
    for (i, finds_row) in finds.iter().enumerate() {
        if *finds_row && result.affected_rows() != 1 {
            all_found = false;
        }
        if i + 1 < finds.len() {
            // Each statement's result is an OK packet: reading it moves to the next one's.
            result.collect::<mysql_async::Row>().await?;
        }
    }
    result.drop_result().await?;
    Ok(all_found)
}
