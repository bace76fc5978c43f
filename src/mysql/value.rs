//! A value as a column of MySQL holds it, before it is encoded for a statement.

use chrono::NaiveDateTime;

/// `MEDIUMTEXT` holds at most 2^24 - 1 bytes.
pub const MAX_TEXT_BYTES: usize = 16_777_215;

/// A value ready for MySQL, of the type its column declares.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    /// `string` and `text` columns.
    Text(String),
    Int(i64),
    Uint(u64),
    /// Always finite.
    Double(f64),
    Bool(bool),
    /// UTC, whole milliseconds, years 1000 to 9999 (`DATETIME(3)`'s range).
    Datetime(NaiveDateTime),
    /// JSON text of a value.
    Json(String),
}
