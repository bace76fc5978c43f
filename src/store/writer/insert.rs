//! The four ways of sending rows (`store.insert_method`). Each checks what the server says back,
//! so a row that was refused, truncated or skipped is reported as [`InsertError::Refused`], never
//! lost quietly.

use bytes::Bytes;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Error as MysqlError, Params, Row, Transaction, Value};

use super::infile::InfileServer;
use crate::mysql::SqlValue;
use crate::mysql::encode::{
    mysql_value, push_infile_field, push_infile_text, push_sql_literal, push_sql_string, size_bound,
};
use crate::mysql::rows::text_lossy;
use crate::mysql::{DbError, Flavor, Ident};
use crate::store::settings::{InsertMethod, PayloadMode};

/// One row of one table: a record's ID and its values for that table's columns.
#[derive(Debug, Clone, Copy)]
pub(super) struct TableRow<'a> {
    pub(super) id: u64,
    pub(super) offset: i64,
    pub(super) values: &'a [SqlValue],
    /// What the `payload` column keeps of the record (the whole record or its residual);
    /// `None`: NULL.
    pub(super) payload: Option<&'a str>,
}

/// MySQL's limit on placeholders in one prepared statement.
const MAX_PLACEHOLDERS: usize = 65_535;

/// Server errors that blame the data of a row rather than the statement or the connection.
const ROW_ERROR_CODES: &[u16] = &[
    1048, // ER_BAD_NULL_ERROR
    1062, // ER_DUP_ENTRY: an ID already stored
    1264, // ER_WARN_DATA_OUT_OF_RANGE
    1265, // WARN_DATA_TRUNCATED
    1292, // ER_TRUNCATED_WRONG_VALUE
    1300, // ER_INVALID_CHARACTER_STRING
    1366, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
    1367, // ER_ILLEGAL_VALUE_FOR_TYPE
    1406, // ER_DATA_TOO_LONG
    1411, // ER_WRONG_VALUE_FOR_TYPE
    1690, // ER_DATA_OUT_OF_RANGE
    3140, // ER_INVALID_JSON_TEXT (MySQL)
    4025, // ER_CONSTRAINT_FAILED: MariaDB's JSON_VALID check
];

#[derive(Debug)]
pub(super) enum InsertError {
    /// The server refused (or would have altered) some row of the statement; the reason is its
    /// message.
    Refused(String),
    Store(DbError),
}

impl InsertError {
    pub(super) fn into_store(self) -> DbError {
        match self {
            InsertError::Store(e) => e,
            InsertError::Refused(reason) => DbError::Refused(reason),
        }
    }

    /// A refusal's reason rewritten (to say what was refused); other errors as they are.
    pub(super) fn refused_as(self, reason: impl FnOnce(String) -> String) -> InsertError {
        match self {
            InsertError::Refused(r) => InsertError::Refused(reason(r)),
            store => store,
        }
    }
}

impl From<DbError> for InsertError {
    fn from(e: DbError) -> InsertError {
        InsertError::Store(e)
    }
}

fn classify(context: &'static str) -> impl FnOnce(MysqlError) -> InsertError {
    move |e| match &e {
        MysqlError::Server(server) if ROW_ERROR_CODES.contains(&server.code) => {
            InsertError::Refused(format!("{} (error {})", server.message, server.code))
        }
        _ => InsertError::Store(DbError::Mysql {
            context: context.to_string(),
            source: e,
        }),
    }
}

/// A connection or a transaction on one: what the insert methods run on.
pub(super) trait Session: Queryable + Send {
    fn warnings(&self) -> u16;
    fn affected(&self) -> u64;
}

impl Session for Conn {
    fn warnings(&self) -> u16 {
        self.get_warnings()
    }
    fn affected(&self) -> u64 {
        self.affected_rows()
    }
}

impl Session for Transaction<'_> {
    fn warnings(&self) -> u16 {
        self.get_warnings()
    }
    fn affected(&self) -> u64 {
        self.affected_rows()
    }
}

