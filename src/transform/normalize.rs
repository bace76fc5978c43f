//! Declarative clean-up of a message's document before its columns are mapped: the
//! `[[normalize]]` rule sets of the settings, compiled once and applied in place.
//!
//! Fields are JSON pointers (RFC 6901). A segment that meets an array is an index into it, for
//! reads and for writes to an element that exists; writes never grow arrays. Writes create
//! missing (or null) intermediate objects and fail through any other value.

use std::collections::HashMap;

use chrono::format::{Item, Parsed, StrftimeItems};
use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::convert::kind;
use super::settings::{NormalizeRule, NormalizeStep};
use super::{MAX_JSON_DEPTH, MapError};
use crate::time::Zone;

/// Longest quote of a value in a reason, in characters.
const QUOTE_CHARS: usize = 64;

/// The compiled rule sets of the settings, with the rules they were compiled from (shown as the
/// settings).
#[derive(Debug, Clone, Default)]
pub struct Normalizer {
    sets: Vec<RuleSet>,
    rules: Vec<NormalizeRule>,
}

impl Serialize for Normalizer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.rules.serialize(s)
    }
}

/// A rule set that does not compile, or the step of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", self.key())]
pub struct RuleError {
    /// Index of the rule set in `[[normalize]]`.
    pub set: usize,
    /// Index of the step in the set's `steps`; `None` for the set itself (its topics).
    pub step: Option<usize>,
    pub reason: String,
}

impl RuleError {
    /// The setting it is about: `normalize[set]` or `normalize[set].steps[step]`.
    pub fn key(&self) -> String {
        match self.step {
            Some(step) => format!("normalize[{}].steps[{step}]", self.set),
            None => format!("normalize[{}]", self.set),
        }
    }
}

#[derive(Debug, Clone)]
struct RuleSet {
    /// `None`: every topic. A handful of names: a linear scan beats hashing.
    topics: Option<Vec<Box<str>>>,
    steps: Vec<CompiledStep>,
}

impl RuleSet {
    fn applies_to(&self, topic: &str) -> bool {
        self.topics
            .as_ref()
            .is_none_or(|topics| topics.iter().any(|t| &**t == topic))
    }
}

#[derive(Debug, Clone)]
struct CompiledStep {
    op: &'static str,
    /// The field(s) as written, for errors.
    field: String,
    action: Action,
}

#[derive(Debug, Clone)]
enum Action {
    Rename { from: Pointer, to: Pointer },
    Extract { from: Pointer, to: Pointer },
    Drop(Pointer),
    Default(Pointer, Json),
    Lowercase(Pointer),
    Map(Pointer, HashMap<String, String>),
    Time(Pointer, Vec<TimeFormat>, Zone),
    Require(Pointer),
}

#[derive(Debug, Clone)]
enum TimeFormat {
    Rfc3339,
    EpochSeconds,
    EpochMillis,
    Pattern(String, Vec<Item<'static>>),
}

impl Normalizer {
    /// Compiles rule sets: pointers, formats, zones and values are checked here, once.
    pub fn compile(rules: Vec<NormalizeRule>) -> Result<Normalizer, RuleError> {
        let mut sets = Vec::with_capacity(rules.len());
        for (set, rule) in rules.iter().enumerate() {
            let refused = |step: Option<usize>, reason: String| RuleError { set, step, reason };
            if rule.topics.iter().any(|t| t.trim().is_empty()) {
                return Err(refused(None, "topics must not be empty names".into()));
            }
            if rule.steps.is_empty() {
                return Err(refused(None, "needs at least one step".into()));
            }
            let steps = rule
                .steps
                .iter()
                .enumerate()
                .map(|(step, spec)| {
                    compile_step(spec).map_err(|reason| refused(Some(step), reason))
                })
                .collect::<Result<Vec<_>, _>>()?;
            sets.push(RuleSet {
                topics: (!rule.topics.is_empty())
                    .then(|| rule.topics.iter().map(|t| t.as_str().into()).collect()),
                steps,
            });
        }
        Ok(Normalizer { sets, rules })
    }

    /// The rules it was compiled from.
    pub fn rules(&self) -> &[NormalizeRule] {
        &self.rules
    }

