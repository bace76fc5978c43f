//! One JSON value to one SQL value of a column's type.

use std::borrow::Cow;

use chrono::{DateTime, Datelike, NaiveDateTime, Utc};
use serde_json::{Number, Value as Json};

use crate::mysql::{MAX_TEXT_BYTES, SqlValue};
use crate::store::schema::ColumnType;

/// Integers up to 2^53 survive a trip through `f64`; beyond it a number written with a fraction
/// or exponent may already have been rounded by the parser.
const MAX_EXACT_FLOAT_INT: f64 = 9_007_199_254_740_992.0;

/// Epoch numbers of this magnitude or more are milliseconds (from 1973-03-03), smaller ones are
/// seconds (until the year 5138).
const EPOCH_MILLIS_FROM: f64 = 100_000_000_000.0;

/// The value for a column of `column_type`; `length` is a `string` column's limit in characters.
/// A longer string is an error, or with `truncate` is cut to fit and the flag returned is true.
/// The error is the reason, without the column name. A string of its own is moved, not copied.
pub fn convert(
    value: Cow<'_, Json>,
    column_type: ColumnType,
    length: usize,
    truncate: bool,
) -> Result<(SqlValue, bool), String> {
    if value.is_null() {
        return Ok((SqlValue::Null, false));
    }
    let scalar = match column_type {
        ColumnType::String => {
            let mut text = as_text(value)?;
            // Only a string with more bytes than `length` can have more characters.
            if text.len() > length
                && let Some((at, _)) = text.char_indices().nth(length)
            {
                if !truncate {
                    let chars = text.chars().count();
                    return Err(format!(
                        "{chars} characters, longer than the column's {length}"
                    ));
                }
                text.truncate(at);
                return Ok((SqlValue::Text(text), true));
            }
            return Ok((SqlValue::Text(text), false));
        }
        ColumnType::Text => {
            let mut text = as_text(value)?;
            if text.len() > MAX_TEXT_BYTES {
                if !truncate {
                    return Err(format!(
                        "{} bytes, longer than MEDIUMTEXT's {MAX_TEXT_BYTES}",
                        text.len()
                    ));
                }
                // Cut on a character boundary, so the text stays UTF-8.
                let mut at = MAX_TEXT_BYTES;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.truncate(at);
                return Ok((SqlValue::Text(text), true));
            }
            return Ok((SqlValue::Text(text), false));
        }
        ColumnType::Int => {
            let n = as_integer(&value)?;
            i64::try_from(n)
                .map(SqlValue::Int)
                .map_err(|_| format!("{n} is out of range for a signed 64-bit integer"))
        }
        ColumnType::Uint => {
            let n = as_integer(&value)?;
            u64::try_from(n)
                .map(SqlValue::Uint)
                .map_err(|_| format!("{n} is out of range for an unsigned 64-bit integer"))
        }
        ColumnType::Double => as_double(&value).map(SqlValue::Double),
        ColumnType::Bool => as_bool(&value).map(SqlValue::Bool),
        ColumnType::Datetime => as_datetime(&value).map(SqlValue::Datetime),
        ColumnType::Json => serde_json::to_string(&*value)
            .map(SqlValue::Json)
            .map_err(|e| format!("cannot write the value as JSON: {e}")),
    };
    // The other types are never cut.
    scalar.map(|value| (value, false))
}

/// A value's JSON type, for messages.
pub(super) fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Strings as they are; numbers and booleans as their JSON text.
fn as_text(value: Cow<'_, Json>) -> Result<String, String> {
    match value {
        Cow::Owned(Json::String(s)) => Ok(s),
        Cow::Borrowed(Json::String(s)) => Ok(s.clone()),
        _ => match &*value {
            Json::Number(n) => Ok(n.to_string()),
            Json::Bool(b) => Ok(b.to_string()),
            other => Err(format!(
                "expected a string, number or boolean, got {}",
                kind(other)
            )),
        },
    }
}

/// An exact integer from a number or a numeric string; i128 holds both 64-bit ranges.
fn as_integer(value: &Json) -> Result<i128, String> {
    match value {
        Json::Number(n) => number_to_integer(n),
        Json::String(s) => {
            if let Ok(n) = s.parse::<i128>() {
                return Ok(n);
            }
            let f = parse_finite(s)?;
            float_to_integer(f)
        }
        other => Err(format!(
            "expected a number or numeric string, got {}",
            kind(other)
        )),
    }
}

