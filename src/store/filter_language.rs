//! The filter language (`--where`), parsed here in pure code and never passed to MySQL as text:
//!
//! ```text
//! filter     = condition { "and" condition }
//! condition  = column operator value
//! operator   = "=" | "!=" | "<" | "<=" | ">" | ">=" | "like" | "contains" | "icontains"
//! value      = 'text' | "text" | number
//! ```
//!
//! Columns are the mapped columns (`store.columns`), matched without regard to case. Keywords
//! (`and`, `like`, `contains`) are case-insensitive. In text, a backslash escapes the next
//! character (`\'`, `\"`, `\\`); `like` patterns use SQL's `%` and `_`. `contains` finds its
//! text anywhere in the value, character for character (`%` and `_` are plain characters
//! there); `icontains` after MySQL's `LOWER` on both sides. Both read only the ID ranges the
//! text filter (see [`super::text_filter`]) says may hold the text. Numbers are integers or
//! decimals, with an optional sign and exponent. Every value is bound as a statement parameter.

use std::fmt;

use chrono::NaiveDateTime;
use mysql_async::Value;

use super::schema::ColumnSpec;
use crate::mysql::encode::mysql_value;
use crate::mysql::{Ident, SqlValue};

/// A comparison in a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Like,
    /// The value holds the text, character for character.
    Contains,
    /// The value holds the text, both in lower case.
    IContains,
}

impl Op {
    fn sql(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "<>",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Like => "LIKE",
            Op::Contains => "contains",
            Op::IContains => "icontains",
        }
    }

    /// The condition on `column`, its value bound as the one parameter. A search is `LOCATE`
    /// rather than `LIKE`, so nothing in the text is a wildcard.
    pub(super) fn condition_sql(self, column: &Ident) -> String {
        match self {
            Op::Contains => format!("LOCATE(?, {column}) > 0"),
            Op::IContains => format!("LOCATE(LOWER(?), LOWER({column})) > 0"),
            other => format!("{column} {} ?", other.sql()),
        }
    }

    /// The operators written as a word.
    fn from_word(word: &str) -> Option<Op> {
        [Op::Like, Op::Contains, Op::IContains]
            .into_iter()
            .find(|op| op.sql().eq_ignore_ascii_case(word))
    }
}

/// A value in a filter, bound as a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Text(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// A time (UTC), for bounds on an event-time column.
    Datetime(NaiveDateTime),
}

impl Literal {
    pub(super) fn to_value(&self) -> Value {
        match self {
            Literal::Text(s) => Value::Bytes(s.clone().into_bytes()),
            Literal::Int(i) => Value::Int(*i),
            Literal::UInt(u) => Value::UInt(*u),
            Literal::Float(f) => Value::Double(*f),
            Literal::Datetime(t) => mysql_value(&SqlValue::Datetime(*t)),
        }
    }
}

/// `column op value`, with the column as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub column: Ident,
    pub op: Op,
    pub value: Literal,
}

/// Why a filter was refused; `at` is the character offset where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (at character {at})")]
pub struct FilterError {
    pub reason: String,
    pub at: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Text(String),
    Number(String),
    Op(Op),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => write!(f, "`{w}`"),
            Token::Text(_) => f.write_str("a quoted text"),
            Token::Number(n) => write!(f, "the number {n}"),
            Token::Op(op) => write!(f, "`{}`", op_text(*op)),
        }
    }
}

fn op_text(op: Op) -> &'static str {
    match op {
        Op::Ne => "!=",
        Op::Like => "like",
        other => other.sql(),
    }
}

const OPERATORS: &str = "= != < <= > >= like contains icontains";

/// Reads tokens one at a time, so the error reported is the first one in the text.
struct Lexer {
    chars: Vec<char>,
    i: usize,
}

impl Lexer {
    fn new(text: &str) -> Lexer {
        Lexer {
            chars: text.chars().collect(),
            i: 0,
        }
    }

