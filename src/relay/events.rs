//! Binlog events to transactions: one handler per event kind, no I/O.
//!
//! A transaction's row changes are handed on one rows event at a time, as they are decoded, and
//! its end comes after them: capture holds no more of a transaction than one rows event, whatever
//! its size.
//!
//! MariaDB writes every event group (transaction or DDL statement) as a GTID event, the group's
//! events, and an end: an XID event for a transactional engine, a QUERY `COMMIT` otherwise, or
//! nothing for a standalone group (the GTID's `FL_STANDALONE`), whose single QUERY is the whole
//! group. Rows events name their table by the ID of the TABLE_MAP event just before them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};

use super::change::{ChangeKind, Position, Row, RowChange, Value};
use super::context::{
    APPLIED_GTIDS_TABLE, APPLIED_TABLE, LOOP_KEYS_TABLE, RelayContext, RelayError, WATERMARKS_TABLE,
};
use super::decode::{Image, decode_images};
use super::gtid::{self, GtidEvent, GtidState};
use super::loop_filter::CacheKey;
use super::table::{Charsets, TableSchema};

/// Header flag MariaDB sets on the events of a session with `skip_replication=1`.
pub const SKIP_REPLICATION_FLAG: u16 = 0x8000;

/// The end of a committed event group, after its changes were handed on (see [`Rows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// Where the group ends in the binlog, and its GTID.
    pub end: Position,
    pub gtid: gtid::Gtid,
    /// The GTID state before this group: where a reader starts to read it again.
    pub gtid_before: GtidState,
    /// The GTID state once this group is applied: where a reader resumes after it.
    pub gtid_state: GtidState,
    /// The source's commit time, Unix seconds.
    pub commit_ts: u32,
    /// The group wrote to the relay's marker tables.
    pub has_marker: bool,
    /// Events of the group carried the skip_replication flag.
    pub skip_flagged: bool,
}

/// The relayed changes of one rows event of an open event group.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    /// How far the group is read, and its GTID.
    pub at: Position,
    pub gtid: gtid::Gtid,
    /// The GTID state before the group.
    pub gtid_before: GtidState,
    /// The event's time, Unix seconds.
    pub timestamp: u32,
    pub changes: Vec<RowChange>,
    /// The group wrote to the relay's marker tables before these changes.
    pub has_marker: bool,
    /// Events of the group up to these carried the skip_replication flag.
    pub skip_flagged: bool,
    /// The keys an applier recorded in this event, of changes it applies in the group (`cache`
    /// filter); such an event has no changes.
    pub loop_keys: Vec<CacheKey>,
    /// The snapshot watermark this event wrote (see [`super::snapshot`]); such an event has no
    /// changes of its own.
    pub watermark: Option<u64>,
}

/// What an event tells capture.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Changes of the open event group.
    Rows(Rows),
    /// The end of a committed event group.
    Transaction(Transaction),
    /// The server has sent everything up to this position and waits for more (a heartbeat).
    /// Groups it left out (flagged skip_replication) lie before it.
    Idle(Position),
}

/// What the stream knows about a table ID.
#[derive(Debug, Clone)]
enum TableEntry {
    Relayed(Arc<TableSchema>),
    Marker,
    /// Where the appliers record the keys of what they apply.
    LoopKeys(Arc<TableSchema>),
    /// Where the snapshot writes its watermarks.
    Watermark(Arc<TableSchema>),
    Other,
}

#[derive(Debug)]
struct OpenGroup {
    gtid: gtid::Gtid,
    standalone: bool,
    xa: bool,
    has_marker: bool,
    skip_flagged: bool,
}

/// Turns the event stream of one binlog connection into transactions.
#[derive(Debug)]
pub struct EventHandler {
    context: RelayContext,
    charsets: Charsets,
    /// The server writes CRC32 checksums: until the first FORMAT_DESCRIPTION event tells the
    /// reader so, the checksum stays glued to the end of the (fake) ROTATE event's file name.
    checksums: bool,
    seen_format: bool,
    file: String,
    gtid_state: GtidState,
    tables: HashMap<u64, TableEntry>,
    open: Option<OpenGroup>,
}

impl EventHandler {
    pub fn new(
        context: RelayContext,
        charsets: Charsets,
        checksums: bool,
        file: String,
        gtid_state: GtidState,
    ) -> EventHandler {
        EventHandler {
            context,
            charsets,
            checksums,
            seen_format: false,
            file,
            gtid_state,
            tables: HashMap::new(),
            open: None,
        }
    }

