//! Binlog events to transactions: one handler per event kind, no I/O.
//!
//! MariaDB writes every event group (transaction or DDL statement) as a GTID event, the group's
//! events, and an end: an XID event for a transactional engine, a QUERY `COMMIT` otherwise, or
//! nothing for a standalone group (the GTID's `FL_STANDALONE`), whose single QUERY is the whole
//! group. Rows events name their table by the ID of the TABLE_MAP event just before them.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};

use super::change::{ChangeKind, Position, Row, RowChange};
use super::context::{APPLIED_TABLE, RelayContext, RelayError};
use super::decode::{Image, decode_images};
use super::gtid::{self, GtidEvent, GtidState};
use super::table::{Charsets, TableSchema};

/// Header flag MariaDB sets on the events of a session with `skip_replication=1`.
pub const SKIP_REPLICATION_FLAG: u16 = 0x8000;

/// A committed event group, with the relayed changes it made.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// Where the group ends in the binlog, and its GTID.
    pub end: Position,
    /// The GTID state once this group is applied: where a reader resumes after it.
    pub gtid_state: GtidState,
    /// The source's commit time, Unix seconds.
    pub commit_ts: u32,
    pub changes: Vec<RowChange>,
    /// The group wrote to the relay's marker table (`relay_applied`).
    pub has_marker: bool,
    /// Events of the group carried the skip_replication flag.
    pub skip_flagged: bool,
}

/// What an event tells capture.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A committed event group.
    Transaction(Transaction),
    /// The server has sent everything up to this position and waits for more (a heartbeat).
    /// Groups it left out (flagged skip_replication) lie before it.
    Idle(Position),
}

/// What capture has counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    pub transactions: u64,
    /// DDL statements seen (logged, not relayed).
    pub ddl: u64,
}

/// What the stream knows about a table ID.
#[derive(Debug, Clone)]
enum TableEntry {
    Relayed(Arc<TableSchema>),
    Marker,
    Other,
}

#[derive(Debug)]
struct OpenGroup {
    gtid: gtid::Gtid,
    standalone: bool,
    xa: bool,
    changes: Vec<RowChange>,
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
    stats: EventStats,
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
            stats: EventStats::default(),
        }
    }

    pub fn stats(&self) -> EventStats {
        self.stats
    }

    /// Handles one event; returns the transaction it completed, or the position a heartbeat
    /// vouches for.
    pub fn handle(&mut self, event: &Event) -> Result<Option<Step>, RelayError> {
        Ok(self
            .handle_event(event)?
            .map(Step::Transaction)
            .or_else(|| {
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

    fn handle_event(&mut self, event: &Event) -> Result<Option<Transaction>, RelayError> {
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
            Some(EventData::RowsEvent(rows)) => self.on_rows(&rows),
            Some(EventData::XidEvent(_)) => {
                return self.close(header.log_pos(), header.timestamp());
            }
            Some(EventData::QueryEvent(query)) => {
                return self.on_query(
                    &query.schema(),
                    &query.query(),
                    header.log_pos(),
                    header.timestamp(),
                );
            }
            Some(EventData::XaPrepareLogEvent(_)) => {
                return self.close(header.log_pos(), header.timestamp());
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
            changes: Vec::new(),
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
        let entry = if schema == self.context.state_database.as_str() && table == APPLIED_TABLE {
            TableEntry::Marker
        } else if self.context.is_relayed(&schema, &table) {
            let parsed =
                TableSchema::from_table_map(tme, &self.charsets).map_err(RelayError::Refused)?;
            TableEntry::Relayed(Arc::new(parsed))
        } else {
            TableEntry::Other
        };
        self.tables.insert(tme.table_id(), entry);
        Ok(())
    }

    fn on_rows(&mut self, rows: &RowsEventData<'_>) -> Result<(), RelayError> {
        let entry = self.tables.get(&rows.table_id()).cloned();
        let Some(open) = &mut self.open else {
            return Err(RelayError::Refused(
                "a rows event outside an event group: the binlog reader lost its place".into(),
            ));
        };
        let table = match entry {
            Some(TableEntry::Relayed(table)) => table,
            Some(TableEntry::Marker) => {
                open.has_marker = true;
                return Ok(());
            }
            Some(TableEntry::Other) => return Ok(()),
            None => {
                return Err(RelayError::Refused(format!(
                    "a rows event for table ID {} without its TABLE_MAP event",
                    rows.table_id()
                )));
            }
        };
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
        match kind {
            ChangeKind::Insert => {
                for image in images {
                    open.changes.push(row_change(
                        &table,
                        kind,
                        &image,
                        named(&table, image.clone()),
                        None,
                    ));
                }
            }
            ChangeKind::Delete => {
                for image in images {
                    let before = named(&table, image.clone());
                    open.changes
                        .push(row_change(&table, kind, &image, Row::new(), Some(before)));
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
                        let before = named(&table, old.clone());
                        open.changes
                            .push(row_change(&table, kind, &old, changed, Some(before)));
                    }
                }
            }
        }
        Ok(())
    }

    fn on_query(
        &mut self,
        schema: &str,
        query: &str,
        end: u32,
        timestamp: u32,
    ) -> Result<Option<Transaction>, RelayError> {
        let statement = query.trim_start();
        let word = statement
            .split(|c: char| c.is_whitespace() || c == ';')
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        match word.as_str() {
            "BEGIN" | "SAVEPOINT" => return Ok(None),
            // A group that changed non-transactional tables ends with COMMIT; one rolled back
            // still changed them, so it is relayed the same way.
            "COMMIT" | "ROLLBACK" if !statement.to_ascii_uppercase().starts_with("ROLLBACK TO") => {
                return self.close(end, timestamp);
            }
            "ROLLBACK" => return Ok(None),
            // XA START/END inside a prepared group; XA COMMIT/ROLLBACK is a standalone group.
            "XA" => {}
            _ => {
                // DDL is not relayed: its order against other data centres' writes cannot be
                // kept, so schema changes are rolled out by hand in every data centre, and an
                // applier refuses a table whose columns differ (see apply).
                self.stats.ddl += 1;
                let shown: String = statement.chars().take(200).collect();
                tracing::warn!(schema, statement = %shown, "DDL in the binlog, not relayed");
            }
        }
        let standalone = self.open.as_ref().is_some_and(|o| o.standalone);
        if standalone {
            self.close(end, timestamp)
        } else {
            Ok(None)
        }
    }

    /// Ends the open group at `end`; a group without a GTID (none was open) ends nothing.
    fn close(&mut self, end: u32, timestamp: u32) -> Result<Option<Transaction>, RelayError> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        // A prepared XA group is logged at XA PREPARE and committed or rolled back by a later
        // group: its changes cannot be relayed in order with the rest.
        if open.xa && !open.changes.is_empty() {
            return Err(RelayError::Refused(format!(
                "the XA transaction {} changed relayed tables: the relay does not follow XA",
                open.gtid
            )));
        }
        self.gtid_state.update(open.gtid);
        self.stats.transactions += 1;
        Ok(Some(Transaction {
            end: Position {
                file: self.file.clone(),
                pos: u64::from(end),
                gtid: Some(open.gtid.to_string()),
            },
            gtid_state: self.gtid_state.clone(),
            commit_ts: timestamp,
            changes: open.changes,
            has_marker: open.has_marker,
            skip_flagged: open.skip_flagged,
        }))
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
    }
}
