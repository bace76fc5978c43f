//! The log table's shape: its mapped columns and the DDL text that creates it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::PartitionPlan;
use crate::mysql::Ident;

/// Column names logstamp itself uses, which a mapping may not take.
pub const RESERVED_COLUMNS: &[&str] = &["id", "payload"];

/// Default byte length of a `string` column.
pub const DEFAULT_STRING_LENGTH: u32 = 255;

/// SQL types a mapped column can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// `VARCHAR(length)`, characters.
    String,
    /// `MEDIUMTEXT`.
    Text,
    /// `BIGINT`.
    Int,
    /// `BIGINT UNSIGNED`.
    Uint,
    /// `DOUBLE`.
    Double,
    /// `BOOLEAN`.
    Bool,
    /// `DATETIME(3)`, UTC: from RFC 3339 text or epoch seconds/milliseconds.
    Datetime,
    /// `JSON`: any JSON value, stored as its text.
    Json,
}

/// One column of the log table, filled from the JSON message at `pointer` (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    pub name: String,
    pub pointer: String,
    #[serde(rename = "type")]
    pub column_type: ColumnType,
    /// Characters, for `string` columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u32>,
    /// For `string` and `text` columns: cut a longer string to the column's length (counted in
    /// the row's `truncated`) instead of refusing the message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncate: bool,
}

impl ColumnSpec {
    /// The validated, quotable name; checked when settings load.
    pub fn ident(&self) -> Result<Ident, String> {
        let ident = Ident::new(&self.name).map_err(|e| e.to_string())?;
        if RESERVED_COLUMNS.contains(&self.name.to_ascii_lowercase().as_str()) {
            return Err(format!("column name {:?} is reserved", self.name));
        }
        if !(self.pointer.is_empty() || self.pointer.starts_with('/')) {
            return Err(format!(
                "pointer {:?} of column {:?} must be empty or start with /",
                self.pointer, self.name
            ));
        }
        if self.length.is_some() && self.column_type != ColumnType::String {
            return Err(format!(
                "length applies only to string columns ({:?})",
                self.name
            ));
        }
        if self.truncate && !matches!(self.column_type, ColumnType::String | ColumnType::Text) {
            return Err(format!(
                "truncate applies only to string and text columns ({:?})",
                self.name
            ));
        }
        if self.length.is_some_and(|l| l == 0 || l > 16_383) {
            return Err(format!("length of {:?} must be 1 to 16383", self.name));
        }
        Ok(ident)
    }

    pub fn sql_type(&self) -> SqlType {
        SqlType(
            self.column_type,
            self.length.unwrap_or(DEFAULT_STRING_LENGTH),
        )
    }
}

/// A column type as written in DDL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlType(ColumnType, u32);

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ColumnType::String => write!(f, "VARCHAR({})", self.1),
            ColumnType::Text => f.write_str("MEDIUMTEXT"),
            ColumnType::Int => f.write_str("BIGINT"),
            ColumnType::Uint => f.write_str("BIGINT UNSIGNED"),
            ColumnType::Double => f.write_str("DOUBLE"),
            ColumnType::Bool => f.write_str("BOOLEAN"),
            ColumnType::Datetime => f.write_str("DATETIME(3)"),
            ColumnType::Json => f.write_str("JSON"),
        }
    }
}

/// The column and key lines of a log table's `CREATE TABLE`: `id`, the mapped columns,
/// `payload` if kept, the primary key.
pub fn column_definitions(columns: &[ColumnSpec], payload: bool) -> Vec<String> {
    let mut lines = vec!["  `id` BIGINT UNSIGNED NOT NULL".to_string()];
    lines.extend(
        columns
            .iter()
            .map(|c| format!("  `{}` {} NULL", c.name, c.sql_type())),
    );
    if payload {
        lines.push("  `payload` JSON NULL".to_string());
    }
    lines.push("  PRIMARY KEY (`id`)".to_string());
    lines
}

/// `CREATE TABLE` for the log table: `id`, the mapped columns, `payload` if kept, partitioned on
/// `id` as planned.
pub fn create_log_table_sql(
    table: &Ident,
    columns: &[ColumnSpec],
    payload: bool,
    plan: &PartitionPlan,
) -> String {
    create_table_sql(table, columns, payload, plan, "")
}

/// [`create_log_table_sql`] with more table `options` (` PAGE_COMPRESSED=1`), which its
/// partitions take.
pub fn create_table_sql(
    table: &Ident,
    columns: &[ColumnSpec],
    payload: bool,
    plan: &PartitionPlan,
    options: &str,
) -> String {
    let lines = column_definitions(columns, payload);
    format!(
        "CREATE TABLE {table} (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin{options}\n{};\n",
        lines.join(",\n"),
        plan.partition_clause()
    )
}