    /// Handles one event; returns the changes it made, the transaction it completed, or the
    /// position a heartbeat vouches for.
    pub fn handle(&mut self, event: &Event) -> Result<Option<Step>, RelayError> {
        Ok(self.handle_event(event)?.or_else(|| {
            let heartbeat = event.header().event_type_raw() == EventType::HEARTBEAT_EVENT as u8;
            // The server sends heartbeats only between event groups, but be sure.
            (heartbeat && self.open.is_none()).then(|| {
                Step::Idle(Position {
                    file: self.file.clone(),
                    pos: u64::from(event.header().log_pos()),
                    gtid: None,
                })
            })
        }))
    }

    fn handle_event(&mut self, event: &Event) -> Result<Option<Step>, RelayError> {
        let header = event.header();
        if header.flags_raw() & SKIP_REPLICATION_FLAG != 0
            && let Some(open) = &mut self.open
        {
            open.skip_flagged = true;
        }
        let kind = header.event_type_raw();
        match kind {
            gtid::GTID_EVENT => return self.on_gtid(event).map(|()| None),
            gtid::GTID_LIST_EVENT => return self.on_gtid_list(event).map(|()| None),
            k if gtid::COMPRESSED_EVENTS.contains(&k) => {
                return Err(RelayError::Refused(
                    "the binlog holds compressed events: the relay needs log_bin_compress=OFF"
                        .into(),
                ));
            }
            _ => {}
        }
        if kind == EventType::FORMAT_DESCRIPTION_EVENT as u8 {
            self.seen_format = true;
        }
        let data = event.read_data().map_err(|e| {
            RelayError::Refused(format!("cannot decode a binlog event of type {kind}: {e}"))
        })?;
        match data {
            Some(EventData::RotateEvent(rotate)) => self.on_rotate(rotate.name_raw()),
            Some(EventData::TableMapEvent(tme)) => self.on_table_map(&tme),
            Some(EventData::RowsEvent(rows)) => {
                return self.on_rows(&rows, header.log_pos(), header.timestamp());
            }
            Some(EventData::XidEvent(_)) => {
                return Ok(self
                    .close(header.log_pos(), header.timestamp())
                    .map(Step::Transaction));
            }
            Some(EventData::QueryEvent(query)) => {
                return Ok(self
                    .on_query(
                        &query.schema(),
                        &query.query(),
                        header.log_pos(),
                        header.timestamp(),
                    )
                    .map(Step::Transaction));
            }
            Some(EventData::XaPrepareLogEvent(_)) => {
                return Ok(self
                    .close(header.log_pos(), header.timestamp())
                    .map(Step::Transaction));
            }
            Some(EventData::IncidentEvent(incident)) => Err(RelayError::Refused(format!(
                "the source logged an incident ({:?}): its binlog may miss changes, so the relay \
                 stops rather than diverge",
                incident.message()
            ))),
            // Heartbeats, format descriptions, checkpoints, annotations and the rest carry
            // nothing to relay.
            _ => Ok(()),
        }
        .map(|()| None)
    }

    fn on_rotate(&mut self, name: &[u8]) -> Result<(), RelayError> {
        let name = if self.checksums && !self.seen_format && name.len() > 4 {
            &name[..name.len() - 4]
        } else {
            name
        };
        self.file = String::from_utf8(name.to_vec()).map_err(|_| {
            RelayError::Refused("a ROTATE event names a file that is not UTF-8".into())
        })?;
        // Table IDs are only valid within a file.
        self.tables.clear();
        Ok(())
    }

    fn on_gtid(&mut self, event: &Event) -> Result<(), RelayError> {
        let parsed =
            GtidEvent::parse(event.data()).map_err(|e| RelayError::Refused(e.to_string()))?;
        if let Some(open) = self.open.take() {
            tracing::warn!(gtid = %open.gtid, "an event group ended without XID or COMMIT; dropped");
        }
        self.open = Some(OpenGroup {
            gtid: parsed.gtid(event.header().server_id()),
            standalone: parsed.is_standalone(),
            xa: parsed.is_xa(),
            has_marker: false,
            skip_flagged: event.header().flags_raw() & SKIP_REPLICATION_FLAG != 0,
        });
        Ok(())
    }