    /// Whether any rule set applies to this topic (so callers can skip re-serialising documents).
    pub fn applies_to(&self, topic: &str) -> bool {
        self.sets.iter().any(|set| set.applies_to(topic))
    }

    /// Applies the topic's rule sets in order to the document in place; `Ok(true)` if it changed.
    /// On an error the document may be partly changed: the message is a dead letter, kept as
    /// received.
    pub fn apply(&self, topic: &str, document: &mut Json) -> Result<bool, MapError> {
        let mut changed = false;
        for (set_index, set) in self.sets.iter().enumerate() {
            if !set.applies_to(topic) {
                continue;
            }
            for (step_index, step) in set.steps.iter().enumerate() {
                changed |= step.action.run(document).map_err(|reason| MapError::Rule {
                    set: set_index,
                    step: step_index,
                    op: step.op,
                    field: step.field.clone(),
                    reason,
                })?;
            }
        }
        Ok(changed)
    }
}

fn op_name(spec: &NormalizeStep) -> &'static str {
    match spec {
        NormalizeStep::Rename { .. } => "rename",
        NormalizeStep::Extract { .. } => "extract",
        NormalizeStep::Drop { .. } => "drop",
        NormalizeStep::Default { .. } => "default",
        NormalizeStep::Lowercase { .. } => "lowercase",
        NormalizeStep::Map { .. } => "map",
        NormalizeStep::Time { .. } => "time",
        NormalizeStep::Require { .. } => "require",
    }
}

fn field_text(spec: &NormalizeStep) -> String {
    match spec {
        NormalizeStep::Rename { from, to } | NormalizeStep::Extract { from, to } => {
            format!("{from} -> {to}")
        }
        NormalizeStep::Drop { field }
        | NormalizeStep::Default { field, .. }
        | NormalizeStep::Lowercase { field }
        | NormalizeStep::Map { field, .. }
        | NormalizeStep::Time { field, .. }
        | NormalizeStep::Require { field } => field.clone(),
    }
}

fn compile_step(spec: &NormalizeStep) -> Result<CompiledStep, String> {
    let action = match spec {
        NormalizeStep::Rename { from, to } => Action::Rename {
            from: Pointer::parse(from)?,
            to: Pointer::parse(to)?,
        },
        NormalizeStep::Extract { from, to } => Action::Extract {
            from: Pointer::parse(from)?,
            to: Pointer::parse(to)?,
        },
        NormalizeStep::Drop { field } => Action::Drop(Pointer::parse(field)?),
        NormalizeStep::Default { field, value } => {
            // TOML has no null; a null here is a float JSON cannot hold (nan, inf).
            if contains_null(value) {
                return Err(
                    "value is not representable as JSON (nan and inf are not numbers there)".into(),
                );
            }
            Action::Default(Pointer::parse(field)?, value.clone())
        }
        NormalizeStep::Lowercase { field } => Action::Lowercase(Pointer::parse(field)?),
        NormalizeStep::Map { field, values } => Action::Map(
            Pointer::parse(field)?,
            values.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ),
        NormalizeStep::Time {
            field,
            formats,
            zone,
        } => {
            if formats.is_empty() {
                return Err("formats must name at least one format".into());
            }
            let formats = formats
                .iter()
                .map(|f| TimeFormat::parse(f))
                .collect::<Result<Vec<_>, _>>()?;
            let zone: Zone = zone.parse().map_err(|e| format!("{e}"))?;
            Action::Time(Pointer::parse(field)?, formats, zone)
        }
        NormalizeStep::Require { field } => Action::Require(Pointer::parse(field)?),
    };
    Ok(CompiledStep {
        op: op_name(spec),
        field: field_text(spec),
        action,
    })
}

fn contains_null(value: &Json) -> bool {
    match value {
        Json::Null => true,
        Json::Array(items) => items.iter().any(contains_null),
        Json::Object(fields) => fields.values().any(contains_null),
        _ => false,
    }
}

