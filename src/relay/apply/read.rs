//! Reading a source's topic: messages to source transactions, placed by GTID, turned into
//! parts with their SQL and held within the applier's memory budget.

use super::*;

/// A table a part changes, with the definition its messages give it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TableRef {
    pub(super) schema: String,
    pub(super) table: String,
    pub(super) definition: Definition,
}

/// The end of a source transaction, read from its last message.
#[derive(Debug, Clone)]
pub(super) struct End {
    pub(super) position: Position,
    pub(super) seq: u64,
    pub(super) commit_ts: u32,
    /// The offset after its last message.
    pub(super) next_offset: i64,
    /// The run of the capture that published it.
    pub(super) run: Option<u64>,
    /// When its last message was read.
    pub(super) read_at: Instant,
}

impl End {
    pub(super) fn of(last: &Change, next_offset: i64) -> End {
        End {
            position: last.position.clone(),
            seq: last.txn.seq,
            commit_ts: last.commit_ts,
            next_offset,
            run: last.stream.run,
            read_at: Instant::now(),
        }
    }
}

/// Consecutive changes of a source transaction, turned into SQL, waiting to be applied.
pub(super) struct Part<'a> {
    /// Its source transaction's sequence number in the topic, and where its first change is.
    pub(super) seq: u64,
    pub(super) position: Position,
    /// The offset after its last message.
    pub(super) next_offset: i64,
    /// The first part of its source transaction.
    pub(super) starts: bool,
    /// Set on the last part of its source transaction.
    pub(super) end: Option<End>,
    /// How far the applier is in the source's stream once the transaction is applied.
    pub(super) followed: Followed,
    pub(super) statements: Vec<sql::Statement>,
    /// The changes whose statements must find their rows (UPDATEs and DELETEs), in order: what
    /// a conflict is applied and recorded from.
    pub(super) finders: Vec<Change>,
    pub(super) tables: Vec<TableRef>,
    /// The changes' keys, for the cache loop filter: recorded in `relay_loop_keys`.
    pub(super) keys: Vec<CacheKey>,
    pub(super) changes: u64,
    /// Messages it records in `relay_dead_letters` instead of applying them.
    pub(super) dead_letters: u64,
    pub(super) commit_ts: u32,
    /// Its share of `relay.apply_memory_bytes`, given back once it is applied.
    pub(super) _held: Held<'a>,
}

impl Part<'_> {
    /// The source transaction it is part of, to dead-letter for `reason`.
    pub(super) fn lettering(&self, reason: String) -> DeadLettering {
        DeadLettering {
            epoch: self.followed.epoch,
            seq: self.seq,
            gtid: self.position.gtid.clone(),
            reason,
        }
    }
}

/// A part's share of `relay.apply_memory_bytes`, shown in `logstamp_relay_apply_held_bytes`
/// while it lives.
pub(super) struct Held<'a> {
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) bytes: u64,
    pub(super) gauge: &'a AtomicU64,
}

