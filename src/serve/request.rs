//! What a request asks, read and checked in pure code before anything reaches MySQL: its
//! parameters, its time range, the histogram's interval and where its counts come from, and
//! the errors that say whose fault a refusal is.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::mysql::Ident;
use crate::store::filter_language::{Condition, Literal, Op};
use crate::store::query::Count;
use crate::store::rollup_plan::RollupPlan;
use crate::time::{Zone, ceil_seconds, floor_seconds, format_utc, parse_time_at};

/// Why a request was not answered, and so its status code: 4xx the caller's fault, 5xx ours
/// or the database's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: a parameter cannot be used; `at` is the character of a filter where reading stopped.
    #[error("{parameter}: {message}")]
    BadParameter {
        parameter: String,
        message: String,
        at: Option<usize>,
    },
    /// 401: no token, or the wrong one.
    #[error("this server asks for a bearer token (Authorization: Bearer ...)")]
    Unauthorized,
    /// 404: no such table, rollup or path.
    #[error("{0}")]
    NotFound(String),
    /// 503: the database does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// 504: the statement ran past `serve.statement_timeout`.
    #[error("{0}")]
    Timeout(String),
    /// 500: anything else.
    #[error("{0}")]
    Internal(String),
    /// A request hyper refused before routing it (too long, or not HTTP/1), with its status.
    #[error("{message}")]
    Unreadable { status: u16, message: String },
}

impl ApiError {
    pub fn bad(parameter: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::BadParameter {
            parameter: parameter.to_string(),
            message: message.to_string(),
            at: None,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadParameter { .. } => 400,
            ApiError::Unauthorized => 401,
            ApiError::NotFound(_) => 404,
            ApiError::Unavailable(_) => 503,
            ApiError::Timeout(_) => 504,
            ApiError::Internal(_) => 500,
            ApiError::Unreadable { status, .. } => *status,
        }
    }

    /// `{"error": {"status": .., "message": .., "parameter": .., "at": ..}}`.
    pub fn body(&self) -> serde_json::Value {
        let mut error = serde_json::json!({
            "status": self.status(),
            "message": self.to_string(),
        });
        if let ApiError::BadParameter { parameter, at, .. } = self {
            error["parameter"] = parameter.as_str().into();
            if let Some(at) = at {
                error["at"] = (*at).into();
            }
        }
        serde_json::json!({ "error": error })
    }
}

/// A request's query string, each parameter once, none the endpoint does not know.
#[derive(Debug, Default)]
pub struct Params(BTreeMap<String, String>);

impl Params {
    pub fn parse(query: Option<&str>, known: &[&str]) -> Result<Params, ApiError> {
        let mut params = BTreeMap::new();
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if !known.contains(&name.as_ref()) {
                return Err(ApiError::bad(
                    &name,
                    format!("unknown parameter: use {}", known.join(", ")),
                ));
            }
            if params.insert(name.to_string(), value.to_string()).is_some() {
                return Err(ApiError::bad(&name, "given more than once"));
            }
        }
        Ok(Params(params))
    }

    /// The value, if given and not blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name).ok_or_else(|| ApiError::bad(name, "missing"))
    }

    /// A whole number in `1..=max`, or `default` when not given.
    pub fn count(&self, name: &str, default: u64, max: u64) -> Result<u64, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        match text.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad(
                name,
                format!("{text:?} is not a whole number from 1 to {max}"),
            )),
        }
    }

    /// `from` and `to` (with `tz` for times without an offset), `from` before `to`, at most
    /// `max_range` apart. They take what `query --from`/`--to` take, relative times (`-24h`,
    /// `now-24h`, `yesterday`) counted from `now`, one instant for both.
    pub fn time_range(
        &self,
        max_range: Duration,
        now: DateTime<Utc>,
    ) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
        let zone: Zone = match self.get("tz") {
            Some(tz) => tz.parse().map_err(|e| ApiError::bad("tz", e))?,
            None => Zone::UTC,
        };
        let at = |name: &str| {
            parse_time_at(self.required(name)?, &zone, now).map_err(|e| ApiError::bad(name, e))
        };
        let (from, to) = (at("from")?, at("to")?);
        if from >= to {
            return Err(ApiError::bad("to", "must be after from"));
        }
        let span = (to - from).to_std().unwrap_or(Duration::MAX);
        if span > max_range {
            return Err(ApiError::bad(
                "from",
                format!(
                    "the range is longer than serve.max_range ({})",
                    humantime::format_duration(max_range)
                ),
            ));
        }
        Ok((from, to))
    }
}

