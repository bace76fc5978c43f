//! A line stored once (`store.payload = "residual"`): the columns hold what they map, and the
//! `payload` column only the rest of the document, its *residual*. Readers put the document
//! back together from the two, equal as JSON (same keys, values and types) to the document the
//! writer had.
//!
//! Pure: no I/O. [`split`] takes out of a document each value that its column gives back
//! exactly ([`as_json`] of the column's value equals it); a value its column changed (a time
//! parsed into `DATETIME`, a string cut to the column, a number past 2^53 in a `DOUBLE`, a
//! number in a string column) stays in the residual. [`rejoin`] puts each column's value back
//! where the residual has nothing, shallowest pointers first. So a full document is a valid
//! residual too (rejoin adds nothing to it): rows written with `full` and with `residual` read
//! back alike, and the mode can change on a live table.
//!
//! Rules that keep the rejoin unambiguous: only object members are taken out (an array element
//! would shift its followers), never the whole document; a `null` stays (a column's NULL also
//! means "missing"); an object emptied by taking out its members goes too (it is made again
//! when a member is put back), an object that was empty stays.

use chrono::SecondsFormat;
use serde_json::{Map, Value as Json};

use crate::mysql::SqlValue;

/// One reference token of a JSON pointer (RFC 6901): an object member's name, and the array
/// index it also reads as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub key: String,
    pub index: Option<usize>,
}

/// A pointer's tokens, unescaped as [`Json::pointer`] does; `None` if it finds nothing (it
/// does not start with `/`). The empty pointer is the whole document.
pub fn parse_pointer(pointer: &str) -> Option<Vec<Token>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|raw| {
                let key = raw.replace("~1", "/").replace("~0", "~");
                Token {
                    index: array_index(&key),
                    key,
                }
            })
            .collect(),
    )
}

/// An array index as serde_json reads one: digits, no sign, no leading zero.
fn array_index(key: &str) -> Option<usize> {
    if key.starts_with('+') || (key.starts_with('0') && key.len() != 1) {
        return None;
    }
    key.parse().ok()
}

/// The value at `tokens` in `document`, as [`Json::pointer`] finds it.
pub fn follow<'a>(document: &'a Json, tokens: &[Token]) -> Option<&'a Json> {
    tokens
        .iter()
        .try_fold(document, |value, token| match value {
            Json::Object(fields) => fields.get(&token.key),
            Json::Array(items) => items.get(token.index?),
            _ => None,
        })
}

/// What a column's value reads back as: the JSON value it stands for in the document. Times
/// are RFC 3339 UTC with milliseconds, JSON columns their value (text that is not JSON, which
/// the writer never stores, as a string).
pub fn as_json(value: &SqlValue) -> Json {
    match value {
        SqlValue::Null => Json::Null,
        SqlValue::Text(text) => Json::String(text.clone()),
        SqlValue::Int(n) => Json::from(*n),
        SqlValue::Uint(n) => Json::from(*n),
        SqlValue::Double(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        SqlValue::Bool(b) => Json::Bool(*b),
        SqlValue::Datetime(t) => {
            Json::String(t.and_utc().to_rfc3339_opts(SecondsFormat::Millis, true))
        }
        SqlValue::Json(text) => {
            serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.clone()))
        }
    }
}

/// Whether `value` reads back as `original`: `as_json(value) == *original`, without building
/// the value for the common types.
pub fn reads_back_as(value: &SqlValue, original: &Json) -> bool {
    match (value, original) {
        (SqlValue::Text(text), Json::String(s)) => text == s,
        (SqlValue::Int(n), Json::Number(m)) => !m.is_f64() && m.as_i64() == Some(*n),
        (SqlValue::Uint(n), Json::Number(m)) => !m.is_f64() && m.as_u64() == Some(*n),
        (SqlValue::Double(f), Json::Number(m)) => m.is_f64() && m.as_f64() == Some(*f),
        (SqlValue::Bool(b), Json::Bool(o)) => b == o,
        (SqlValue::Datetime(_) | SqlValue::Json(_), _) => as_json(value) == *original,
        _ => false,
    }
}