/// After a statement: any warning (strict mode turns most into errors, but `LOAD DATA LOCAL`
/// implies IGNORE and only warns) means a row was altered or skipped, and any shortfall in the
/// rows stored means one was dropped.
async fn check_result(
    session: &mut impl Session,
    expected_rows: Option<usize>,
) -> Result<(), InsertError> {
    if session.warnings() > 0 {
        let warnings: Vec<Row> = session
            .query("SHOW WARNINGS")
            .await
            .map_err(classify("reading warnings"))?;
        // Read leniently: a warning is a refusal whatever its form (a message quoting data in
        // another character set, an unexpected column).
        if let Some(warning) = warnings.iter().find(|w| text_lossy(w, 0) != "Note") {
            return Err(InsertError::Refused(format!(
                "{} (warning {})",
                text_lossy(warning, 2),
                text_lossy(warning, 1)
            )));
        }
    }
    if let Some(expected) = expected_rows {
        let stored = session.affected();
        if stored != expected as u64 {
            return Err(InsertError::Refused(format!(
                "{stored} of {expected} rows were stored"
            )));
        }
    }
    Ok(())
}

/// The log table and its columns, with the SQL around the values built once.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) table: Ident,
    /// Mapped columns, in the order of each row's values.
    pub(super) columns: Vec<Ident>,
    /// Whether the table has a `payload` column.
    pub(super) payload: bool,
    /// What it keeps.
    pub(super) mode: PayloadMode,
    /// `` (`id`, ..., `payload`) ``
    column_list: String,
}

impl Target {
    pub(super) fn new(table: Ident, columns: Vec<Ident>, mode: PayloadMode) -> Target {
        let payload = mode.kept();
        let mut names = vec!["`id`".to_string()];
        names.extend(columns.iter().map(Ident::to_string));
        if payload {
            names.push("`payload`".to_string());
        }
        Target {
            column_list: format!("({})", names.join(", ")),
            table,
            columns,
            payload,
            mode,
        }
    }

    /// Values per row: the ID, the mapped columns, the payload.
    fn width(&self) -> usize {
        1 + self.columns.len() + usize::from(self.payload)
    }

    fn insert_prefix(&self) -> String {
        format!("INSERT INTO {} {} VALUES ", self.table, self.column_list)
    }

    fn row_size(&self, row: &TableRow) -> usize {
        let values: usize = row.values.iter().map(size_bound).sum();
        let payload = if self.payload {
            2 * row.payload.map_or(0, str::len) + 12
        } else {
            0
        };
        32 + values + payload
    }

    fn params(&self, row: &TableRow) -> Vec<Value> {
        let mut params = Vec::with_capacity(self.width());
        params.push(Value::UInt(row.id));
        params.extend(row.values.iter().map(mysql_value));
        if self.payload {
            params.push(
                row.payload
                    .map_or(Value::NULL, |text| Value::Bytes(text.as_bytes().to_vec())),
            );
        }
        params
    }
}

fn too_large(row: &TableRow, size: usize, budget: usize) -> InsertError {
    InsertError::Refused(format!(
        "the row at offset {} needs up to {size} bytes in a statement, more than \
         max_allowed_packet allows ({budget})",
        row.offset
    ))
}