/// Unix seconds of a range, whole seconds covering it (IDs carry whole seconds).
pub fn unix_range(from: DateTime<Utc>, to: DateTime<Utc>) -> (u64, u64) {
    let clamp = |s: i64| u64::try_from(s).unwrap_or(0);
    (clamp(floor_seconds(from)), clamp(ceil_seconds(to)))
}

/// Intervals a histogram is cut into: they divide minutes, hours and days evenly.
const INTERVALS: &[u64] = &[
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
    86_400, 172_800, 604_800,
];

/// About how many bars a histogram gets when the interval is left to the server.
const TARGET_BARS: u64 = 100;
/// The most intervals one histogram may have.
pub const MAX_BARS: u64 = 2_000;

/// The interval asked for (seconds), or the smallest of [`INTERVALS`] giving at most
/// [`TARGET_BARS`] bars over `(from, to)`.
pub fn interval(params: &Params, (from, to): (u64, u64)) -> Result<u64, ApiError> {
    let span = to.saturating_sub(from).max(1);
    let bars = |interval: u64| span.div_ceil(interval);
    if params.get("interval").is_some() {
        let interval = params.count("interval", 1, u64::from(u32::MAX))?;
        if bars(interval) > MAX_BARS {
            return Err(ApiError::bad(
                "interval",
                format!("{interval} seconds makes more than {MAX_BARS} intervals of the range"),
            ));
        }
        return Ok(interval);
    }
    Ok(INTERVALS
        .iter()
        .copied()
        .find(|&i| bars(i) <= TARGET_BARS)
        .unwrap_or(INTERVALS[INTERVALS.len() - 1]))
}

/// Whether `plan`, a rollup of the table counted, counts exactly what the table would for a
/// histogram by `by` filtered by `filter`: `by` is one of its dimensions, and so is every
/// filtered column, each compared with `=` to a value other than the one a rollup stores for a
/// missing value ("", 0, false), which the table holds as NULL and no `=` matches. Both tables
/// compare text by its bytes (`utf8mb4_bin`). A rollup in buckets of event time counts other
/// intervals than the histogram's ID time: never.
pub fn rollup_answers(plan: &RollupPlan, by: &Ident, filter: &[Condition]) -> bool {
    let is_dimension = |column: &Ident| plan.dimensions.iter().any(|d| d.name == *column);
    let present = |value: &Literal| match value {
        Literal::Text(text) => !text.is_empty(),
        Literal::Int(i) => *i != 0,
        Literal::UInt(u) => *u != 0,
        Literal::Float(f) => *f != 0.0,
        // No dimension is a datetime.
        Literal::Datetime(_) => false,
    };
    plan.event_time.is_none()
        && is_dimension(by)
        && filter
            .iter()
            .all(|c| c.op == Op::Eq && is_dimension(&c.column) && present(&c.value))
}

/// Where one part of a histogram's range is counted: a rollup (its index among the
/// candidates') or the table itself, over `from <= t < to` (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub rollup: Option<usize>,
    pub from: u64,
    pub to: u64,
}

/// Splits `(from, to)` between the coarsest rollup whose bucket divides `interval` (candidates
/// are `(index, bucket seconds)`) and the table: the rollup takes the whole buckets inside the
/// range, the table the partial ones at either end, so every count is exact.
pub fn parts(from: u64, to: u64, interval: u64, candidates: &[(usize, u64)]) -> Vec<Part> {
    let table = |from, to| Part {
        rollup: None,
        from,
        to,
    };
    let best = candidates
        .iter()
        .filter(|(_, bucket)| *bucket > 0 && interval.is_multiple_of(*bucket))
        .max_by_key(|(_, bucket)| *bucket);
    let Some(&(index, bucket)) = best else {
        return vec![table(from, to)];
    };
    let inner_from = from.div_ceil(bucket) * bucket;
    let inner_to = to / bucket * bucket;
    if inner_from >= inner_to {
        return vec![table(from, to)];
    }
    let mut parts = Vec::new();
    if from < inner_from {
        parts.push(table(from, inner_from));
    }
    parts.push(Part {
        rollup: Some(index),
        from: inner_from,
        to: inner_to,
    });
    if inner_to < to {
        parts.push(table(inner_to, to));
    }
    parts
}

/// A histogram: one bar per interval from the one holding `from` to the one holding the last
/// second before `to`, each with its count per key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Histogram {
    pub from: String,
    pub to: String,
    pub interval: u64,
    pub by: String,
    /// Every key seen, most rows first.
    pub keys: Vec<String>,
    pub bars: Vec<Bar>,
    pub total: u64,
    /// Where the counts came from: `table NAME` or `rollup NAME`, with their ranges.
    pub sources: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bar {
    /// Unix seconds the interval starts at.
    pub start: u64,
    pub counts: BTreeMap<String, u64>,
}

