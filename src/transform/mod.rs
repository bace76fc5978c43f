//! Messages to rows: parse a message as JSON and take each mapped column from it by JSON pointer,
//! converted to the column's SQL type.
//!
//! Pure: no I/O. Any input, however hostile, either maps exactly or is a [`MapError`] naming the
//! column and the reason; nothing is truncated or rounded silently (except sub-millisecond time,
//! below the column's precision): columns that may cut long strings say so (`truncate`) and each
//! row counts its cuts. [`normalize`] cleans documents up before they are mapped.

mod convert;
pub mod normalize;
pub mod otlp;
mod pointers;
pub mod settings;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::mysql::SqlValue;
use crate::store::MappedRow;
use crate::store::schema::{ColumnSpec, ColumnType, DEFAULT_STRING_LENGTH};

use crate::store::route::Condition;
pub use normalize::Normalizer;
use pointers::Pointers;

use crate::store::residual;
use crate::store::settings::{PayloadMode, StoreSettings};

/// MariaDB's `JSON_VALID` refuses documents nested 32 levels deep or more.
pub const MAX_JSON_DEPTH: usize = 31;

/// Why a message could not become a row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("message is not valid UTF-8 (first bad byte at offset {0})")]
    NotUtf8(usize),
    /// serde_json's message names the line and column, never the content.
    #[error("message is not JSON: {0}")]
    NotJson(String),
    /// The decoder's message names the field and the reason, never the content.
    #[error("message is not an OTLP logs request ({0})")]
    NotOtlp(String),
    /// A single-document mapping was given an OTLP message of another number of records.
    #[error("message holds {0} log records, not one")]
    NotOneRecord(usize),
    #[error("message is nested more than {MAX_JSON_DEPTH} levels deep, MariaDB's JSON limit")]
    TooDeep,
    #[error("column {column}: {reason}")]
    Column { column: String, reason: String },
    /// A `[[normalize]]` step refused the document; indices count from 0 as in the settings.
    #[error("normalize[{set}].steps[{step}] ({op} {field}): {reason}")]
    Rule {
        set: usize,
        step: usize,
        op: &'static str,
        field: String,
        reason: String,
    },
}

/// How a message's bytes become the documents the columns are mapped from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// The message is a JSON document.
    Json,
    /// The message is UTF-8 text, mapped as the document `{"message": text}`.
    Raw,
    /// The message is an OTLP `ExportLogsServiceRequest` in protobuf: one document per log
    /// record (see [`otlp`]).
    OtlpProto,
    /// The same in OTLP/JSON.
    OtlpJson,
}

impl MessageFormat {
    /// The OTLP encoding of the format; `None` for the formats of one document per message.
    fn otlp(self) -> Option<otlp::Encoding> {
        match self {
            MessageFormat::Json | MessageFormat::Raw => None,
            MessageFormat::OtlpProto => Some(otlp::Encoding::Proto),
            MessageFormat::OtlpJson => Some(otlp::Encoding::Json),
        }
    }
}

/// One column as the mapper uses it.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    column_type: ColumnType,
    length: usize,
    truncate: bool,
}

/// Maps messages to rows for a fixed list of columns.
#[derive(Debug, Clone)]
pub struct Mapper {
    columns: Vec<Column>,
    /// The columns' pointers, column `i` in slot `i`.
    pointers: Pointers,
    /// Whether the table's `payload` keeps the residual (see [`Mapper::keeping`]).
    residual: bool,
}

impl Mapper {
    pub fn new(columns: &[ColumnSpec]) -> Mapper {
        let mut pointers = Pointers::default();
        for column in columns {
            pointers.add(&column.pointer);
        }
        Mapper {
            columns: columns
                .iter()
                .map(|c| Column {
                    name: c.name.clone(),
                    column_type: c.column_type,
                    length: c.length.unwrap_or(DEFAULT_STRING_LENGTH) as usize,
                    truncate: c.truncate,
                })
                .collect(),
            pointers,
            residual: false,
        }
    }

    /// The mapper of a table whose `payload` keeps what `mode` says: with
    /// [`PayloadMode::Residual`], a pipeline works out each record's residual in this table.
    pub fn keeping(mut self, mode: PayloadMode) -> Mapper {
        self.residual = mode == PayloadMode::Residual;
        self
    }

    /// The record's residual in this table (`None`: nothing is left): `document` without what
    /// the columns' `values` give back.
    fn residual(&self, mut document: Json, values: &[SqlValue]) -> Option<String> {
        residual::split(&mut document, self.pointers.paths().zip(values));
        residual::residual_text(&document)
    }

    /// The columns' pointers, in column order.
    fn pointers(&self) -> impl Iterator<Item = &str> {
        self.pointers.texts()
    }