    fn on_gtid_list(&mut self, event: &Event) -> Result<(), RelayError> {
        for gtid in
            gtid::parse_gtid_list(event.data()).map_err(|e| RelayError::Refused(e.to_string()))?
        {
            self.gtid_state.update(gtid);
        }
        Ok(())
    }

    fn on_table_map(&mut self, tme: &TableMapEvent<'_>) -> Result<(), RelayError> {
        let (schema, table) = (tme.database_name(), tme.table_name());
        let parse = || {
            TableSchema::from_table_map(tme, &self.charsets)
                .map(Arc::new)
                .map_err(RelayError::Refused)
        };
        let state = schema == self.context.state_database.as_str();
        let entry = if state && (table == APPLIED_TABLE || table == APPLIED_GTIDS_TABLE) {
            TableEntry::Marker
        } else if state && table == LOOP_KEYS_TABLE {
            TableEntry::LoopKeys(parse()?)
        } else if state && table == WATERMARKS_TABLE {
            TableEntry::Watermark(parse()?)
        } else if self.context.is_relayed(&schema, &table) {
            TableEntry::Relayed(parse()?)
        } else {
            TableEntry::Other
        };
        self.tables.insert(tme.table_id(), entry);
        Ok(())
    }

    /// The relayed changes of a rows event, handed on at once.
    fn on_rows(
        &mut self,
        rows: &RowsEventData<'_>,
        end: u32,
        timestamp: u32,
    ) -> Result<Option<Step>, RelayError> {
        let entry = self.tables.get(&rows.table_id()).cloned();
        let records_keys = matches!(entry, Some(TableEntry::LoopKeys(_)));
        let watermarks = matches!(entry, Some(TableEntry::Watermark(_)));
        let Some(open) = &mut self.open else {
            return Err(RelayError::Refused(
                "a rows event outside an event group: the binlog reader lost its place".into(),
            ));
        };
        let table = match entry {
            Some(TableEntry::Relayed(table)) => table,
            Some(TableEntry::Marker) => {
                open.has_marker = true;
                return Ok(None);
            }
            Some(TableEntry::LoopKeys(table) | TableEntry::Watermark(table)) => table,
            Some(TableEntry::Other) => return Ok(None),
            None => {
                return Err(RelayError::Refused(format!(
                    "a rows event for table ID {} without its TABLE_MAP event",
                    rows.table_id()
                )));
            }
        };
        // A prepared XA group is logged at XA PREPARE and committed or rolled back by a later
        // group: its changes cannot be relayed in order with the rest.
        if open.xa {
            return Err(RelayError::Refused(format!(
                "the XA transaction {} changed relayed tables: the relay does not follow XA",
                open.gtid
            )));
        }
        let kind = match rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => {
                ChangeKind::Insert
            }
            RowsEventData::UpdateRowsEventV1(_) | RowsEventData::UpdateRowsEvent(_) => {
                ChangeKind::Update
            }
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => {
                ChangeKind::Delete
            }
            RowsEventData::PartialUpdateRowsEvent(_) => {
                return Err(RelayError::Refused(
                    "partial JSON updates in the binlog: the relay needs binlog_row_value_options empty"
                        .into(),
                ));
            }
        };
        let columns = table.columns.len();
        let before: Vec<bool> = rows
            .columns_before_image()
            .map(|b| b.iter().by_vals().take(columns).collect())
            .unwrap_or_default();
        let after: Vec<bool> = rows
            .columns_after_image()
            .map(|b| b.iter().by_vals().take(columns).collect())
            .unwrap_or_default();
        let present: Vec<&[bool]> = match kind {
            ChangeKind::Insert => vec![&after],
            ChangeKind::Delete => vec![&before],
            ChangeKind::Update => vec![&before, &after],
        };
        let images = decode_images(&table, &present, rows.rows_data())
            .map_err(|e| RelayError::Refused(e.to_string()))?;
        let mut watermark = None;
        let (changes, loop_keys) = if records_keys {
            (Vec::new(), written_keys(&table, kind, &images)?)
        } else if watermarks {
            watermark = written_mark(&table, kind, &images);
            (Vec::new(), Vec::new())
        } else {
            (changes_of(&table, kind, images), Vec::new())
        };
        if changes.is_empty() && loop_keys.is_empty() && watermark.is_none() {
            return Ok(None);
        }
        Ok(Some(Step::Rows(Rows {
            at: Position {
                file: self.file.clone(),
                pos: u64::from(end),
                gtid: Some(open.gtid.to_string()),
            },
            gtid: open.gtid,
            gtid_before: self.gtid_state.clone(),
            timestamp,
            changes,
            has_marker: open.has_marker,
            skip_flagged: open.skip_flagged,
            loop_keys,
            watermark,
        })))
    }

    fn on_query(
        &mut self,
        schema: &str,
        query: &str,
        end: u32,
        timestamp: u32,
    ) -> Option<Transaction> {
        let statement = query.trim_start();
        let word = statement
            .split(|c: char| c.is_whitespace() || c == ';')
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        match word.as_str() {
            "BEGIN" | "SAVEPOINT" => return None,
            // A group that changed non-transactional tables ends with COMMIT; one rolled back
            // still changed them, so it is relayed the same way.
            "COMMIT" | "ROLLBACK" if !statement.to_ascii_uppercase().starts_with("ROLLBACK TO") => {
                return self.close(end, timestamp);
            }
            "ROLLBACK" => return None,
            // XA START/END inside a prepared group; XA COMMIT/ROLLBACK is a standalone group.
            "XA" => {}
            _ => {
                // DDL is not relayed: its order against other data centres' writes cannot be
                // kept, so schema changes are rolled out by hand in every data centre, and an
                // applier refuses a table whose columns differ (see apply).
                self.context
                    .stats
                    .capture
                    .ddl_skipped
                    .fetch_add(1, Ordering::Relaxed);
                let shown: String = statement.chars().take(200).collect();
                tracing::warn!(schema, statement = %shown, "DDL in the binlog, not relayed");
            }
        }
        let standalone = self.open.as_ref().is_some_and(|o| o.standalone);
        if standalone {
            self.close(end, timestamp)
        } else {
            None
        }
    }

    /// Ends the open group at `end`; a group without a GTID (none was open) ends nothing.
    fn close(&mut self, end: u32, timestamp: u32) -> Option<Transaction> {
        let open = self.open.take()?;
        let gtid_before = self.gtid_state.clone();
        self.gtid_state.update(open.gtid);
        Some(Transaction {
            end: Position {
                file: self.file.clone(),
                pos: u64::from(end),
                gtid: Some(open.gtid.to_string()),
            },
            gtid: open.gtid,
            gtid_before,
            gtid_state: self.gtid_state.clone(),
            commit_ts: timestamp,
            has_marker: open.has_marker,
            skip_flagged: open.skip_flagged,
        })
    }
}

