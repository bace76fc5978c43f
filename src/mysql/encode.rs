//! Values as MariaDB reads them: SQL literals for text INSERTs, fields of `LOAD DATA` input, and
//! bound parameters. Pure, so every escape is tested without a server.
//!
//! Literals assume the writer's session settings: `sql_mode` without `NO_BACKSLASH_ESCAPES` and
//! a utf8mb4 connection (see [`super::writer`]).

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use chrono::{Datelike, Timelike};
use mysql_async::Value;

use crate::mysql::SqlValue;

/// `'...'` with every character that could end or alter the literal escaped, as
/// `mysql_real_escape_string` does.
pub fn push_sql_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('\'');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        // All escaped characters are ASCII, so multi-byte UTF-8 sequences pass through intact.
        let escaped = match b {
            0 => "\\0",
            b'\'' => "\\'",
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            0x1a => "\\Z",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        out.push_str(escaped);
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('\'');
}

/// The value as an SQL literal.
pub fn push_sql_literal(out: &mut String, value: &SqlValue) {
    match value {
        SqlValue::Null => out.push_str("NULL"),
        SqlValue::Text(s) | SqlValue::Json(s) => push_sql_string(out, s),
        // Writing to a String cannot fail.
        SqlValue::Int(n) => {
            let _ = write!(out, "{n}");
        }
        SqlValue::Uint(n) => {
            let _ = write!(out, "{n}");
        }
        // Exponent form: the shortest digits that read back as the same double, and always an
        // approximate-value literal (never a 300-digit DECIMAL).
        SqlValue::Double(f) => {
            let _ = write!(out, "{f:e}");
        }
        SqlValue::Bool(b) => out.push(if *b { '1' } else { '0' }),
        SqlValue::Datetime(t) => {
            out.push('\'');
            push_datetime(out, t);
            out.push('\'');
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS.fff`, the column's millisecond precision.
fn push_datetime(out: &mut String, t: &NaiveDateTime) {
    let _ = write!(out, "{}", t.format("%Y-%m-%d %H:%M:%S%.3f"));
}

/// One field of `LOAD DATA` input in the default format (`FIELDS TERMINATED BY '\t' ESCAPED BY
/// '\\' LINES TERMINATED BY '\n'`, nothing enclosed): NULL is `\N`, and backslash, tab, newline,
/// carriage return and NUL are escaped so no data can end a field or a line.
pub fn push_infile_field(out: &mut Vec<u8>, value: &SqlValue) {
    match value {
        SqlValue::Null => out.extend_from_slice(b"\\N"),
        SqlValue::Text(s) | SqlValue::Json(s) => push_infile_text(out, s),
        other => {
            // Numbers, booleans and times: no character that needs escaping.
            let mut text = String::new();
            push_sql_literal(&mut text, other);
            out.extend_from_slice(text.trim_matches('\'').as_bytes());
        }
    }
}

pub fn push_infile_text(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len());
    for &b in s.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0 => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
}

/// The value as a bound parameter.
pub fn mysql_value(value: &SqlValue) -> Value {
    match value {
        SqlValue::Null => Value::NULL,
        SqlValue::Text(s) | SqlValue::Json(s) => Value::Bytes(s.as_bytes().to_vec()),
        SqlValue::Int(n) => Value::Int(*n),
        SqlValue::Uint(n) => Value::UInt(*n),
        SqlValue::Double(f) => Value::Double(*f),
        SqlValue::Bool(b) => Value::Int(i64::from(*b)),
        SqlValue::Datetime(t) => Value::Date(
            // DATETIME years are 1000..=9999 (checked by the mapping), so they fit u16.
            u16::try_from(t.year()).unwrap_or(0),
            t.month() as u8,
            t.day() as u8,
            t.hour() as u8,
            t.minute() as u8,
            t.second() as u8,
            t.nanosecond() / 1000,
        ),
    }
}

/// Bytes a value takes in a statement, for keeping statements under `max_allowed_packet`: an
/// upper bound for text literals (every byte escaped) and for bound parameters.
pub fn size_bound(value: &SqlValue) -> usize {
    match value {
        SqlValue::Text(s) | SqlValue::Json(s) => 2 * s.len() + 12,
        _ => 32,
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use proptest::prelude::*;

    use super::*;

    /// How MariaDB reads a quoted string literal (backslash escapes on), for checking the escaper
    /// from the other side.
    fn read_sql_string(literal: &str) -> Option<String> {
        let inner = literal.strip_prefix('\'')?.strip_suffix('\'')?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.push(match chars.next()? {
                    '0' => '\0',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'Z' => '\u{1a}',
                    'b' => '\u{8}',
                    other => other,
                }),
                // An unescaped quote would end the literal early.
                '\'' => return None,
                c => out.push(c),
            }
        }
        Some(out)
    }

    /// How `LOAD DATA` reads one line of tab-separated fields with `\` escapes.
    fn read_infile_line(line: &[u8]) -> Vec<Option<Vec<u8>>> {
        line.split(|&b| b == b'\t')
            .map(|field| {
                if field == b"\\N" {
                    return None;
                }
                let mut out = Vec::new();
                let mut bytes = field.iter();
                while let Some(&b) = bytes.next() {
                    if b == b'\\' {
                        out.push(match bytes.next() {
                            Some(b'0') => 0,
                            Some(b'n') => b'\n',
                            Some(b'r') => b'\r',
                            Some(b't') => b'\t',
                            Some(b'Z') => 0x1a,
                            Some(&other) => other,
                            None => b'\\',
                        });
                    } else {
                        out.push(b);
                    }
                }
                Some(out)
            })
            .collect()
    }

    fn literal(value: &SqlValue) -> String {
        let mut out = String::new();
        push_sql_literal(&mut out, value);
        out
    }

    #[test]
    fn sql_strings_escape_what_could_end_or_alter_them() {
        let mut out = String::new();
        push_sql_string(&mut out, "a'b\"c\\d\0e\nf\rg\u{1a}h😀");
        assert_eq!(out, r#"'a\'b\"c\\d\0e\nf\rg\Zh😀'"#);
        let mut out = String::new();
        push_sql_string(&mut out, "');DROP TABLE logs;--\\");
        assert_eq!(out, r"'\');DROP TABLE logs;--\\'");
    }

    #[test]
    fn literals_of_every_type() {
        assert_eq!(literal(&SqlValue::Null), "NULL");
        assert_eq!(literal(&SqlValue::Uint(u64::MAX)), "18446744073709551615");
        assert_eq!(literal(&SqlValue::Int(i64::MIN)), "-9223372036854775808");
        assert_eq!(literal(&SqlValue::Double(1.5)), "1.5e0");
        assert_eq!(literal(&SqlValue::Double(1e300)), "1e300");
        assert_eq!(literal(&SqlValue::Double(-0.1)), "-1e-1");
        assert_eq!(literal(&SqlValue::Bool(true)), "1");
        let t = NaiveDate::from_ymd_opt(2038, 1, 19)
            .unwrap()
            .and_hms_milli_opt(3, 14, 8, 7)
            .unwrap();
        assert_eq!(literal(&SqlValue::Datetime(t)), "'2038-01-19 03:14:08.007'");
        assert_eq!(
            literal(&SqlValue::Json(r#"{"a":"'"}"#.into())),
            r#"'{\"a\":\"\'\"}'"#
        );
    }

    #[test]
    fn infile_fields_escape_separators_and_mark_null() {
        let mut out = Vec::new();
        push_infile_field(&mut out, &SqlValue::Text("a\tb\nc\\d\0e\rf N".into()));
        out.push(b'\t');
        push_infile_field(&mut out, &SqlValue::Null);
        out.push(b'\t');
        push_infile_field(&mut out, &SqlValue::Text("\\N".into()));
        out.push(b'\t');
        push_infile_field(&mut out, &SqlValue::Text(String::new()));
        out.push(b'\t');
        push_infile_field(&mut out, &SqlValue::Text("NULL".into()));
        assert_eq!(out, b"a\\tb\\nc\\\\d\\0e\\rf N\t\\N\t\\\\N\t\tNULL");
        assert_eq!(
            read_infile_line(&out),
            vec![
                Some(b"a\tb\nc\\d\0e\rf N".to_vec()),
                None,
                Some(b"\\N".to_vec()),
                Some(Vec::new()),
                Some(b"NULL".to_vec()),
            ]
        );
    }

    #[test]
    fn infile_fields_of_other_types_are_bare() {
        let t = NaiveDate::from_ymd_opt(2024, 5, 1)
            .unwrap()
            .and_hms_milli_opt(12, 0, 0, 5)
            .unwrap();
        for (value, expected) in [
            (SqlValue::Datetime(t), &b"2024-05-01 12:00:00.005"[..]),
            (SqlValue::Uint(u64::MAX), b"18446744073709551615"),
            (SqlValue::Double(2.5), b"2.5e0"),
            (SqlValue::Bool(false), b"0"),
        ] {
            let mut out = Vec::new();
            push_infile_field(&mut out, &value);
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn bound_values_keep_their_type() {
        assert_eq!(
            mysql_value(&SqlValue::Uint(u64::MAX)),
            Value::UInt(u64::MAX)
        );
        assert_eq!(mysql_value(&SqlValue::Bool(true)), Value::Int(1));
        let t = NaiveDate::from_ymd_opt(9999, 12, 31)
            .unwrap()
            .and_hms_milli_opt(23, 59, 59, 999)
            .unwrap();
        assert_eq!(
            mysql_value(&SqlValue::Datetime(t)),
            Value::Date(9999, 12, 31, 23, 59, 59, 999_000)
        );
    }

    proptest! {
        #[test]
        fn any_string_reads_back_from_its_literal(s in any::<String>()) {
            let mut out = String::new();
            push_sql_string(&mut out, &s);
            prop_assert_eq!(read_sql_string(&out), Some(s.clone()));
            prop_assert!(out.len() <= size_bound(&SqlValue::Text(s)));
        }

        #[test]
        fn any_fields_read_back_from_an_infile_line(
            fields in prop::collection::vec(prop::option::of(any::<String>()), 1..6)
        ) {
            let mut line = Vec::new();
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    line.push(b'\t');
                }
                match field {
                    Some(s) => push_infile_field(&mut line, &SqlValue::Text(s.clone())),
                    None => push_infile_field(&mut line, &SqlValue::Null),
                }
            }
            prop_assert!(!line.contains(&b'\n'));
            let expected: Vec<Option<Vec<u8>>> =
                fields.iter().map(|f| f.as_ref().map(|s| s.as_bytes().to_vec())).collect();
            prop_assert_eq!(read_infile_line(&line), expected);
        }

        #[test]
        fn doubles_read_back_exactly_from_their_literal(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let text = literal(&SqlValue::Double(f));
            prop_assert_eq!(text.parse::<f64>().ok(), Some(f));
        }
    }
}