    /// Column names, in the order of [`MappedRow::values`].
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|c| c.name.as_str())
    }

    /// Maps a message written in `format`.
    pub fn map_message(
        &self,
        format: MessageFormat,
        message: &[u8],
    ) -> Result<MappedRow, MapError> {
        if format == MessageFormat::Json {
            let text = utf8(message)?;
            if !self.residual {
                let (values, truncated) = self.values(&mut self.pointers.in_text(text)?)?;
                return Ok(MappedRow {
                    values,
                    document: text.to_string(),
                    residuals: Vec::new(),
                    fanout: Vec::new(),
                    truncated,
                    record: None,
                });
            }
        }
        let (document, text) = parse(format, message)?;
        let (values, truncated) = self.values(&mut self.pointers.in_document(&document))?;
        let residuals = if self.residual {
            vec![self.residual(document, &values)]
        } else {
            Vec::new()
        };
        Ok(MappedRow {
            values,
            document: text,
            residuals,
            fanout: Vec::new(),
            truncated,
            record: None,
        })
    }

    /// Maps a JSON message.
    pub fn map(&self, message: &[u8]) -> Result<MappedRow, MapError> {
        self.map_message(MessageFormat::Json, message)
    }

    /// The columns' values from what their pointers found (`found[i]` for column `i`, taken),
    /// and how many were truncated.
    fn values(&self, found: &mut [Option<Cow<Json>>]) -> Result<(Vec<SqlValue>, u32), MapError> {
        let mut truncated = 0;
        // Sized up front: collecting a `Result` iterator would start small and grow (a
        // reallocation and a copy per record, measured at 3% of a worker's CPU).
        let mut values = Vec::with_capacity(self.columns.len());
        for (column, value) in self.columns.iter().zip(found) {
            let value = value.take().unwrap_or(Cow::Owned(Json::Null));
            let (value, cut) =
                convert::convert(value, column.column_type, column.length, column.truncate)
                    .map_err(|reason| MapError::Column {
                        column: column.name.clone(),
                        reason,
                    })?;
            truncated += u32::from(cut);
            values.push(value);
        }
        Ok((values, truncated))
    }
}

/// A fan-out table as the mapping sees it: when a record goes there, and its columns.
#[derive(Debug, Clone)]
pub struct Route {
    pub when: Vec<Condition>,
    pub mapper: Mapper,
}

/// The whole way from a message to its rows: parse, map the log table's columns, and map the
/// columns of every fan-out table the record is routed to.
#[derive(Debug, Clone)]
pub struct Pipeline {
    format: MessageFormat,
    normalizer: Normalizer,
    main: Mapper,
    routes: Vec<Route>,
    /// Every pointer read, compiled once: the log table's columns, then each route's
    /// conditions and columns.
    pointers: Pointers,
    /// Whether some table keeps the residual, which needs each record's document parsed.
    residual: bool,
}

impl Pipeline {
    pub fn new(
        format: MessageFormat,
        normalizer: Normalizer,
        main: Mapper,
        routes: Vec<Route>,
    ) -> Pipeline {
        let mut pointers = Pointers::default();
        let read = main.pointers().chain(routes.iter().flat_map(|route| {
            let conditions = route.when.iter().map(|c| c.pointer.as_str());
            conditions.chain(route.mapper.pointers())
        }));
        for pointer in read {
            pointers.add(pointer);
        }
        let residual = main.residual || routes.iter().any(|route| route.mapper.residual);
        Pipeline {
            format,
            normalizer,
            main,
            routes,
            pointers,
            residual,
        }
    }

    /// The log table and the fan-out tables of the settings.
    /// The pipeline the settings describe: messages in `format`, normalized, mapped to the log
    /// table's columns and routed to the fan-out tables of `store`.
    pub fn from_settings(
        format: MessageFormat,
        normalizer: &Normalizer,
        store: &StoreSettings,
    ) -> Pipeline {
        let routes = store
            .tables
            .iter()
            .map(|table| Route {
                when: table.when.clone(),
                mapper: Mapper::new(&table.columns).keeping(table.payload),
            })
            .collect();
        Pipeline::new(
            format,
            normalizer.clone(),
            Mapper::new(&store.columns).keeping(store.payload),
            routes,
        )
    }

    /// Maps one message of `topic` that holds one document (`json`, `raw`, or an OTLP message
    /// of one record): parses it, applies the topic's normalize rules (the stored document is
    /// then the normalized one), and maps every table it goes to. A failed rule, or a column
    /// that cannot be mapped in any of its tables, makes the whole record a dead letter: its
    /// rows are stored together or not at all.
    pub fn map(&self, topic: &str, message: &[u8]) -> Result<MappedRow, MapError> {
        self.map_owned(topic, message.to_vec()).map_err(|(e, _)| e)
    }