/// Takes out of `document` every value its columns give back exactly: `columns` are each
/// column's pointer (`None`: it finds nothing) and value. A value that two columns map stays
/// unless both give it back. What is left is the residual.
pub fn split<'a>(
    document: &mut Json,
    columns: impl IntoIterator<Item = (Option<&'a [Token]>, &'a SqlValue)>,
) {
    let mut checked: Vec<(&[Token], bool)> = Vec::new();
    for (tokens, value) in columns {
        let Some(tokens) = tokens else { continue };
        if tokens.is_empty() || *value == SqlValue::Null {
            continue;
        }
        let exact = follow(document, tokens).is_some_and(|original| reads_back_as(value, original))
            && in_object(document, tokens);
        checked.push((tokens, exact));
    }
    let vetoed: Vec<&[Token]> = checked
        .iter()
        .filter(|(_, exact)| !exact)
        .map(|(tokens, _)| *tokens)
        .collect();
    for (tokens, _) in checked.iter().filter(|(t, _)| !vetoed.contains(t)) {
        take_out(document, tokens, 0, &vetoed);
    }
}

/// Whether the value at `tokens` (which exists) is an object member.
fn in_object(document: &Json, tokens: &[Token]) -> bool {
    tokens
        .split_last()
        .is_some_and(|(_, parent)| matches!(follow(document, parent), Some(Json::Object(_))))
}

/// Removes the member at `path` from `value`, found at its first `depth` tokens; returns
/// whether `value` is now an object emptied by it, which its parent then removes too (unless a
/// column keeps a value there: `vetoed`).
fn take_out(value: &mut Json, path: &[Token], depth: usize, vetoed: &[&[Token]]) -> bool {
    let Some(token) = path.get(depth) else {
        return false;
    };
    match value {
        Json::Object(fields) => {
            if depth + 1 < path.len() {
                let emptied = fields
                    .get_mut(&token.key)
                    .is_some_and(|child| take_out(child, path, depth + 1, vetoed));
                if !emptied {
                    return false;
                }
            }
            fields.remove(&token.key);
            fields.is_empty() && !vetoed.contains(&&path[..depth])
        }
        Json::Array(items) => {
            // Array elements stay, even emptied objects: removing one would shift the others.
            if let Some(child) = token.index.and_then(|i| items.get_mut(i)) {
                take_out(child, path, depth + 1, vetoed);
            }
            false
        }
        _ => false,
    }
}

/// The residual as the `payload` column keeps it: `None` (NULL) for an empty object.
pub fn residual_text(residual: &Json) -> Option<String> {
    match residual {
        Json::Object(fields) if fields.is_empty() => None,
        other => Some(other.to_string()),
    }
}

/// The document again, from its residual (`None`: the column was NULL, an empty object) and
/// each column's pointer and value as read ([`as_json`]).
pub fn rejoin<'a>(
    residual: Option<Json>,
    columns: impl IntoIterator<Item = (Option<&'a [Token]>, &'a Json)>,
) -> Json {
    let mut document = residual.unwrap_or_else(|| Json::Object(Map::new()));
    let mut columns: Vec<(&[Token], &Json)> = columns
        .into_iter()
        .filter_map(|(tokens, value)| Some((tokens?, value)))
        .filter(|(tokens, value)| !tokens.is_empty() && !value.is_null())
        .collect();
    // Shallowest first: a value taken out with its parent comes back with it.
    columns.sort_by_key(|(tokens, _)| tokens.len());
    for (tokens, value) in columns {
        put_back(&mut document, tokens, value);
    }
    document
}

/// Puts `value` at `tokens` if nothing is there, making the objects on the way that were
/// emptied and removed.
fn put_back(document: &mut Json, tokens: &[Token], value: &Json) {
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut at = document;
    for token in parents {
        at = match at {
            Json::Object(fields) => fields
                .entry(token.key.clone())
                .or_insert_with(|| Json::Object(Map::new())),
            Json::Array(items) => match token.index.and_then(|i| items.get_mut(i)) {
                Some(item) => item,
                None => return,
            },
            _ => return,
        };
    }
    if let Json::Object(fields) = at {
        fields
            .entry(last.key.clone())
            .or_insert_with(|| value.clone());
    }
}

#[cfg(test)]
mod tests;