/// Multi-row `INSERT ... VALUES (...), (...)` with escaped literals, as many rows per statement
/// as fit the packet.
pub(super) async fn text(
    session: &mut impl Session,
    target: &Target,
    rows: &[TableRow<'_>],
    budget: usize,
) -> Result<(), InsertError> {
    let prefix = target.insert_prefix();
    let mut sql = String::with_capacity(budget.min(rows.len() * 512 + prefix.len()));
    let mut in_statement = 0;
    for row in rows {
        let mark = sql.len();
        if in_statement == 0 {
            sql.push_str(&prefix);
        } else {
            sql.push(',');
        }
        push_text_row(&mut sql, target, row);
        if sql.len() > budget {
            if in_statement == 0 {
                return Err(too_large(row, sql.len(), budget));
            }
            sql.truncate(mark);
            send_text(session, &sql, Some(in_statement)).await?;
            sql.clear();
            sql.push_str(&prefix);
            push_text_row(&mut sql, target, row);
            if sql.len() > budget {
                return Err(too_large(row, sql.len(), budget));
            }
            in_statement = 0;
        }
        in_statement += 1;
    }
    if in_statement > 0 {
        send_text(session, &sql, Some(in_statement)).await?;
    }
    Ok(())
}

fn push_text_row(sql: &mut String, target: &Target, row: &TableRow) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(sql, "({}", row.id);
    for value in row.values {
        sql.push(',');
        push_sql_literal(sql, value);
    }
    if target.payload {
        sql.push(',');
        match row.payload {
            Some(text) => push_sql_string(sql, text),
            None => sql.push_str("NULL"),
        }
    }
    sql.push(')');
}

/// Runs one statement of literal values; `rows` is how many it inserts, one each, or `None`
/// for an upsert (each row affects none to two).
pub(super) async fn send_text(
    session: &mut impl Session,
    sql: &str,
    rows: Option<usize>,
) -> Result<(), InsertError> {
    session
        .query_drop(sql)
        .await
        .map_err(classify("writing rows (text)"))?;
    check_result(session, rows).await
}

/// Prepared multi-row `INSERT` with placeholders, in statements of at most 65,535 placeholders
/// that fit the packet.
pub(super) async fn prepared(
    session: &mut impl Session,
    target: &Target,
    rows: &[TableRow<'_>],
    budget: usize,
) -> Result<(), InsertError> {
    let sized = rows.iter().map(|row| {
        let size = target.row_size(row);
        if size > budget {
            Err(too_large(row, size, budget))
        } else {
            Ok((size, target.params(row)))
        }
    });
    let sized = sized.collect::<Result<Vec<_>, _>>()?;
    let prefix = target.insert_prefix();
    let statement = Statement {
        prefix: &prefix,
        suffix: "",
        width: target.width(),
        one_affected_per_row: true,
    };
    prepared_values(session, &statement, sized, budget).await
}

/// The text around a multi-row statement's values.
pub(super) struct Statement<'a> {
    /// `INSERT INTO t (...) VALUES `
    pub(super) prefix: &'a str,
    /// After the values, e.g. `ON DUPLICATE KEY UPDATE ...`.
    pub(super) suffix: &'a str,
    /// Values per row.
    pub(super) width: usize,
    /// Whether each row must count as one affected row (not so for upserts, where an update
    /// counts two).
    pub(super) one_affected_per_row: bool,
}

/// Rows of `statement.width` values (each with its size bound) in prepared multi-row statements.
pub(super) async fn prepared_values(
    session: &mut impl Session,
    statement: &Statement<'_>,
    rows: Vec<(usize, Vec<Value>)>,
    budget: usize,
) -> Result<(), InsertError> {
    let width = statement.width;
    let max_rows = (MAX_PLACEHOLDERS / width.max(1)).max(1);
    let placeholders = format!("({})", vec!["?"; width].join(","));
    let mut params = Vec::new();
    let mut count = 0;
    let mut size = 0;
    for (row_size, values) in rows {
        if count > 0 && (count == max_rows || size + row_size > budget) {
            send_prepared(
                session,
                statement,
                &placeholders,
                count,
                std::mem::take(&mut params),
            )
            .await?;
            count = 0;
            size = 0;
        }
        params.extend(values);
        count += 1;
        size += row_size;
    }
    if count > 0 {
        send_prepared(session, statement, &placeholders, count, params).await?;
    }
    Ok(())
}