/// The watermark a rows event of the watermark table wrote: the `mark` of its last row written
/// (a delete writes none).
fn written_mark(table: &TableSchema, kind: ChangeKind, images: &[Image]) -> Option<u64> {
    if kind == ChangeKind::Delete {
        return None;
    }
    let column = table.columns.iter().position(|c| c.name == "mark")?;
    match images.last()?.get(column)? {
        Some(Value::Uint(mark)) => Some(*mark),
        _ => None,
    }
}

/// The changes a rows event of a relayed table made, in the order it made them.
fn changes_of(table: &TableSchema, kind: ChangeKind, images: Vec<Image>) -> Vec<RowChange> {
    let mut changes = Vec::with_capacity(images.len());
    match kind {
        ChangeKind::Insert => {
            for image in images {
                changes.push(row_change(
                    table,
                    kind,
                    &image,
                    named(table, image.clone()),
                    None,
                ));
            }
        }
        ChangeKind::Delete => {
            for image in images {
                let before = named(table, image.clone());
                changes.push(row_change(table, kind, &image, Row::new(), Some(before)));
            }
        }
        ChangeKind::Update => {
            let mut images = images.into_iter();
            while let (Some(old), Some(new)) = (images.next(), images.next()) {
                let changed: Row = table
                    .columns
                    .iter()
                    .zip(old.iter().zip(&new))
                    .filter(|(_, (o, n))| o != n)
                    .map(|(c, (_, n))| (c.name.clone(), n.clone()))
                    .collect();
                // The server logs matched rows that did not change, too: nothing to relay.
                if !changed.is_empty() {
                    let before = named(table, old.clone());
                    changes.push(row_change(table, kind, &old, changed, Some(before)));
                }
            }
        }
    }
    changes
}

