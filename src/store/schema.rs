//! DDL text for the log table.

use super::{Ident, PartitionPlan};

/// The columns of a typical log line, after `id`: the record's own fields and the original
/// document.
const DEFAULT_COLUMNS: &[(&str, &str)] = &[
    ("event_time", "DATETIME(3) NULL"),
    ("level", "VARCHAR(16) NULL"),
    ("host", "VARCHAR(255) NULL"),
    ("service", "VARCHAR(255) NULL"),
    ("message", "TEXT NULL"),
    ("payload", "JSON NULL"),
];

/// `CREATE TABLE` for the log table, range-partitioned on `id` as planned.
pub fn create_log_table_sql(table: &Ident, plan: &PartitionPlan) -> String {
    let mut columns = vec!["  `id` BIGINT UNSIGNED NOT NULL".to_string()];
    columns.extend(
        DEFAULT_COLUMNS
            .iter()
            .map(|(name, ty)| format!("  `{name}` {ty}")),
    );
    columns.push("  PRIMARY KEY (`id`)".to_string());
    format!(
        "CREATE TABLE {table} (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4\n{};\n",
        columns.join(",\n"),
        plan.partition_clause()
    )
}