    /// [`Self::map`] of a message of our own: a JSON message that no rule changes becomes the
    /// stored document itself, neither copied nor parsed into a document (unless a table keeps
    /// the residual, which is the document less its columns). A failure gives the message
    /// back.
    fn map_owned(&self, topic: &str, message: Vec<u8>) -> Result<MappedRow, Unread> {
        if self.format == MessageFormat::Json
            && !self.normalizer.applies_to(topic)
            && !self.residual
        {
            let text = String::from_utf8(message).map_err(|e| {
                let at = e.utf8_error().valid_up_to();
                (MapError::NotUtf8(at), e.into_bytes())
            })?;
            let values = self
                .pointers
                .in_text(&text)
                .and_then(|mut found| self.values(&mut found));
            return match values {
                Ok((values, fanout, truncated)) => Ok(MappedRow {
                    values,
                    document: text,
                    residuals: Vec::new(),
                    fanout,
                    truncated,
                    record: None,
                }),
                Err(e) => Err((e, text.into_bytes())),
            };
        }
        parse(self.format, &message)
            .and_then(|(document, text)| self.map_document(topic, document, text))
            .map_err(|e| (e, message))
    }

    /// Maps every record of one message of `topic`: the message's one document for `json` and
    /// `raw`, or each log record of an OTLP message, in order, each handed to `each`. `Err` when
    /// the message cannot be read at all, with the message given back; otherwise one result per
    /// record, so one record that fails its rules or columns does not take the others with it.
    /// (A callback rather than a list: most messages are one record, and a list each would be
    /// an allocation per message.)
    pub fn map_records(
        &self,
        topic: &str,
        message: Vec<u8>,
        mut each: impl FnMut(Result<MappedRow, RecordError>),
    ) -> Result<(), Unread> {
        let Some(encoding) = self.format.otlp() else {
            each(Ok(self.map_owned(topic, message)?));
            return Ok(());
        };
        let records = self
            .map_otlp(topic, encoding, &message)
            .map_err(|e| (e, message))?;
        records.into_iter().for_each(each);
        Ok(())
    }

    /// Maps every log record of an OTLP message.
    fn map_otlp(
        &self,
        topic: &str,
        encoding: otlp::Encoding,
        message: &[u8],
    ) -> Result<Vec<Result<MappedRow, RecordError>>, MapError> {
        let mapped: Vec<Result<MappedRow, MapError>> = otlp::records(encoding, message)?
            .into_iter()
            .map(|mut document| {
                if depth(&document) > MAX_JSON_DEPTH {
                    return Err(MapError::TooDeep);
                }
                let (normalized, values, fanout, truncated) = self.rows(topic, &mut document)?;
                // One text per record: the normalized document's, or the document's own.
                let text = normalized.unwrap_or_else(|| document.to_string());
                let residuals = self.residuals(document, &values, &fanout);
                Ok(MappedRow {
                    values,
                    document: text,
                    residuals,
                    fanout,
                    truncated,
                    record: None,
                })
            })
            .collect();
        // A dead letter keeps its record as decoded, before any rule: decoded again, once per
        // message that has one, rather than kept for every record in case.
        let originals = if mapped.iter().any(Result::is_err) {
            otlp::records(encoding, message)?
        } else {
            Vec::new()
        };
        Ok(mapped
            .into_iter()
            .enumerate()
            .map(|(index, mapped)| {
                // A message is far below 2^32 records: Kafka caps it at a gigabyte.
                let record = u32::try_from(index).unwrap_or(u32::MAX);
                match mapped {
                    Ok(mut row) => {
                        row.record = Some(record);
                        Ok(row)
                    }
                    Err(error) => Err(RecordError {
                        record,
                        document: originals
                            .get(index)
                            .map(Json::to_string)
                            .unwrap_or_default(),
                        error,
                    }),
                }
            })
            .collect())
    }

    /// Normalizes and maps one parsed document; `text` is the document as received.
    fn map_document(
        &self,
        topic: &str,
        mut document: Json,
        text: String,
    ) -> Result<MappedRow, MapError> {
        let (normalized, values, fanout, truncated) = self.rows(topic, &mut document)?;
        let residuals = self.residuals(document, &values, &fanout);
        Ok(MappedRow {
            values,
            // The stored document is the normalized one, when a rule changed it.
            document: normalized.unwrap_or(text),
            residuals,
            fanout,
            truncated,
            record: None,
        })
    }

