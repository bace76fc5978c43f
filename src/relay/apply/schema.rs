//! The schema cache: which source table definitions were found to agree with the local
//! tables, and reading the local tables' columns and keys.

use super::*;

/// What was last found to agree, by table: the source's kinds and contract, trusted for
/// [`SCHEMA_RECHECK`] (the local table is read again after that, or as soon as a message
/// carries another definition).
#[derive(Debug, Default)]
pub(super) struct SchemaCache {
    pub(super) checked: HashMap<(String, String), (Instant, Definition)>,
}

/// A source table's definition as a message carries it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Definition {
    pub(super) kinds: BTreeMap<String, Kind>,
    pub(super) contract: Option<Arc<Contract>>,
}

/// Refuses a part touching a table that is not relayed here (for good) or that differs (until
/// they agree): with the message's contract, in its primary key or any column's exact type;
/// without one (a capture from before the contract), in its columns' names and kinds.
pub(super) async fn check_schemas(
    conn: &mut Conn,
    limit: Duration,
    cache: &mut SchemaCache,
    context: &RelayContext,
    part: &Part<'_>,
    source_dc: &str,
) -> Result<(), RelayError> {
    for table in &part.tables {
        let key = (table.schema.clone(), table.table.clone());
        if let Some((at, checked)) = cache.checked.get(&key)
            && at.elapsed() < SCHEMA_RECHECK
            && *checked == table.definition
        {
            continue;
        }
        if !context.is_relayed(&table.schema, &table.table) {
            return Err(RelayError::Refused(format!(
                "{source_dc} sends changes of {}.{} (transaction {}, {}:{}), which relay.tables \
                 does not list here",
                table.schema, table.table, part.seq, part.position.file, part.position.pos
            )));
        }
        let (schema, name) = (&table.schema, &table.table);
        let local = within(
            limit,
            || format!("reading the columns of {schema}.{name}"),
            local_columns(conn, schema, name),
        )
        .await?;
        let differences = match &table.definition.contract {
            Some(source) => {
                let key = within(
                    limit,
                    || format!("reading the primary key of {schema}.{name}"),
                    local_key(conn, schema, name),
                )
                .await?;
                contract::differences(source, &contract::local_contract(&local, key), source_dc)
            }
            None => sql::column_differences(&table.definition.kinds, &local, source_dc),
        };
        if !differences.is_empty() {
            return Err(RelayError::SchemaMismatch(format!(
                "table {}.{} differs between {source_dc} and here: {}; applying from \
                 {source_dc} waits until the table is the same in both (DDL is not relayed)",
                table.schema,
                table.table,
                differences.join("; ")
            )));
        }
        cache.checked.insert(
            (schema.clone(), name.clone()),
            (Instant::now(), table.definition.clone()),
        );
    }
    Ok(())
}

pub(in crate::relay) async fn local_columns(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<Vec<LocalColumn>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, \
             CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        .await
        .map_err(DbError::mysql(format!(
            "reading the columns of {schema}.{table}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(LocalColumn {
                name: take(&mut row, 0, "COLUMN_NAME")?,
                data_type: take(&mut row, 1, "DATA_TYPE")?,
                column_type: take(&mut row, 2, "COLUMN_TYPE")?,
                charset: take(&mut row, 3, "CHARACTER_SET_NAME")?,
                octet_length: take(&mut row, 4, "CHARACTER_OCTET_LENGTH")?,
                precision: take(&mut row, 5, "NUMERIC_PRECISION")?,
                scale: take(&mut row, 6, "NUMERIC_SCALE")?,
                datetime_precision: take(&mut row, 7, "DATETIME_PRECISION")?,
            })
        })
        .collect()
}

/// The local table's primary key columns, in key order.
pub(in crate::relay) async fn local_key(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, DbError> {
    conn.exec(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? \
         AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (schema, table),
    )
    .await
    .map_err(DbError::mysql(format!(
        "reading the primary key of {schema}.{table}"
    )))
}