async fn send_prepared(
    session: &mut impl Session,
    statement: &Statement<'_>,
    placeholders: &str,
    rows: usize,
    params: Vec<Value>,
) -> Result<(), InsertError> {
    let mut sql = String::with_capacity(
        statement.prefix.len() + rows * (placeholders.len() + 1) + statement.suffix.len(),
    );
    sql.push_str(statement.prefix);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(placeholders);
    }
    sql.push_str(statement.suffix);
    // The connection caches the statement, so batches of the usual size prepare it once.
    session
        .exec_drop(sql, params)
        .await
        .map_err(classify("inserting rows (prepared)"))?;
    check_result(session, statement.one_affected_per_row.then_some(rows)).await
}

/// The method to send rows with on a server of `flavor`. `batch` is MariaDB's bulk execute;
/// MySQL has none, and `exec_batch` would send it one execute (one round trip) per row, so it
/// writes with `prepared` (multi-row, the same typed parameters). Falling back rather than
/// refusing keeps one configuration valid for a fleet on either server.
pub(super) fn method_on(configured: InsertMethod, flavor: Flavor) -> InsertMethod {
    match (configured, flavor) {
        (InsertMethod::Batch, Flavor::MySql) => InsertMethod::Prepared,
        (method, _) => method,
    }
}

/// One single-row prepared `INSERT` executed for every row with `exec_batch`, which sends
/// MariaDB one bulk command (`COM_STMT_BULK_EXECUTE`) per packet, or one execute per row on
/// servers without bulk support.
pub(super) async fn batch(
    session: &mut impl Session,
    target: &Target,
    rows: &[TableRow<'_>],
    budget: usize,
) -> Result<(), InsertError> {
    let mut params = Vec::with_capacity(rows.len());
    for row in rows {
        let size = target.row_size(row);
        if size > budget {
            return Err(too_large(row, size, budget));
        }
        // Already `Params`, which `exec_batch` would otherwise rebuild from each row's values.
        params.push(Params::Positional(target.params(row)));
    }
    let placeholders = vec!["?"; target.width()].join(",");
    let sql = format!("{}({placeholders})", target.insert_prefix());
    session
        .exec_batch(sql, params)
        .await
        .map_err(classify("inserting rows (batch)"))?;
    // Affected rows cover only the last bulk packet, so only warnings are checked.
    check_result(session, None).await
}

/// `LOAD DATA LOCAL INFILE` from memory: rows as tab-separated lines, sent in packets within
/// `budget`. Returns the rows stored.
pub(super) async fn load_data(
    session: &mut impl Session,
    infiles: &InfileServer,
    target: &Target,
    rows: &[TableRow<'_>],
    budget: usize,
) -> Result<u64, InsertError> {
    let data = infile_lines(target, rows);
    let ticket = infiles.register(Bytes::from(data), budget);
    // The name is ours (letters, digits and '-'), quoted all the same.
    let mut sql = String::from("LOAD DATA LOCAL INFILE ");
    push_sql_string(&mut sql, ticket.name());
    sql.push_str(&format!(
        " INTO TABLE {} CHARACTER SET utf8mb4 \
         FIELDS TERMINATED BY '\\t' ENCLOSED BY '' ESCAPED BY '\\\\' \
         LINES TERMINATED BY '\\n' STARTING BY '' {}",
        target.table, target.column_list
    ));
    let result = session
        .query_drop(sql)
        .await
        .map_err(classify("inserting rows (load_data)"));
    drop(ticket);
    result?;
    check_result(session, Some(rows.len())).await?;
    Ok(session.affected())
}

/// The rows as `LOAD DATA` input: one line each, fields separated by tabs.
pub(super) fn infile_lines(target: &Target, rows: &[TableRow<'_>]) -> Vec<u8> {
    let mut data = Vec::with_capacity(rows.iter().map(|r| target.row_size(r) / 2).sum());
    for row in rows {
        data.extend_from_slice(row.id.to_string().as_bytes());
        for value in row.values {
            data.push(b'\t');
            push_infile_field(&mut data, value);
        }
        if target.payload {
            data.push(b'\t');
            match row.payload {
                Some(text) => push_infile_text(&mut data, text),
                None => push_infile_field(&mut data, &SqlValue::Null),
            }
        }
        data.push(b'\n');
    }
    data
}