    /// Normalizes `document`, then maps its values in the log table and in the fan-out tables
    /// it goes to: its text if a rule changed it, the values, the fan-out rows and the count of
    /// truncated values.
    fn rows(&self, topic: &str, document: &mut Json) -> Result<Rows, MapError> {
        let mut normalized = None;
        if self.normalizer.applies_to(topic) && self.normalizer.apply(topic, document)? {
            // Renames and extracts can nest values deeper than MariaDB's JSON accepts.
            if depth(document) > MAX_JSON_DEPTH {
                return Err(MapError::TooDeep);
            }
            normalized = Some(document.to_string());
        }
        let (values, fanout, truncated) = self.values(&mut self.pointers.in_document(document))?;
        Ok((normalized, values, fanout, truncated))
    }

    /// The record's residual in each table that keeps one (see [`MappedRow::residuals`]):
    /// `document` (normalized) less what the table's columns give back.
    fn residuals(
        &self,
        document: Json,
        values: &[SqlValue],
        fanout: &[Option<Vec<SqlValue>>],
    ) -> Vec<Option<String>> {
        if !self.residual {
            return Vec::new();
        }
        let routed = self.routes.iter().zip(fanout);
        let tables = std::iter::once((&self.main, Some(values)))
            .chain(routed.map(|(route, values)| (&route.mapper, values.as_deref())))
            .map(|(mapper, values)| (mapper, values.filter(|_| mapper.residual)));
        // The last table keeping a residual takes the document itself and those before it a
        // copy: copying a whole document cost a tenth of mapping's CPU.
        let kept = tables
            .clone()
            .filter(|(_, values)| values.is_some())
            .count();
        let mut copies = kept.saturating_sub(1);
        let mut document = Some(document);
        tables
            .map(|(mapper, values)| {
                let values = values?;
                let own = if copies == 0 {
                    document.take()?
                } else {
                    copies -= 1;
                    document.clone()?
                };
                mapper.residual(own, values)
            })
            .collect()
    }

    /// The values of the log table and of the fan-out tables the record goes to, from what
    /// [`Self::pointers`] found, and the count of truncated values.
    fn values(&self, found: &mut [Option<Cow<Json>>]) -> Result<Values, MapError> {
        let (main, mut found) = found.split_at_mut(self.main.columns.len());
        let (values, mut truncated) = self.main.values(main)?;
        let mut fanout = Vec::with_capacity(self.routes.len());
        for route in &self.routes {
            let (conditions, rest) = found.split_at_mut(route.when.len());
            let (columns, rest) = rest.split_at_mut(route.mapper.columns.len());
            found = rest;
            let routed = route
                .when
                .iter()
                .zip(conditions.iter())
                .all(|(condition, value)| condition.holds_value(value.as_deref()));
            if !routed {
                fanout.push(None);
                continue;
            }
            let (values, cut) = route.mapper.values(columns)?;
            truncated += cut;
            fanout.push(Some(values));
        }
        Ok((values, fanout, truncated))
    }
}

/// What [`Pipeline::rows`] makes of a document.
type Rows = (
    Option<String>,
    Vec<SqlValue>,
    Vec<Option<Vec<SqlValue>>>,
    u32,
);

/// The values of a record's tables: the log table's, each fan-out table's where it goes, and
/// the count of truncated values.
type Values = (Vec<SqlValue>, Vec<Option<Vec<SqlValue>>>, u32);

/// Why a message of our own could not be read at all, and the message given back.
pub type Unread = (MapError, Vec<u8>);

/// A record of a message of several records (OTLP) that could not be mapped: a dead letter of
/// its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The record's index in its message, from 0.
    pub record: u32,
    /// The record's document as decoded, before any normalize rule.
    pub document: String,
    pub error: MapError,
}

/// The document a message holds, and its text as stored.
fn parse(format: MessageFormat, message: &[u8]) -> Result<(Json, String), MapError> {
    let (document, text) = match format.otlp() {
        Some(encoding) => {
            let mut records = otlp::records(encoding, message)?;
            if records.len() != 1 {
                return Err(MapError::NotOneRecord(records.len()));
            }
            let document = records.remove(0);
            let text = document.to_string();
            (document, text)
        }
        None if format == MessageFormat::Raw => {
            let document = serde_json::json!({ "message": utf8(message)? });
            let text = document.to_string();
            (document, text)
        }
        None => {
            let text = utf8(message)?;
            let document: Json =
                serde_json::from_str(text).map_err(|e| MapError::NotJson(e.to_string()))?;
            (document, text.to_string())
        }
    };
    if depth(&document) > MAX_JSON_DEPTH {
        return Err(MapError::TooDeep);
    }
    Ok((document, text))
}

fn utf8(message: &[u8]) -> Result<&str, MapError> {
    std::str::from_utf8(message).map_err(|e| MapError::NotUtf8(e.valid_up_to()))
}

/// Nesting depth: a scalar is 0, `[]` is 1, `[[]]` is 2. serde_json caps parsing at 128 levels, so
/// the recursion is bounded.
fn depth(value: &Json) -> usize {
    match value {
        Json::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Json::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod residual_tests;