/// The keys an applier recorded in a rows event of `relay_loop_keys`: the images it wrote, an
/// insert's or an update's second one.
fn written_keys(
    table: &TableSchema,
    kind: ChangeKind,
    images: &[Image],
) -> Result<Vec<CacheKey>, RelayError> {
    let written: Vec<&Image> = match kind {
        ChangeKind::Insert => images.iter().collect(),
        ChangeKind::Update => images.iter().skip(1).step_by(2).collect(),
        ChangeKind::Delete => Vec::new(),
    };
    let mut keys = Vec::new();
    for image in written {
        keys.extend(recorded_keys(table, image)?);
    }
    Ok(keys)
}

/// The keys an applier recorded in one row of `relay_loop_keys`.
fn recorded_keys(table: &TableSchema, image: &Image) -> Result<Vec<CacheKey>, RelayError> {
    let column = table.columns.iter().position(|c| c.name == "cache_keys");
    match column.and_then(|i| image.get(i)) {
        Some(Some(Value::Bytes(bytes))) => CacheKey::split(bytes)
            .map_err(|e| RelayError::Refused(format!("{LOOP_KEYS_TABLE}.cache_keys: {e}"))),
        other => Err(RelayError::Refused(format!(
            "{LOOP_KEYS_TABLE} has no cache_keys bytes (found {other:?}): run `logstamp migrate`"
        ))),
    }
}

fn named(table: &TableSchema, image: Image) -> Row {
    table
        .columns
        .iter()
        .map(|c| c.name.clone())
        .zip(image)
        .collect()
}

/// A change whose primary key is read from `key_image` (the row before an update or delete).
fn row_change(
    table: &TableSchema,
    kind: ChangeKind,
    key_image: &Image,
    values: Row,
    before: Option<Row>,
) -> RowChange {
    let key = table
        .key
        .iter()
        .map(|&i| (table.columns[i].name.clone(), key_image[i].clone()))
        .collect();
    RowChange {
        schema: table.schema.clone(),
        table: table.table.clone(),
        kind,
        columns: table.kinds.clone(),
        key,
        values,
        before,
        contract: Some(table.contract.clone()),
    }
}

#[cfg(test)]
mod tests {
    use mysql_async::binlog::BinlogVersion;
    use mysql_async::binlog::events::FormatDescriptionEvent;

    use super::*;
    use crate::config::Settings;