fn number_to_integer(n: &Number) -> Result<i128, String> {
    if let Some(i) = n.as_i64() {
        Ok(i128::from(i))
    } else if let Some(u) = n.as_u64() {
        Ok(i128::from(u))
    } else {
        // serde_json keeps every integer that fits 64 bits exactly; others arrive as f64.
        float_to_integer(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn float_to_integer(f: f64) -> Result<i128, String> {
    if !f.is_finite() || f.fract() != 0.0 {
        return Err(format!("{f} is not an integer"));
    }
    if f.abs() > MAX_EXACT_FLOAT_INT {
        return Err(format!(
            "{f} is too large to be taken exactly from a number with a fraction, an exponent \
             or more than 64 bits"
        ));
    }
    // Exact: |f| <= 2^53 and integral.
    Ok(f as i128)
}

fn parse_finite(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err(format!("string {} is not a finite number", clip(s))),
    }
}

fn as_double(value: &Json) -> Result<f64, String> {
    match value {
        // Without arbitrary precision every serde_json number is representable as f64.
        Json::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| format!("{n} is not a finite double")),
        Json::String(s) => parse_finite(s),
        other => Err(format!(
            "expected a number or numeric string, got {}",
            kind(other)
        )),
    }
}

fn as_bool(value: &Json) -> Result<bool, String> {
    match value {
        Json::Bool(b) => Ok(*b),
        Json::Number(n) => match n.as_u64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(format!("{n} is not a boolean (use true, false, 1 or 0)")),
        },
        Json::String(s) => match s.as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(format!(
                "string {} is not a boolean (use true, false, 1 or 0)",
                clip(s)
            )),
        },
        other => Err(format!("expected a boolean, got {}", kind(other))),
    }
}

/// RFC 3339 text (any offset, converted to UTC) or epoch seconds or milliseconds; sub-millisecond
/// digits are dropped, as `DATETIME(3)` would.
fn as_datetime(value: &Json) -> Result<NaiveDateTime, String> {
    let utc = match value {
        Json::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| format!("string {} is not an RFC 3339 time: {e}", clip(s)))?,
        Json::Number(n) => from_epoch(n)?,
        other => Err(format!(
            "expected an RFC 3339 string or epoch seconds or milliseconds, got {}",
            kind(other)
        ))?,
    };
    let millis = utc.timestamp_millis();
    let utc = DateTime::from_timestamp_millis(millis)
        .ok_or_else(|| format!("time {utc} is out of range"))?;
    if !(1000..=9999).contains(&utc.year()) {
        return Err(format!(
            "time {} is outside DATETIME's years 1000 to 9999",
            utc.to_rfc3339()
        ));
    }
    Ok(utc.naive_utc())
}

fn from_epoch(n: &Number) -> Result<DateTime<Utc>, String> {
    let out_of_range = || format!("epoch time {n} is outside DATETIME's years 1000 to 9999");
    let micros: i128 = match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => scale_integer(i128::from(i)),
        (None, Some(u)) => scale_integer(i128::from(u)),
        (None, None) => {
            let f = n
                .as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(out_of_range)?;
            // Rounded to the microsecond to undo binary representation error (1.001 s), then
            // truncated to the millisecond below like text times. `as` saturates far out of range.
            if f.abs() >= EPOCH_MILLIS_FROM {
                (f * 1e3).round() as i128
            } else {
                (f * 1e6).round() as i128
            }
        }
    };
    let millis = i64::try_from(micros.div_euclid(1000)).map_err(|_| out_of_range())?;
    DateTime::from_timestamp_millis(millis).ok_or_else(out_of_range)
}

fn scale_integer(n: i128) -> i128 {
    if n.unsigned_abs() >= EPOCH_MILLIS_FROM as u128 {
        n * 1_000
    } else {
        n * 1_000_000
    }
}

/// A value quoted in a reason, clipped so a huge field does not make a huge reason.
fn clip(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{:?}...", &s[..at]),
        None => format!("{s:?}"),
    }
}