    /// The next token and its character offset; `None` at the end.
    fn next_token(&mut self) -> Result<Option<(usize, Token)>, FilterError> {
        let chars = &self.chars;
        let mut i = self.i;
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        let Some(&c) = chars.get(i) else {
            self.i = i;
            return Ok(None);
        };
        let fail = |reason: String, at: usize| Err(FilterError { reason, at });
        let start = i;
        let token = if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Token::Word(chars[start..i].iter().collect())
        } else if c == '\'' || c == '"' {
            let mut value = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return fail(format!("text starting with {c} is not closed"), start),
                    Some('\\') => {
                        let Some(escaped) = chars.get(i + 1) else {
                            return fail("text ends with a lone backslash".into(), i);
                        };
                        value.push(*escaped);
                        i += 2;
                    }
                    Some(q) if *q == c => {
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        value.push(*other);
                        i += 1;
                    }
                }
            }
            Token::Text(value)
        } else if c.is_ascii_digit()
            || ((c == '-' || c == '+' || c == '.') && next_is_digit(chars, i))
        {
            i += 1;
            while i < chars.len() {
                let d = chars[i];
                let exponent_sign = (d == '-' || d == '+') && matches!(chars[i - 1], 'e' | 'E');
                if d.is_ascii_digit() || d == '.' || d == 'e' || d == 'E' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            Token::Number(chars[start..i].iter().collect())
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let (op, len) = match (two.as_str(), c) {
                ("<=", _) => (Op::Le, 2),
                (">=", _) => (Op::Ge, 2),
                ("!=", _) => (Op::Ne, 2),
                (_, '=') => (Op::Eq, 1),
                (_, '<') => (Op::Lt, 1),
                (_, '>') => (Op::Gt, 1),
                _ => {
                    return fail(
                        format!(
                            "unexpected character {c:?}: a filter is `column OP value` joined by \
                             `and`, OP one of {OPERATORS}, value a quoted text or a number"
                        ),
                        start,
                    );
                }
            };
            i += len;
            Token::Op(op)
        };
        self.i = i;
        Ok(Some((start, token)))
    }
}

fn next_is_digit(chars: &[char], i: usize) -> bool {
    chars
        .get(i + 1)
        .is_some_and(|c| c.is_ascii_digit() || *c == '.')
}

fn number(text: &str, at: usize) -> Result<Literal, FilterError> {
    let bad = || FilterError {
        reason: format!("{text:?} is not a number"),
        at,
    };
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.bytes().all(|b| b.is_ascii_digit()) {
        return digits.parse().map(Literal::UInt).map_err(|_| bad());
    }
    if let Some(rest) = digits.strip_prefix('-')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return digits.parse().map(Literal::Int).map_err(|_| bad());
    }
    match digits.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Literal::Float(f)),
        _ => Err(bad()),
    }
}