    /// An event as the server sends it (v4 header, no checksum), read back as the stream does.
    fn event(kind: u8, flags: u16, log_pos: u32, data: &[u8]) -> Event {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        bytes.push(kind);
        bytes.extend_from_slice(&11u32.to_le_bytes());
        bytes.extend_from_slice(&(19 + data.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&log_pos.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(data);
        Event::read(
            &FormatDescriptionEvent::new(BinlogVersion::Version4),
            &bytes[..],
        )
        .unwrap()
    }

    fn gtid(seq: u64, flags2: u8) -> Event {
        let mut data = seq.to_le_bytes().to_vec();
        data.extend_from_slice(&0u32.to_le_bytes());
        data.push(flags2);
        data.extend_from_slice(&[0; 6]);
        event(gtid::GTID_EVENT, 0, 0, &data)
    }

    fn query(text: &str, log_pos: u32) -> Event {
        let schema = b"app";
        let mut data = vec![0; 8];
        data.push(schema.len() as u8);
        data.extend_from_slice(&[0, 0, 0, 0]);
        data.extend_from_slice(schema);
        data.push(0);
        data.extend_from_slice(text.as_bytes());
        event(EventType::QUERY_EVENT as u8, 0, log_pos, &data)
    }

    fn xid(log_pos: u32) -> Event {
        event(EventType::XID_EVENT as u8, 0, log_pos, &7u64.to_le_bytes())
    }

    fn handler(checksums: bool) -> EventHandler {
        let settings = Settings::defaults().unwrap();
        let context = RelayContext::new(settings.mysql, settings.kafka, settings.relay);
        EventHandler::new(
            context,
            Charsets::default(),
            checksums,
            "bin.000001".into(),
            GtidState::default(),
        )
    }

    fn ddl_skipped(h: &EventHandler) -> u64 {
        h.context.stats.capture.ddl_skipped.load(Ordering::Relaxed)
    }

    fn transaction(step: Option<Step>) -> Transaction {
        match step {
            Some(Step::Transaction(t)) => t,
            other => panic!("no transaction: {other:?}"),
        }
    }

    #[test]
    fn an_xid_ends_a_transaction_at_its_position() {
        let mut h = handler(false);
        assert_eq!(h.handle(&gtid(5, 0x0c)).unwrap(), None);
        let t = transaction(h.handle(&xid(900)).unwrap());
        assert_eq!((t.end.file.as_str(), t.end.pos), ("bin.000001", 900));
        assert_eq!(t.end.gtid.as_deref(), Some("0-11-5"));
        assert_eq!(t.gtid_state.to_string(), "0-11-5");
        assert!(t.gtid_before.is_empty());
        assert_eq!(t.commit_ts, 1_700_000_000);
        assert!(!t.has_marker && !t.skip_flagged);
    }

    #[test]
    fn non_transactional_groups_end_with_commit_and_ddl_stands_alone() {
        let mut h = handler(false);
        h.handle(&gtid(1, 0x08)).unwrap();
        assert_eq!(h.handle(&query("BEGIN", 100)).unwrap(), None);
        assert_eq!(
            transaction(h.handle(&query("COMMIT", 200)).unwrap())
                .end
                .pos,
            200
        );
        // DDL: a standalone group of one statement, counted, not relayed.
        h.handle(&gtid(2, 0x29)).unwrap();
        let t = transaction(
            h.handle(&query("ALTER TABLE app.t ADD c INT", 300))
                .unwrap(),
        );
        assert_eq!(t.gtid_before.to_string(), "0-11-1");
        assert_eq!(t.gtid_state.to_string(), "0-11-2");
        assert_eq!(ddl_skipped(&h), 1);
        // A savepoint inside a transaction is neither an end nor DDL.
        h.handle(&gtid(3, 0x0c)).unwrap();
        assert_eq!(h.handle(&query("SAVEPOINT s1", 350)).unwrap(), None);
        assert_eq!(h.handle(&query("ROLLBACK TO s1", 360)).unwrap(), None);
        assert_eq!(transaction(h.handle(&xid(400)).unwrap()).end.pos, 400);
        assert_eq!(ddl_skipped(&h), 1);
    }

    #[test]
    fn skip_replication_flags_mark_the_group() {
        let mut h = handler(false);
        h.handle(&gtid(1, 0x0c)).unwrap();
        let flagged = event(
            EventType::XID_EVENT as u8,
            SKIP_REPLICATION_FLAG,
            500,
            &[0; 8],
        );
        assert!(transaction(h.handle(&flagged).unwrap()).skip_flagged);
    }

    #[test]
    fn the_first_rotate_loses_its_checksum_bytes() {
        let mut name = 4u64.to_le_bytes().to_vec();
        name.extend_from_slice(b"mariadb-bin.000007");
        let mut with_checksum = name.clone();
        with_checksum.extend_from_slice(&[0x62, 0x9f, 0xf8, 0xab]);
        let mut h = handler(true);
        h.handle(&event(
            EventType::ROTATE_EVENT as u8,
            0x20,
            0,
            &with_checksum,
        ))
        .unwrap();
        assert_eq!(h.file, "mariadb-bin.000007");
        // Without checksums on the server, the name is whole.
        let mut h = handler(false);
        h.handle(&event(EventType::ROTATE_EVENT as u8, 0x20, 0, &name))
            .unwrap();
        assert_eq!(h.file, "mariadb-bin.000007");
    }

    #[test]
    fn heartbeats_vouch_for_positions_between_groups_only() {
        let mut h = handler(false);
        let beat = || event(EventType::HEARTBEAT_EVENT as u8, 0, 777, b"bin.000001");
        assert_eq!(
            h.handle(&beat()).unwrap(),
            Some(Step::Idle(Position {
                file: "bin.000001".into(),
                pos: 777,
                gtid: None
            }))
        );
        h.handle(&gtid(1, 0x0c)).unwrap();
        assert_eq!(h.handle(&beat()).unwrap(), None);
    }

    #[test]
    fn compressed_events_are_refused_and_gtid_lists_set_the_state() {
        let mut h = handler(false);
        let compressed = event(166, 0, 100, &[0; 16]);
        assert!(
            h.handle(&compressed)
                .unwrap_err()
                .to_string()
                .contains("log_bin_compress")
        );
        let list = {
            let mut data = 1u32.to_le_bytes().to_vec();
            data.extend_from_slice(&[0, 0, 0, 0, 11, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
            event(gtid::GTID_LIST_EVENT, 0x20, 100, &data)
        };
        h.handle(&list).unwrap();
        assert_eq!(h.gtid_state.to_string(), "0-11-9");
    }
}