/// The counts summed into their bars, empty bars included.
pub fn assemble(
    (from, to): (u64, u64),
    interval: u64,
    by: &str,
    counts: impl IntoIterator<Item = Count>,
    sources: Vec<String>,
) -> Histogram {
    let interval = interval.max(1);
    let first = from / interval * interval;
    let mut bars: Vec<Bar> = (first..to)
        .step_by(usize::try_from(interval).unwrap_or(usize::MAX))
        .map(|start| Bar {
            start,
            counts: BTreeMap::new(),
        })
        .collect();
    let mut per_key: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0u64;
    for count in counts {
        let Some(index) = count
            .start
            .checked_sub(first)
            .map(|offset| offset / interval)
            .and_then(|i| usize::try_from(i).ok())
        else {
            continue;
        };
        let Some(bar) = bars.get_mut(index) else {
            continue;
        };
        *bar.counts.entry(count.key.clone()).or_default() += count.n;
        *per_key.entry(count.key).or_default() += count.n;
        total += count.n;
    }
    let mut keys: Vec<(String, u64)> = per_key.into_iter().collect();
    keys.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Histogram {
        from: format_utc(from),
        to: format_utc(to),
        interval,
        by: by.to_string(),
        keys: keys.into_iter().map(|(k, _)| k).collect(),
        bars,
        total,
        sources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Result<Params, ApiError> {
        Params::parse(Some(query), &["from", "to", "tz", "limit", "interval"])
    }

    #[test]
    fn parameters_are_known_and_given_once() {
        let p = params("from=2040-01-01&to=2040-01-02&limit=5").unwrap();
        assert_eq!(p.get("limit"), Some("5"));
        assert_eq!(p.count("limit", 100, 1000).unwrap(), 5);
        assert_eq!(p.count("interval", 7, 1000).unwrap(), 7);
        let e = params("nosuch=1").unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(
            e.to_string().starts_with("nosuch: unknown parameter"),
            "{e}"
        );
        assert!(params("limit=1&limit=2").is_err());
        for bad in ["limit=0", "limit=1001", "limit=-1", "limit=x"] {
            let e = params(bad).unwrap().count("limit", 1, 1000).unwrap_err();
            assert_eq!(e.body()["error"]["parameter"], "limit", "{bad}");
        }
    }

    #[test]
    fn time_ranges_are_ordered_and_bounded() {
        let day = Duration::from_secs(86_400);
        let now = Utc::now();
        let p = params("from=2040-01-01T00:00:00Z&to=2040-01-01T00:15:00.5Z").unwrap();
        let (from, to) = p.time_range(day, now).unwrap();
        assert_eq!(unix_range(from, to).1 - unix_range(from, to).0, 901);
        let p = params("from=2040-01-01 08:00:00&to=2040-01-01 09:00:00&tz=%2B08:00").unwrap();
        let (from, _) = p.time_range(day, now).unwrap();
        assert_eq!(from.to_rfc3339(), "2040-01-01T00:00:00+00:00");
        let refused = |q: &str, parameter: &str| {
            let e = params(q).unwrap().time_range(day, now).unwrap_err();
            assert_eq!(e.body()["error"]["parameter"], parameter, "{q}: {e}");
        };
        refused("to=2040-01-02", "from");
        refused("from=yesterday&to=2040-01-02", "from");
        refused("from=2040-01-02&to=2040-01-01", "to");
        refused("from=2040-01-01&to=2040-01-03", "from");
        refused("from=2040-01-01&to=2040-01-02&tz=Mars/Base", "tz");
    }

    #[test]
    fn relative_times_read_as_the_cli_reads_them_from_one_now() {
        let day = Duration::from_secs(86_400);
        let now = DateTime::parse_from_rfc3339("2040-01-02T10:30:00Z")
            .unwrap()
            .to_utc();
        let range = |q: &str| {
            let (from, to) = params(q)
                .unwrap()
                .time_range(day, now)
                .unwrap_or_else(|e| panic!("{q}: {e}"));
            (from.to_rfc3339(), to.to_rfc3339())
        };
        let last_day = (
            "2040-01-01T10:30:00+00:00".to_string(),
            "2040-01-02T10:30:00+00:00".to_string(),
        );
        assert_eq!(range("from=-24h&to=now"), last_day);
        assert_eq!(range("from=now-24h&to=now"), last_day);
        assert_eq!(range("from=24h ago&to=now"), last_day);
        assert_eq!(range("from=now-1d&to=now"), last_day);
        assert_eq!(
            range("from=today&to=now&tz=%2B08:00"),
            (
                "2040-01-01T16:00:00+00:00".to_string(),
                "2040-01-02T10:30:00+00:00".to_string()
            )
        );
        let e = params("from=now-2d&to=now")
            .unwrap()
            .time_range(day, now)
            .unwrap_err();
        assert_eq!(e.body()["error"]["parameter"], "from", "{e}");
    }

    #[test]
    fn intervals_fit_the_range() {
        let none = params("").unwrap();
        assert_eq!(interval(&none, (0, 900)).unwrap(), 10);
        assert_eq!(interval(&none, (0, 3_600)).unwrap(), 60);
        assert_eq!(interval(&none, (0, 86_400)).unwrap(), 900);
        assert_eq!(interval(&none, (0, 1)).unwrap(), 1);
        assert_eq!(
            interval(&params("interval=30").unwrap(), (0, 900)).unwrap(),
            30
        );
        assert!(interval(&params("interval=1").unwrap(), (0, 86_400)).is_err());
    }

    #[test]
    fn rollups_count_whole_buckets_and_the_table_the_edges() {
        let table = |from, to| Part {
            rollup: None,
            from,
            to,
        };
        // Minute and hour rollups, 5-minute bars: the minute rollup is the one that divides.
        assert_eq!(
            parts(90, 1_230, 300, &[(0, 60), (1, 3_600)]),
            [
                table(90, 120),
                Part {
                    rollup: Some(0),
                    from: 120,
                    to: 1_200
                },
                table(1_200, 1_230)
            ]
        );
        assert_eq!(
            parts(3_600, 7_200, 3_600, &[(0, 60), (1, 3_600)]),
            [Part {
                rollup: Some(1),
                from: 3_600,
                to: 7_200
            }]
        );
        // No whole bucket inside, or no rollup that divides the interval: the table alone.
        assert_eq!(parts(10, 50, 60, &[(0, 60)]), [table(10, 50)]);
        assert_eq!(parts(0, 600, 30, &[(0, 60)]), [table(0, 600)]);
        assert_eq!(parts(0, 600, 60, &[]), [table(0, 600)]);
    }

    #[test]
    fn a_rollup_answers_filters_on_its_dimensions_by_equality() {
        use crate::store::filter_language::parse_filter;
        use crate::store::rollup_plan::{Bucket, RollupSettings, SourceTable};
        let settings = crate::config::Settings::defaults().unwrap().store;
        let table = Ident::new("logs").unwrap();
        let plan = RollupPlan::compile(
            &RollupSettings {
                name: "per_minute".into(),
                source: String::new(),
                bucket: Bucket::Minute,
                dimensions: vec!["level".into(), "host".into()],
                sums: vec![],
                mins: vec![],
                maxs: vec![],
                bucket_by: Default::default(),
            },
            &[SourceTable {
                name: &table,
                columns: &settings.columns,
                event_time: "",
            }],
        )
        .unwrap();
        let answers = |by: &str, filter: &str| {
            let filter = if filter.is_empty() {
                Vec::new()
            } else {
                parse_filter(filter, &settings.columns).unwrap()
            };
            rollup_answers(&plan, &Ident::new(by).unwrap(), &filter)
        };
        assert!(answers("level", ""));
        assert!(answers("level", "level = 'error' and host = 'web-1'"));
        assert!(answers("host", "level = 'error'"));
        // Not a dimension, not `=`, or the value a rollup stores for NULL.
        assert!(!answers("service", ""));
        assert!(!answers("level", "service = 'auth'"));
        assert!(!answers("level", "level != 'error'"));
        assert!(!answers("level", "host like 'web-%'"));
        assert!(!answers("level", "level = ''"));
    }

    #[test]
    fn counts_land_in_their_bars() {
        let c = |start, key: &str, n| Count {
            start,
            key: key.into(),
            n,
        };
        let h = assemble(
            (30, 200),
            60,
            "level",
            [
                c(0, "info", 2),
                c(120, "error", 1),
                c(0, "info", 3),
                c(60, "error", 1),
            ],
            vec!["table logs".into()],
        );
        assert_eq!(
            h.bars.iter().map(|b| b.start).collect::<Vec<_>>(),
            [0, 60, 120, 180]
        );
        assert_eq!(h.bars[0].counts["info"], 5);
        assert!(h.bars[3].counts.is_empty());
        assert_eq!(h.total, 7);
        assert_eq!(h.keys, ["info", "error"]);
    }
}