/// Parses a filter against the mapped columns. An empty or blank filter is refused: leave out
/// `--where` instead.
pub fn parse_filter(text: &str, columns: &[ColumnSpec]) -> Result<Vec<Condition>, FilterError> {
    let mut lexer = Lexer::new(text);
    let end = text.chars().count();
    let known = || {
        columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut conditions = Vec::new();
    loop {
        // column
        let column = match lexer.next_token()? {
            Some((at, Token::Word(word))) => {
                let Some(spec) = columns.iter().find(|c| c.name.eq_ignore_ascii_case(&word)) else {
                    return Err(FilterError {
                        reason: format!("unknown column `{word}`: use one of {}", known()),
                        at,
                    });
                };
                Ident::new(&spec.name).map_err(|e| FilterError {
                    reason: e.to_string(),
                    at,
                })?
            }
            Some((at, other)) => {
                return Err(FilterError {
                    reason: format!("expected a column name, found {other}"),
                    at,
                });
            }
            None => {
                let what = if conditions.is_empty() {
                    "the filter is empty"
                } else {
                    "nothing after `and`"
                };
                return Err(FilterError {
                    reason: format!("expected a condition `column OP value`: {what}"),
                    at: end,
                });
            }
        };
        // operator
        let op = match lexer.next_token()? {
            Some((_, Token::Op(op))) => op,
            Some((at, other)) => {
                let word = match &other {
                    Token::Word(w) => Op::from_word(w),
                    _ => None,
                };
                let Some(op) = word else {
                    return Err(FilterError {
                        reason: format!(
                            "expected one of {OPERATORS} after {column}, found {other}"
                        ),
                        at,
                    });
                };
                op
            }
            None => {
                return Err(FilterError {
                    reason: format!("expected one of {OPERATORS} after {column}"),
                    at: end,
                });
            }
        };
        // value
        let value = match lexer.next_token()? {
            Some((_, Token::Text(t))) => Literal::Text(t),
            Some((at, Token::Number(n))) => number(&n, at)?,
            Some((at, other)) => {
                return Err(FilterError {
                    reason: format!("expected a value (a quoted text or a number), found {other}"),
                    at,
                });
            }
            None => {
                return Err(FilterError {
                    reason: "expected a value (a quoted text or a number)".into(),
                    at: end,
                });
            }
        };
        if matches!(op, Op::Like | Op::Contains | Op::IContains)
            && !matches!(value, Literal::Text(_))
        {
            return Err(FilterError {
                reason: format!("{} needs a quoted text", op_text(op)),
                at: end,
            });
        }
        conditions.push(Condition { column, op, value });
        // `and`, or the end
        match lexer.next_token()? {
            None => return Ok(conditions),
            Some((_, Token::Word(w))) if w.eq_ignore_ascii_case("and") => {}
            Some((at, other)) => {
                return Err(FilterError {
                    reason: format!(
                        "expected `and` or the end after a condition, found {other} \
                         (conditions can only be joined by `and`)"
                    ),
                    at,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Sources};

    fn parse(text: &str) -> Result<Vec<Condition>, FilterError> {
        let sources = Sources {
            env: Some(Default::default()),
            ..Default::default()
        };
        parse_filter(text, &Settings::load(&sources).unwrap().log_table().columns)
    }

    fn cond(column: &str, op: Op, value: Literal) -> Condition {
        Condition {
            column: Ident::new(column).unwrap(),
            op,
            value,
        }
    }

    #[test]
    fn conditions_joined_by_and() {
        assert_eq!(
            parse(r#"level = "error" AND host != 'web-1' and service like "api%""#).unwrap(),
            [
                cond("level", Op::Eq, Literal::Text("error".into())),
                cond("host", Op::Ne, Literal::Text("web-1".into())),
                cond("service", Op::Like, Literal::Text("api%".into())),
            ]
        );
        // Columns match without regard to case and keep their configured name.
        assert_eq!(
            parse("LEVEL='x'").unwrap(),
            [cond("level", Op::Eq, Literal::Text("x".into()))]
        );
    }

    #[test]
    fn every_operator() {
        for (text, op) in [
            ("=", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            ("<=", Op::Le),
            (">", Op::Gt),
            (">=", Op::Ge),
            ("LIKE", Op::Like),
            ("contains", Op::Contains),
            ("ICONTAINS", Op::IContains),
        ] {
            let filter = format!("message {text} 'm'");
            assert_eq!(parse(&filter).unwrap()[0].op, op, "{filter}");
        }
        assert!(parse("message contains 5").is_err());
        assert!(parse("message containing 'x'").is_err());
    }

    #[test]
    fn numbers_keep_their_kind() {
        let value = |text: &str| parse(&format!("host = {text}")).unwrap()[0].value.clone();
        assert_eq!(value("18446744073709551615"), Literal::UInt(u64::MAX));
        assert_eq!(value("-9223372036854775808"), Literal::Int(i64::MIN));
        assert_eq!(value("+7"), Literal::UInt(7));
        assert_eq!(value("2.5"), Literal::Float(2.5));
        assert_eq!(value("-1e3"), Literal::Float(-1000.0));
        assert_eq!(value(".5"), Literal::Float(0.5));
        assert!(parse("host = 18446744073709551616").is_err());
        assert!(parse("host = 1.2.3").is_err());
        assert!(parse("host = 1e999").is_err());
    }

    #[test]
    fn escapes_in_text() {
        let value = parse(r#"message = 'it\'s "x" \\ y'"#).unwrap()[0]
            .value
            .clone();
        assert_eq!(value, Literal::Text(r#"it's "x" \ y"#.into()));
        let value = parse(r#"message = "'; DROP TABLE logs; --""#).unwrap()[0]
            .value
            .clone();
        assert_eq!(value, Literal::Text("'; DROP TABLE logs; --".into()));
    }

    fn refused(text: &str, needle: &str) {
        match parse(text) {
            Ok(c) => panic!("{text:?} accepted: {c:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{text:?}: {e}"),
        }
    }

    #[test]
    fn hostile_or_broken_filters_are_refused() {
        refused("level = 'x'; DROP TABLE logs", "unexpected character ';'");
        refused("level = 'x' OR 1 = 1", "found `OR`");
        refused("level = 'x' or level = 'y'", "only be joined by `and`");
        refused("1 = 1", "expected a column name, found the number 1");
        refused("id = 5", "unknown column `id`");
        refused("payload = 'x'", "unknown column `payload`");
        refused(
            "nosuch = 1",
            "use one of event_time, level, host, service, message",
        );
        refused("level = 'x' UNION SELECT 1", "found `UNION`");
        refused("level = (SELECT 1)", "unexpected character '('");
        refused("level = x", "found `x`");
        refused("level = 'unterminated", "not closed");
        refused("level = \"x\\", "lone backslash");
        refused("`level` = 'x'", "unexpected character '`'");
        refused("level = 'x' -- comment", "unexpected character '-'");
        refused("level = 'x' /* c */", "unexpected character '/'");
        refused("level 'x'", "expected one of = != < <= > >= like");
        refused("level =", "expected a value");
        refused("level = 'x' and", "nothing after `and`");
        refused("", "the filter is empty");
        refused("   ", "the filter is empty");
        refused("level like 5", "like needs a quoted text");
        refused("level == 'x'", "expected a value");
        refused("level <> 'x'", "expected a value");
        refused("level = 'x' and and", "unknown column `and`");
        refused("sleep(5) = 1", "unknown column `sleep`");
        refused("level = 'a'\0", "unexpected character");
    }
}