impl TimeFormat {
    fn parse(text: &str) -> Result<TimeFormat, String> {
        Ok(match text {
            "rfc3339" => TimeFormat::Rfc3339,
            "epoch_seconds" => TimeFormat::EpochSeconds,
            "epoch_millis" => TimeFormat::EpochMillis,
            pattern => {
                if !pattern.contains('%') {
                    return Err(format!(
                        "format {pattern:?} is neither rfc3339, epoch_seconds, epoch_millis \
                         nor a strftime pattern"
                    ));
                }
                let items = StrftimeItems::new(pattern)
                    .parse_to_owned()
                    .map_err(|_| format!("format {pattern:?} is not a valid strftime pattern"))?;
                TimeFormat::Pattern(pattern.to_string(), items)
            }
        })
    }

    fn name(&self) -> &str {
        match self {
            TimeFormat::Rfc3339 => "rfc3339",
            TimeFormat::EpochSeconds => "epoch_seconds",
            TimeFormat::EpochMillis => "epoch_millis",
            TimeFormat::Pattern(pattern, _) => pattern,
        }
    }

    /// The instant `value` denotes in this format, if it is written in it.
    fn read(&self, value: &Json, zone: &Zone) -> Option<DateTime<Utc>> {
        match (self, value) {
            (TimeFormat::Rfc3339, Json::String(s)) => DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            (TimeFormat::EpochSeconds, Json::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    DateTime::from_timestamp(i, 0)
                } else {
                    // Rounded to the microsecond to undo binary representation error (1.001 s);
                    // `as` saturates far out of range, which the range check refuses.
                    let f = n.as_f64().filter(|f| f.is_finite())?;
                    let micros = (f * 1e6).round() as i128;
                    DateTime::from_timestamp_micros(i64::try_from(micros).ok()?)
                }
            }
            (TimeFormat::EpochSeconds, Json::String(s)) => epoch_seconds_text(s),
            (TimeFormat::EpochMillis, Json::Number(n)) => {
                DateTime::from_timestamp_millis(n.as_i64()?)
            }
            (TimeFormat::EpochMillis, Json::String(s)) if is_integer_text(s) => {
                DateTime::from_timestamp_millis(s.parse().ok()?)
            }
            (TimeFormat::Pattern(_, items), Json::String(s)) => read_pattern(s, items, zone),
            _ => None,
        }
    }
}

/// `-?digits`, what epoch strings look like (no sign `+`, spaces or exponents).
fn is_integer_text(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `-?digits[.digits]`, read exactly to the nanosecond (further digits are dropped).
fn epoch_seconds_text(s: &str) -> Option<DateTime<Utc>> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    if !is_integer_text(whole) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.ends_with('.') {
        return None;
    }
    let seconds: i64 = whole.parse().ok()?;
    let mut nanos: i64 = 0;
    for (i, digit) in fraction.bytes().take(9).enumerate() {
        nanos += i64::from(digit - b'0') * 10i64.pow(8 - i as u32);
    }
    let nanos = if whole.starts_with('-') {
        -nanos
    } else {
        nanos
    };
    let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    let seconds = i64::try_from(total.div_euclid(1_000_000_000)).ok()?;
    let nanos = u32::try_from(total.rem_euclid(1_000_000_000)).ok()?;
    DateTime::from_timestamp(seconds, nanos)
}

