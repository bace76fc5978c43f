//! The text filter of the rows an applier writes into a log table (see
//! [`crate::store::text_filter`]): rows from another data centre are searched through the
//! filter as the local writer's rows are, with no rebuild.
//!
//! The applier adds a part's rows to the filter with the part's own statements, so they are in
//! the local transaction that writes the rows and records the applied offset: a crash loses the
//! rows and their grams together, and the replay adds both again (ORing bits is idempotent), so
//! the filter holds every applied row exactly as the writer's batches keep it. Marking the
//! minutes stale instead would leave searches of relayed minutes as slow as a scan until someone
//! ran `search rebuild`. The grams are computed where the part's SQL is written, ahead of the
//! part being applied (that overlaps with applying the part before), so applying costs only
//! the upsert, the same one a writer's batch of those rows sent at the source. The rows go to
//! their own filter rows ([`RELAYED`]), so the applier never waits on a local worker's.

use crate::id::Layout;
use crate::store::text_filter::TextFilterPlan;
use crate::store::text_search;

#[cfg(doc)]
use crate::store::text_filter::RELAYED;

use super::change::{ChangeKind, RowChange, Value};
use super::sql::Statement;

/// The log tables with a text filter in the relay's database, and how their IDs are laid out.
#[derive(Debug, Clone)]
pub struct RelayedTextFilters {
    pub plans: Vec<TextFilterPlan>,
    pub layout: Layout,
}

impl RelayedTextFilters {
    /// The statements adding the grams of `rows` (inserts and updates' new values) of the
    /// filtered tables of `database`, each of at most about `max_bytes`; none when no row is
    /// of such a table.
    pub fn statements(
        &self,
        database: &str,
        rows: &[&RowChange],
        max_bytes: usize,
    ) -> Result<Vec<Statement>, String> {
        let mut statements = Vec::new();
        for plan in &self.plans {
            let mut builder = plan.relayed_builder();
            let mut any = false;
            for row in rows.iter().filter(|r| {
                r.kind != ChangeKind::Delete
                    && r.schema == database
                    && r.table == plan.table.as_str()
            }) {
                let id = match row.values.get("id") {
                    Some(Some(Value::Uint(id))) => *id,
                    _ => {
                        return Err(format!(
                            "a row of {database}.{} has no unsigned `id`: its text filter \
                             cannot be kept",
                            row.table
                        ));
                    }
                };
                let texts: Vec<(usize, &str)> = plan
                    .columns
                    .iter()
                    .enumerate()
                    .filter_map(|(nth, (_, column))| match row.values.get(column) {
                        Some(Some(Value::Text(text))) => Some((nth, text.as_str())),
                        _ => None,
                    })
                    .collect();
                any |= !texts.is_empty();
                builder.add_row(&self.layout, id, texts);
            }
            if any {
                let upserts = text_search::upsert_sql(&plan.table, &builder.rows(), max_bytes);
                statements.extend(upserts.into_iter().map(|sql| Statement {
                    sql,
                    finds_row: false,
                }));
            }
        }
        Ok(statements)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::mysql::Ident;
    use crate::store::text_filter::{RELAYED, WORDS};
    use crate::store::text_search::FILTER_TABLE;

    fn filters() -> RelayedTextFilters {
        RelayedTextFilters {
            plans: vec![TextFilterPlan {
                table: Ident::new("logs").unwrap(),
                table_index: 0,
                columns: vec![(3, "message".into())],
            }],
            layout: Layout::new(10, 0).unwrap(),
        }
    }

    fn change(table: &str, kind: ChangeKind, id: Option<Value>, message: &str) -> RowChange {
        let mut values = BTreeMap::new();
        values.insert("id".to_string(), id);
        values.insert(
            "message".to_string(),
            Some(Value::Text(message.to_string())),
        );
        RowChange {
            schema: "logstamp".into(),
            table: table.into(),
            kind,
            columns: BTreeMap::new(),
            key: BTreeMap::new(),
            values,
            before: None,
            contract: None,
        }
    }

    #[test]
    fn rows_of_filtered_tables_add_their_grams_under_the_relayed_bit() {
        let id = (100u64 << 32) | (3 << 22);
        let rows = [
            change(
                "logs",
                ChangeKind::Insert,
                Some(Value::Uint(id)),
                "GET /orders/6878",
            ),
            change("items", ChangeKind::Insert, None, "not a log table"),
            change("logs", ChangeKind::Delete, None, "deleted rows add nothing"),
        ];
        let refs: Vec<&RowChange> = rows.iter().collect();
        let statements = filters().statements("logstamp", &refs, 1 << 20).unwrap();
        assert_eq!(statements.len(), 1);
        let sql = &statements[0].sql;
        assert!(sql.starts_with(&format!("INSERT INTO `{FILTER_TABLE}`")));
        let service = 3 | RELAYED;
        assert!(
            sql.contains(&format!("('logs', {}, {service}, ", 60u64 << 32)),
            "{sql}"
        );
        assert!(sql.ends_with(&format!(
            "`w{}` = `w{}` | VALUES(`w{}`)",
            WORDS - 1,
            WORDS - 1,
            WORDS - 1
        )));
        // Another database's table of the same name is not this one.
        assert!(
            filters()
                .statements("other", &refs, 1 << 20)
                .unwrap()
                .is_empty()
        );
        // A small budget splits the rows into several statements.
        assert!(
            filters()
                .statements("logstamp", &refs, 1_000)
                .unwrap()
                .len()
                > 1
        );
    }

    #[test]
    fn a_row_without_an_unsigned_id_is_refused() {
        let rows = [change(
            "logs",
            ChangeKind::Insert,
            Some(Value::Int(5)),
            "text",
        )];
        let refs: Vec<&RowChange> = rows.iter().collect();
        assert!(filters().statements("logstamp", &refs, 1 << 20).is_err());
    }
}