impl<'a> Held<'a> {
    pub(super) fn new(permit: OwnedSemaphorePermit, bytes: u32, gauge: &'a AtomicU64) -> Held<'a> {
        let bytes = u64::from(bytes);
        gauge.fetch_add(bytes, Ordering::Relaxed);
        Held {
            _permit: permit,
            bytes,
            gauge,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What the reading half hands the applying half.
pub(super) enum Item<'a> {
    Part(Box<Part<'a>>),
    /// A message that cannot be applied: applying stops, and reading too; with
    /// `relay.on_bad_message = "dead_letter"`, its source transaction (when it is known) is
    /// read again and dead-lettered.
    Bad {
        why: String,
        txn: Option<DeadLettering>,
    },
    /// A message that is no change of this source's (`relay.on_bad_message = "dead_letter"`):
    /// recorded in `relay_dead_letters`, and reading goes on.
    Stray {
        offset: i64,
        payload: Vec<u8>,
        why: String,
    },
    /// The source transaction whose parts were handed on stops short in the topic (capture
    /// restarted while publishing it and publishes it again whole): undo them.
    CutOff,
    /// The source's capture started again at this message: what came before it is settled
    /// (applied, or published again after it), so a restart may begin after it, in its run.
    Resumed {
        next_offset: i64,
        run: Option<u64>,
    },
    /// A transaction that cannot be placed after what was applied: applying stops.
    Unordered {
        why: String,
        commit_ts: u32,
    },
}

pub(super) fn consumer(
    context: &RelayContext,
    remote: &RemoteDc,
    topic: &str,
    offset: i64,
) -> Result<StreamConsumer, RelayError> {
    let brokers = remote.brokers_or(&context.kafka.brokers);
    // An eighth of relay.apply_memory_bytes for what librdkafka fetches ahead; one fetch may
    // go over it, and takes a message as large.
    let fetch_bytes =
        (context.relay.apply_memory_bytes / 8).clamp(MIN_MESSAGE_BYTES, MOST_FETCH_BYTES);
    // A fetch's size counts the topic's bytes, which capture compresses (lz4): a fetch of the
    // whole eighth grew the applier's peak by 69 MB over a 16 MiB setting on Apache Kafka (22
    // to 24 MB asking for a sixteenth of it). But it must hold the largest message: with less,
    // a 5.6 MB message was never delivered (tests/relay_sizes.rs).
    let partition_fetch_bytes = (fetch_bytes / FETCH_EXPANSION)
        .max(context.relay.max_message_bytes)
        .min(fetch_bytes);
    let consumer: StreamConsumer = context
        .kafka_config(brokers)
        .set(
            "group.id",
            format!("{}-from-{}", context.client_name(), remote.dc),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A stored offset the topic no longer has means changes were deleted unapplied: stop.
        .set("auto.offset.reset", "error")
        // Caught up, a fetch waits this long for new messages; brokers answer as soon as one
        // arrives, but a short wait bounds the delay where they do not.
        .set(
            "fetch.wait.max.ms",
            context.relay.fetch_wait.as_millis().to_string(),
        )
        .set(
            "queued.max.messages.kbytes",
            (fetch_bytes / 1024).to_string(),
        )
        .set("fetch.queue.backoff.ms", FULL_PREFETCH_BACKOFF_MS)
        .set(
            "max.partition.fetch.bytes",
            partition_fetch_bytes.to_string(),
        )
        .create_redacted()
        .map_err(RelayError::kafka("creating the Kafka consumer"))?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    consumer
        .assign(&assignment)
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    Ok(consumer)
}

/// The source transaction being read.
pub(super) struct Reading {
    pub(super) seq: u64,
    pub(super) gtid: Option<String>,
    pub(super) next_index: u32,
    /// Where the source's stream is once it is applied; `None` when it is skipped.
    pub(super) apply: Option<Followed>,
    /// Some of its parts were handed on.
    pub(super) handed_on: bool,
    /// Its messages not handed on yet, and their bytes.
    pub(super) gathered: Vec<Change>,
    pub(super) gathered_bytes: usize,
    /// Why its messages go to `relay_dead_letters` instead of being applied, if they do.
    pub(super) lettered: Option<String>,
}

impl Reading {
    /// It is the transaction `lettering` names.
    pub(super) fn is(&self, lettering: &DeadLettering, epoch: u64) -> bool {
        lettering.epoch == epoch && lettering.seq == self.seq && lettering.gtid == self.gtid
    }

    /// Its source transaction, to dead-letter for `reason`.
    pub(super) fn lettering(&self, epoch: u64, reason: String) -> DeadLettering {
        DeadLettering {
            epoch,
            seq: self.seq,
            gtid: self.gtid.clone(),
            reason,
        }
    }

    pub(super) fn continued_by(&self, change: &Change) -> bool {
        change.txn.index == self.next_index
            && change.txn.seq == self.seq
            && change.position.gtid == self.gtid
    }
}

/// The reading half of an applier.
pub(super) struct Reader<'a> {
    pub(super) topic: &'a str,
    pub(super) remote: &'a RemoteDc,
    pub(super) stats: &'a ApplyStats,
    pub(super) limits: &'a Limits,
    /// The cache loop filter is on: parts carry their changes' keys.
    pub(super) cache: bool,
    /// `relay.on_bad_message = "dead_letter"`.
    pub(super) dead_letter: bool,
    /// Checks each message's signature, when the source has keys here.
    pub(super) verifier: Option<Verifier>,
    /// What parts waiting to be applied may hold.
    pub(super) held: Arc<Semaphore>,
    /// The text filters of the log tables in `database` (the relay's), kept with their rows.
    pub(super) text_filters: Option<&'a RelayedTextFilters>,
    pub(super) database: &'a str,
    pub(super) ready: mpsc::Sender<Item<'a>>,
}

impl<'a> Reader<'a> {
    /// Reads the topic from the stored offset, skips the transactions already applied, and
    /// hands the rest on in parts with their SQL. After a transaction that cannot be placed it
    /// hands on nothing more until the source's stream starts anew (a new epoch). Ends at
    /// shutdown, or when nobody applies; its end (dropping `ready`) ends the applying half.
    pub(super) async fn read(
        self,
        consumer: &StreamConsumer,
        applied: Applied,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), RelayError> {
        let (topic, remote) = (self.topic, self.remote);
        // How far the transactions handed on whole go, and the offset after the last message
        // read.
        let mut followed = applied.followed;
        let mut consumed = applied.next_offset;
        // The run of the source's capture followed: its latest resume message's offset.
        let mut run = applied.run;
        let mut stopped = false;
        let mut reading: Option<Reading> = None;
        let mut contracts = Contracts::default();
        // A transaction that failed for good before this applier started again, to dead-letter.
        let mut lettering = self.stats.take_dead_lettering();
        loop {
            let message = tokio::select! {
                _ = shutdown.changed() => return Ok(()),
                message = consumer.recv() => message,
            };
            let message = match message {
                Ok(message) => message,
                Err(KafkaError::MessageConsumption(
                    code @ (RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset),
                )) => {
                    return Err(RelayError::Refused(format!(
                        "{topic} no longer has offset {consumed} ({code}): changes from {} were \
                         deleted before they were applied; copy the relayed tables anew and \
                         reset its row in relay_applied",
                        remote.dc
                    )));
                }
                Err(e) => {
                    // librdkafka reconnects by itself; say why it is slow.
                    tracing::warn!(topic, "reading from Kafka: {e}");
                    continue;
                }
            };
            if let Some(created) = message.timestamp().to_millis() {
                let millis = Utc::now().timestamp_millis().saturating_sub(created);
                let millis = u64::try_from(millis).unwrap_or(0);
                self.stats
                    .kafka_transit
                    .record(Duration::from_millis(millis));
            }
            let offset = message.offset();
            let payload = message.payload().unwrap_or_default();
            let refused = self.verifier.as_ref().and_then(|verifier| {
                let (covered, signatures) = Covered::of(&message);
                verifier.check(&covered, &signatures, Utc::now()).err()
            });
            let parsed = if let Some(refusal) = refused {
                self.refuse(offset, payload, &refusal)
            } else {
                match Resume::from_json(payload) {
                    Some(Ok(resume)) if resume.dc == remote.dc && resume.precedes(run) => {
                        // Published before the run followed: it starts nothing.
                        consumed = offset + 1;
                        self.stats
                            .superseded_messages
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            source = remote.dc,
                            offset,
                            run,
                            "passing over a resume message of {} published before the run followed \
                         (a copy, or one of a capture that stopped that landed late)",
                            remote.dc
                        );
                        continue;
                    }
                    Some(Ok(resume)) if resume.dc == remote.dc => {
                        // The source's capture started again: from here on only its run counts,
                        // and a transaction cut off before this comes again whole.
                        consumed = offset + 1;
                        run = u64::try_from(offset).ok();
                        tracing::info!(
                            source = remote.dc,
                            offset,
                            server_id = resume.server_id,
                            "the capture of {} resumed",
                            remote.dc
                        );
                        if let Some(cut) = reading.take()
                            && cut.handed_on
                            && self.ready.send(Item::CutOff).await.is_err()
                        {
                            return Ok(());
                        }
                        let resumed = Item::Resumed {
                            next_offset: consumed,
                            run,
                        };
                        if self.ready.send(resumed).await.is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    Some(Ok(resume)) => Err(format!(
                        "holds a resume message from {}, not {}",
                        resume.dc, remote.dc
                    )),
                    Some(Err(e)) => Err(e.to_string()),
                    None => match Change::from_json_with(payload, &mut contracts) {
                        Ok(change) if change.dc == remote.dc => Ok(change),
                        Ok(change) => Err(format!(
                            "holds a change from {}, not {}",
                            change.dc, remote.dc
                        )),
                        Err(e) => Err(e.to_string()),
                    },
                }
            };
            let change = match parsed {
                Ok(change) => change,
                // Not part of any transaction of this source's: the transaction being read,
                // if any, goes on after it.
                Err(why) if self.dead_letter => {
                    consumed = offset + 1;
                    let payload = payload.to_vec();
                    let stray = Item::Stray {
                        offset,
                        payload,
                        why,
                    };
                    if self.ready.send(stray).await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
                Err(why) => {
                    let why = format!("{topic} offset {offset}: {why}");
                    return halt(&self.ready, why, None, shutdown).await;
                }
            };
            consumed = offset + 1;
            if change.stream.run != run {
                // Published by a capture that stopped, landed after the next one resumed: that
                // one resumed without it, as every applier does.
                let count = self
                    .stats
                    .superseded_messages
                    .fetch_add(1, Ordering::Relaxed);
                if count == 0 || change.txn.index == 0 {
                    tracing::warn!(
                        source = remote.dc,
                        offset,
                        seq = change.txn.seq,
                        gtid = change.position.gtid.as_deref().unwrap_or("none"),
                        "passing over a message of a capture of {} that stopped: it landed after \
                         the next one resumed",
                        remote.dc
                    );
                }
                continue;
            }
            let continues = reading.as_ref().is_some_and(|r| r.continued_by(&change));
            if !continues && let Some(cut) = reading.take() {
                // The rest of it comes again, whole, from its first message.
                if cut.handed_on {
                    tracing::warn!(
                        seq = cut.seq,
                        "a transaction's messages stopped short; it was published again"
                    );
                    if self.ready.send(Item::CutOff).await.is_err() {
                        return Ok(());
                    }
                }
            }
            if change.txn.index == 0 {
                let first = &change;
                let gtid = first.position.gtid.as_deref().unwrap_or("none");
                let apply = match order(&followed, &remote.dc, first.position.gtid(), &first.stream)
                {
                    Verdict::Apply(next) if !stopped || next.epoch > followed.epoch => {
                        if stopped {
                            stopped = false;
                            tracing::info!(
                                source = remote.dc,
                                epoch = next.epoch,
                                "the stream of {} was started anew: applying goes on",
                                remote.dc
                            );
                        }
                        Some(next)
                    }
                    // Stopped: only a new epoch goes on.
                    Verdict::Apply(_) => None,
                    Verdict::Applied => {
                        // Published again by a capture that restarted before its checkpoint,
                        // or by another server of the source after a failover.
                        self.stats
                            .skipped_transactions
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(gtid, seq = first.txn.seq, "already applied");
                        None
                    }
                    Verdict::Unordered(why) => {
                        if !stopped {
                            stopped = true;
                            let item = Item::Unordered {
                                why: format!(
                                    "{topic} offset {offset}, transaction {} ({gtid}): {why}",
                                    first.txn.seq
                                ),
                                commit_ts: first.commit_ts,
                            };
                            if self.ready.send(item).await.is_err() {
                                return Ok(());
                            }
                        }
                        None
                    }
                };
                let mut next = Reading {
                    seq: first.txn.seq,
                    gtid: first.position.gtid.clone(),
                    next_index: 0,
                    apply,
                    handed_on: false,
                    gathered: Vec::new(),
                    gathered_bytes: 0,
                    lettered: None,
                };
                if let Some(l) = lettering.take_if(|l| next.is(l, first.stream.epoch)) {
                    tracing::warn!(
                        source = remote.dc,
                        seq = next.seq,
                        gtid,
                        "dead-lettering a transaction: {}",
                        l.reason
                    );
                    next.lettered = Some(l.reason);
                }
                reading = Some(next);
            }
            // The rest of a transaction whose start was not read: it comes again whole.
            let Some(current) = reading.as_mut() else {
                continue;
            };
            current.next_index += 1;
            let last = change.txn.is_last();
            let Some(next) = current.apply.clone() else {
                if last {
                    reading = None;
                }
                continue;
            };
            let part = if let Some(reason) = &current.lettered {
                let letter = Letter {
                    change: &change,
                    offset,
                    payload,
                    reason,
                };
                self.dead_letter_part(letter, next.clone(), last, consumed)
                    .await
            } else {
                current.gathered_bytes += payload.len();
                current.gathered.push(change);
                if !last && current.gathered_bytes < self.limits.part_bytes {
                    continue;
                }
                self.part(current, next.clone(), last, consumed).await
            };
            let part = match part {
                Ok(part) => part,
                Err(e) if e.is_transient() => return Err(e),
                // A statement that cannot be written or sent: the same messages fail again.
                Err(e) => {
                    let why = e.to_string();
                    let txn = (self.dead_letter && current.lettered.is_none())
                        .then(|| current.lettering(next.epoch, why.clone()));
                    return halt(&self.ready, why, txn, shutdown).await;
                }
            };
            current.handed_on = true;
            if last {
                followed = next;
                reading = None;
            }
            if self.ready.send(Item::Part(Box::new(part))).await.is_err() {
                // The applying half stopped; its result says why.
                return Ok(());
            }
        }
    }

    /// Counts and logs a message whose signature is refused; returns why it is not applied.
    fn refuse(&self, offset: i64, payload: &[u8], refusal: &Refusal) -> Result<Change, String> {
        self.stats
            .refused_signatures
            .fetch_add(1, Ordering::Relaxed);
        let claimed = claimed_dc(payload).map_or_else(
            || "no data centre".to_string(),
            |dc| dc.escape_debug().to_string(),
        );
        tracing::error!(
            source = self.remote.dc,
            topic = self.topic,
            offset,
            claimed_dc = claimed,
            "refusing the message at offset {offset} of {}, which claims to come from {claimed}: \
             {refusal}",
            self.topic
        );
        Err(format!("signature refused (claims {claimed}): {refusal}"))
    }

    /// Turns the messages gathered into a part, once parts waiting leave room for it.
    pub(super) async fn part(
        &self,
        current: &mut Reading,
        followed: Followed,
        last: bool,
        next_offset: i64,
    ) -> Result<Part<'a>, RelayError> {
        let changes = std::mem::take(&mut current.gathered);
        current.gathered_bytes = 0;
        let (first, newest) = match (changes.first(), changes.last()) {
            (Some(first), Some(newest)) => (first, newest),
            _ => return Err(RelayError::Refused("an empty part".into())),
        };
        let refused = |e: String| {
            RelayError::Refused(format!(
                "{} transaction {} ({}, {}:{}): {e}",
                self.topic,
                newest.txn.seq,
                newest.position.gtid.as_deref().unwrap_or("none"),
                newest.position.file,
                newest.position.pos
            ))
        };
        let rows: Vec<&RowChange> = changes.iter().map(|c| &c.row).collect();
        let mut statements =
            sql::statements(&rows, self.limits.statement_bytes).map_err(refused)?;
        if let Some(filters) = self.text_filters {
            let adds = filters.statements(self.database, &rows, self.limits.statement_bytes);
            statements.extend(adds.map_err(refused)?);
        }
        if let Some(large) = statements
            .iter()
            .find(|s| s.sql.len() > self.limits.packet_bytes)
        {
            return Err(refused(format!(
                "a statement of {} bytes does not fit the server's max_allowed_packet; raise \
                 max_allowed_packet here above {}",
                large.sql.len(),
                large.sql.len() + PACKET_OVERHEAD
            )));
        }
        let mut tables: Vec<TableRef> = Vec::new();
        for row in &rows {
            let table = TableRef {
                schema: row.schema.clone(),
                table: row.table.clone(),
                definition: Definition {
                    kinds: row.columns.clone(),
                    contract: row.contract.clone(),
                },
            };
            if !tables.contains(&table) {
                tables.push(table);
            }
        }
        let keys: Vec<CacheKey> = if self.cache {
            rows.iter().map(|row| CacheKey::of(row)).collect()
        } else {
            Vec::new()
        };
        // The changes kept for their conflicts take about what their statements do.
        let finding: usize = statements
            .iter()
            .filter(|s| s.finds_row)
            .map(|s| s.sql.len())
            .sum();
        let bytes: usize = statements.iter().map(|s| s.sql.len()).sum::<usize>()
            + finding
            + keys.len() * std::mem::size_of::<CacheKey>();
        let held = self.hold(bytes).await?;
        let (seq, position, commit_ts) = (first.txn.seq, first.position.clone(), first.commit_ts);
        let starts = first.txn.index == 0;
        let end = last.then(|| End::of(newest, next_offset));
        let count = changes.len() as u64;
        let finders: Vec<Change> = changes.into_iter().filter(|c| finds_row(&c.row)).collect();
        if finders.len() != statements.iter().filter(|s| s.finds_row).count() {
            return Err(RelayError::Refused(format!(
                "{} transaction {seq}: the changes that must find their rows do not match their \
                 statements",
                self.topic
            )));
        }
        Ok(Part {
            seq,
            position,
            next_offset,
            starts,
            end,
            followed,
            statements,
            finders,
            tables,
            keys,
            changes: count,
            dead_letters: 0,
            commit_ts,
            _held: held,
        })
    }

    /// A part that records one message of a transaction being dead-lettered in
    /// `relay_dead_letters`, in the local transaction, instead of applying it. Reading it again
    /// (a replay after a crash) records it once.
    pub(super) async fn dead_letter_part(
        &self,
        letter: Letter<'_>,
        followed: Followed,
        last: bool,
        next_offset: i64,
    ) -> Result<Part<'a>, RelayError> {
        let change = letter.change;
        let mut sql = format!(
            "INSERT INTO `{DEAD_LETTERS_TABLE}` (topic, kafka_offset, source_dc, source_gtid, \
             source_seq, message, reason) VALUES ("
        );
        push_sql_string(&mut sql, self.topic);
        sql.push_str(&format!(", {}, ", letter.offset));
        push_sql_string(&mut sql, &change.dc);
        sql.push_str(", ");
        push_sql_string(&mut sql, change.position.gtid.as_deref().unwrap_or(""));
        sql.push_str(&format!(", {}, ", change.txn.seq));
        sql::push_literal(&mut sql, Some(&Value::Bytes(letter.payload.to_vec())));
        sql.push_str(", ");
        push_sql_string(&mut sql, letter.reason);
        sql.push_str(") ON DUPLICATE KEY UPDATE kafka_offset = kafka_offset");
        if sql.len() > self.limits.packet_bytes {
            return Err(RelayError::Refused(format!(
                "{} offset {}: recording it in {DEAD_LETTERS_TABLE} takes a statement of {} \
                 bytes, more than the server's max_allowed_packet; raise max_allowed_packet \
                 here above {}",
                self.topic,
                letter.offset,
                sql.len(),
                sql.len() + PACKET_OVERHEAD
            )));
        }
        let held = self.hold(sql.len()).await?;
        Ok(Part {
            seq: change.txn.seq,
            position: change.position.clone(),
            next_offset,
            starts: change.txn.index == 0,
            end: last.then(|| End::of(change, next_offset)),
            followed,
            statements: vec![sql::Statement {
                sql,
                finds_row: false,
            }],
            finders: Vec::new(),
            tables: Vec::new(),
            keys: Vec::new(),
            changes: 0,
            dead_letters: 1,
            commit_ts: change.commit_ts,
            _held: held,
        })
    }

    /// Waits until the parts waiting leave room for `bytes` more, and takes them.
    pub(super) async fn hold(&self, bytes: usize) -> Result<Held<'a>, RelayError> {
        let share = u32::try_from(bytes.clamp(1, self.limits.held_bytes)).unwrap_or(u32::MAX);
        let permit = self
            .held
            .clone()
            .acquire_many_owned(share)
            .await
            .map_err(|_| RelayError::Refused("the applier's memory budget was closed".into()))?;
        Ok(Held::new(permit, share, &self.stats.held_bytes))
    }
}

/// A message to record in `relay_dead_letters`, and why.
pub(super) struct Letter<'m> {
    pub(super) change: &'m Change,
    pub(super) offset: i64,
    pub(super) payload: &'m [u8],
    pub(super) reason: &'m str,
}

/// Whether the statement of `change` must find its row (see [`sql::statement`]): an UPDATE that
/// changes something, or a DELETE.
pub(super) fn finds_row(change: &RowChange) -> bool {
    match change.kind {
        ChangeKind::Insert => false,
        ChangeKind::Update => !change.values.is_empty(),
        ChangeKind::Delete => true,
    }
}

/// Hands on a message that cannot be applied, then reads nothing more until shutdown: the
/// applier stops there, visibly, and capture and the other appliers go on.
pub(super) async fn halt(
    ready: &mpsc::Sender<Item<'_>>,
    why: String,
    txn: Option<DeadLettering>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    if ready.send(Item::Bad { why, txn }).await.is_ok() {
        // Ends when shutdown is set or its sender dropped.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::change::TxnRef;

    fn message(seq: u64, index: u32, gtid: &str) -> Change {
        let position = Position {
            file: "bin.000001".into(),
            pos: 100 + u64::from(index),
            gtid: Some(gtid.into()),
        };
        let txn = TxnRef {
            seq,
            index,
            last: false,
        };
        Change::test_delete(position, txn, Default::default())
    }

    fn reading(seq: u64, next_index: u32, gtid: &str) -> Reading {
        Reading {
            seq,
            gtid: Some(gtid.into()),
            next_index,
            apply: None,
            handed_on: true,
            gathered: Vec::new(),
            gathered_bytes: 0,
            lettered: None,
        }
    }

    #[test]
    fn a_transaction_to_dead_letter_is_known_by_epoch_sequence_and_gtid() {
        let r = reading(4, 0, "0-1-9");
        let letter = r.lettering(2, "refused".into());
        assert!(r.is(&letter, 2));
        // Another epoch (the stream started anew) or GTID is another transaction.
        assert!(!r.is(&letter, 3));
        assert!(!reading(4, 0, "0-2-9").is(&letter, 2));
        assert!(!reading(5, 0, "0-1-9").is(&letter, 2));
    }

    #[test]
    fn a_transaction_goes_on_with_its_next_message_only() {
        let r = reading(4, 2, "0-1-9");
        // Positions differ between messages: capture publishes as it reads.
        assert!(r.continued_by(&message(4, 2, "0-1-9")));
        // Published again from its start, a gap, another transaction, another GTID.
        for other in [
            message(4, 0, "0-1-9"),
            message(4, 3, "0-1-9"),
            message(5, 2, "0-1-9"),
            message(4, 2, "0-2-9"),
        ] {
            assert!(!r.continued_by(&other), "{:?}", other.txn);
        }
    }
}
