//! Reading result rows without panicking: a value of an unexpected type is an error that says
//! which value, not a crash (`FromRow` for tuples panics on a mismatch).

use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};

use super::DbError;

/// Column `index` of `row` as a `T`; `what` names it in the error.
pub(crate) fn take<T: FromValue>(row: &mut Row, index: usize, what: &str) -> Result<T, DbError> {
    match row.take_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(DbError::Invariant(format!(
            "unexpected value for {what}: {:?}",
            e.0
        ))),
        None => Err(DbError::Invariant(format!(
            "the server's answer has no column for {what}"
        ))),
    }
}

/// The first column of a query's first row (`None`: no row) as a `T`, for queries of one value;
/// `what` names it in the error.
pub(crate) fn first<T: FromValue>(row: Option<Row>, what: &str) -> Result<Option<T>, DbError> {
    row.map(|mut row| take(&mut row, 0, what)).transpose()
}

/// Column `index` of `row` as text, whatever it holds: bytes that are not UTF-8 (a message in
/// another character set) are replaced with U+FFFD, other values written out, NULL and a
/// missing column empty. For text that is only shown, such as a server's message.
pub(crate) fn text_lossy(row: &Row, index: usize) -> String {
    match row.as_ref(index) {
        Some(Value::Bytes(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::NULL) | None => String::new(),
        Some(other) => other.as_sql(false),
    }
}