/// A strftime pattern's time: its own offset (`%z`) or Unix seconds (`%s`) if it has them,
/// otherwise wall-clock time in `zone` (see [`Zone::resolve`]: gaps and overlaps). A pattern
/// without a time of day is midnight.
fn read_pattern(s: &str, items: &[Item<'static>], zone: &Zone) -> Option<DateTime<Utc>> {
    let mut parsed = Parsed::new();
    chrono::format::parse(&mut parsed, s, items.iter()).ok()?;
    if parsed.offset().is_some() {
        return parsed.to_datetime().ok().map(|t| t.with_timezone(&Utc));
    }
    if parsed.timestamp().is_some() {
        return parsed
            .to_naive_datetime_with_offset(0)
            .ok()
            .map(|t| t.and_utc());
    }
    let local = match parsed.to_naive_datetime_with_offset(0) {
        Ok(local) => local,
        Err(_) if parsed.hour_div_12().is_none() && parsed.hour_mod_12().is_none() => {
            parsed.to_naive_date().ok()?.and_hms_opt(0, 0, 0)?
        }
        Err(_) => return None,
    };
    Some(zone.resolve(local))
}

impl Action {
    /// Runs the step; whether the document changed, or why the message fails.
    fn run(&self, document: &mut Json) -> Result<bool, String> {
        match self {
            Action::Rename { from, to } => match from.take(document) {
                Some(value) => to.write(document, value).map(|()| true),
                None => Ok(false),
            },
            Action::Extract { from, to } => match from.get(document) {
                Some(value) => {
                    let value = value.clone();
                    to.write(document, value).map(|()| true)
                }
                None => Ok(false),
            },
            Action::Drop(field) => Ok(field.take(document).is_some()),
            Action::Default(field, value) => match field.get(document) {
                Some(present) if !present.is_null() => Ok(false),
                _ => field.write(document, value.clone()).map(|()| true),
            },
            Action::Lowercase(field) => match field.get_mut(document) {
                None | Some(Json::Null) => Ok(false),
                Some(Json::String(s)) => {
                    // ASCII in place, without allocating; otherwise Unicode's full mapping.
                    if s.is_ascii() {
                        let changed = s.bytes().any(|b| b.is_ascii_uppercase());
                        s.make_ascii_lowercase();
                        return Ok(changed);
                    }
                    let lower = s.to_lowercase();
                    if lower == *s {
                        return Ok(false);
                    }
                    *s = lower;
                    Ok(true)
                }
                Some(other) => Err(format!("expected a string, got {}", kind(other))),
            },
            Action::Map(field, values) => {
                let Some(value) = field.get_mut(document) else {
                    return Ok(false);
                };
                let mapped = match value {
                    Json::Null => return Ok(false),
                    Json::String(s) => values.get(s.as_str()),
                    Json::Number(n) => values.get(n.to_string().as_str()),
                    Json::Bool(b) => values.get(if *b { "true" } else { "false" }),
                    other => {
                        return Err(format!(
                            "expected a string, number or boolean, got {}",
                            kind(other)
                        ));
                    }
                };
                match mapped {
                    Some(text) if value.as_str() != Some(text.as_str()) => {
                        *value = Json::String(text.clone());
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            Action::Time(field, formats, zone) => {
                let Some(value) = field.get_mut(document) else {
                    return Ok(false);
                };
                if value.is_null() {
                    return Ok(false);
                }
                let Some(instant) = formats.iter().find_map(|f| f.read(value, zone)) else {
                    let names: Vec<&str> = formats.iter().map(TimeFormat::name).collect();
                    return Err(format!(
                        "{} matches none of the formats {}",
                        describe(value),
                        names.join(", ")
                    ));
                };
                // RFC 3339 writes years 0000 to 9999 only.
                if !(0..=9999).contains(&instant.year()) {
                    return Err(format!(
                        "{} is a time in the year {}, outside 0000 to 9999",
                        describe(value),
                        instant.year()
                    ));
                }
                let text = instant.to_rfc3339_opts(SecondsFormat::Millis, true);
                if value.as_str() == Some(text.as_str()) {
                    return Ok(false);
                }
                *value = Json::String(text);
                Ok(true)
            }
            Action::Require(field) => match field.get(document) {
                None => Err("missing".into()),
                Some(Json::Null) => Err("null".into()),
                Some(_) => Ok(false),
            },
        }
    }
}

/// A value's kind, with a clip of it for scalars, for reasons.
fn describe(value: &Json) -> String {
    match value {
        Json::String(s) => format!("a string {}", clip(s)),
        Json::Number(n) => {
            let text = n.to_string();
            match text.char_indices().nth(QUOTE_CHARS) {
                Some((at, _)) => format!("a number {}...", &text[..at]),
                None => format!("a number {text}"),
            }
        }
        Json::Bool(b) => format!("a boolean {b}"),
        other => kind(other).to_string(),
    }
}

/// A value quoted in a reason, clipped so a huge field does not make a huge reason.
fn clip(s: &str) -> String {
    match s.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{:?}...", &s[..at]),
        None => format!("{s:?}"),
    }
}

/// A JSON pointer parsed once: its tokens unescaped, and each token's array index if it is one.
#[derive(Debug, Clone)]
struct Pointer {
    text: String,
    tokens: Vec<Token>,
}

#[derive(Debug, Clone)]
struct Token {
    key: String,
    index: Option<usize>,
}

impl Pointer {
    fn parse(text: &str) -> Result<Pointer, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "field {text:?} is not a JSON pointer: start it with /"
            ));
        };
        let tokens = rest
            .split('/')
            .map(|raw| {
                let key = unescape(raw).ok_or_else(|| {
                    format!(
                        "field {text:?} is not a JSON pointer: ~ must be followed by 0 (for ~) \
                         or 1 (for /)"
                    )
                })?;
                Ok(Token {
                    index: array_index(&key),
                    key,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        // Nothing deeper survives MariaDB's JSON check, so such a field is a mistake.
        if tokens.len() > MAX_JSON_DEPTH {
            return Err(format!(
                "field {text:?} is deeper than the {MAX_JSON_DEPTH} levels MariaDB's JSON takes"
            ));
        }
        Ok(Pointer {
            text: text.to_string(),
            tokens,
        })
    }

    fn get<'a>(&self, document: &'a Json) -> Option<&'a Json> {
        self.tokens
            .iter()
            .try_fold(document, |value, token| step(value, token))
    }

    fn get_mut<'a>(&self, document: &'a mut Json) -> Option<&'a mut Json> {
        self.tokens
            .iter()
            .try_fold(document, |value, token| step_mut(value, token))
    }

    /// Removes the value and returns it, if present.
    fn take(&self, document: &mut Json) -> Option<Json> {
        let (last, parents) = self.tokens.split_last()?;
        let parent = parents
            .iter()
            .try_fold(document, |value, token| step_mut(value, token))?;
        match parent {
            Json::Object(fields) => fields.remove(&last.key),
            Json::Array(items) => match last.index {
                Some(i) if i < items.len() => Some(items.remove(i)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Sets the value, creating missing or null intermediate objects.
    fn write(&self, document: &mut Json, value: Json) -> Result<(), String> {
        let mut current = document;
        for (depth, token) in self.tokens.iter().enumerate() {
            if current.is_null() {
                *current = Json::Object(Map::new());
            }
            let last = depth + 1 == self.tokens.len();
            current = match current {
                Json::Object(fields) => {
                    if last {
                        fields.insert(token.key.clone(), value);
                        return Ok(());
                    }
                    fields.entry(token.key.as_str()).or_insert(Json::Null)
                }
                Json::Array(items) => {
                    let len = items.len();
                    match token.index.and_then(|i| items.get_mut(i)) {
                        Some(item) => {
                            if last {
                                *item = value;
                                return Ok(());
                            }
                            item
                        }
                        None => {
                            return Err(format!(
                                "cannot write {}: {} is an array of {len} items without element {:?}",
                                self.text,
                                self.prefix(depth),
                                token.key
                            ));
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "cannot write {}: {} is {}, not an object",
                        self.text,
                        self.prefix(depth),
                        kind(other)
                    ));
                }
            };
        }
        // Pointers always have a token: "/" is the member named "".
        *current = value;
        Ok(())
    }

    /// The pointer to the value the first `tokens` tokens lead to, as written.
    fn prefix(&self, tokens: usize) -> &str {
        if tokens == 0 {
            return "the document";
        }
        match self.text.match_indices('/').nth(tokens) {
            Some((at, _)) => &self.text[..at],
            None => &self.text,
        }
    }
}

fn step<'a>(value: &'a Json, token: &Token) -> Option<&'a Json> {
    match value {
        Json::Object(fields) => fields.get(&token.key),
        Json::Array(items) => items.get(token.index?),
        _ => None,
    }
}

fn step_mut<'a>(value: &'a mut Json, token: &Token) -> Option<&'a mut Json> {
    match value {
        Json::Object(fields) => fields.get_mut(&token.key),
        Json::Array(items) => items.get_mut(token.index?),
        _ => None,
    }
}

/// RFC 6901 unescaping: `~1` is `/`, `~0` is `~`; any other `~` is malformed.
fn unescape(raw: &str) -> Option<String> {
    if !raw.contains('~') {
        return Some(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// An array index as RFC 6901 writes it: digits without leading zeros.
fn array_index(key: &str) -> Option<usize> {
    let valid = !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_digit())
        && (key == "0" || !key.starts_with('0'));
    if valid { key.parse().ok() } else { None }
}

#[cfg(test)]
mod tests;
