//! Reading result rows without panicking: a value of an unexpected type is an error that says
//! which value, not a crash (`FromRow` for tuples panics on a mismatch).

use mysql_async::Row;
use mysql_async::prelude::FromValue;

use super::DbError;

/// Column `index` of `row` as a `T`; `what` names it in the error.
pub(crate) fn take<T: FromValue>(row: &mut Row, index: usize, what: &str) -> Result<T, DbError> {
    match row.take_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(DbError::Refused(format!(
            "unexpected value for {what}: {:?}",
            e.0
        ))),
        None => Err(DbError::Refused(format!(
            "the server's answer has no column for {what}"
        ))),
    }
}
