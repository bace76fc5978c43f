//! Parsing the times and time zones users type: `--from`, `--to`, `--tz`, `partitions.time_zone`.

use std::fmt;
use std::str::FromStr;

use chrono::{
    DateTime, Duration, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset,
    TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// A time zone: a fixed UTC offset or an IANA zone with its daylight-saving rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    Fixed(FixedOffset),
    Named(Tz),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error(
        "unknown time zone {0:?}: use an offset like +08:00 or an IANA name like Asia/Shanghai"
    )]
    UnknownZone(String),
    #[error(
        "cannot read time {0:?}: use YYYY-MM-DD, YYYY-MM-DD HH:MM:SS or RFC 3339 \
         (2017-07-01T08:00:00+08:00)"
    )]
    BadTime(String),
    #[error("cannot read date {0:?}: use {1}")]
    BadDate(String, &'static str),
    #[error(
        "cannot read time {0:?}: {1}; a relative time is now, today, yesterday, tomorrow, \
         -DURATION or +DURATION (-15m, now-2h, +1day), or DURATION ago (2h ago)"
    )]
    BadRelative(String, String),
}

impl Zone {
    pub const UTC: Zone = Zone::Named(Tz::UTC);

    /// The instant a wall-clock time in this zone denotes. An ambiguous time (clocks turned back)
    /// is its earlier instant; a time skipped by clocks turned forward is the first instant after
    /// the gap, so a period that starts inside a gap starts when the day really begins.
    pub fn resolve(&self, local: NaiveDateTime) -> DateTime<Utc> {
        match self {
            Zone::Fixed(offset) => resolve_in(offset, local),
            Zone::Named(tz) => resolve_in(tz, local),
        }
    }

    /// Wall-clock time in this zone at an instant.
    pub fn local(&self, instant: DateTime<Utc>) -> NaiveDateTime {
        match self {
            Zone::Fixed(offset) => instant.with_timezone(offset).naive_local(),
            Zone::Named(tz) => instant.with_timezone(tz).naive_local(),
        }
    }

    /// The UTC offset in force at an instant, in seconds.
    pub fn offset_seconds(&self, instant: DateTime<Utc>) -> i32 {
        match self {
            Zone::Fixed(offset) => offset.local_minus_utc(),
            Zone::Named(tz) => tz
                .offset_from_utc_datetime(&instant.naive_utc())
                .fix()
                .local_minus_utc(),
        }
    }
}

fn resolve_in<Z: TimeZone>(zone: &Z, local: NaiveDateTime) -> DateTime<Utc> {
    let mut candidate = local;
    // Offsets change on whole seconds, so in a gap the whole second of `local` is in the gap too
    // and the first wall time that exists after it is a whole second: the end of the gap. Gaps
    // are at most a day (Samoa skipped 2011-12-30); walk forward a second at a time.
    for _ in 0..=(24 * 3600) {
        match zone.from_local_datetime(&candidate) {
            LocalResult::Single(t) => return t.with_timezone(&Utc),
            LocalResult::Ambiguous(earlier, _) => return earlier.with_timezone(&Utc),
            LocalResult::None => {
                candidate = candidate.with_nanosecond(0).unwrap_or(candidate) + Duration::seconds(1)
            }
        }
    }
    // No zone has a day-long gap; treat the wall time as UTC rather than fail.
    Utc.from_utc_datetime(&local)
}

impl FromStr for Zone {
    type Err = TimeError;

    fn from_str(s: &str) -> Result<Zone, TimeError> {
        let text = s.trim();
        if text.eq_ignore_ascii_case("utc") || text == "Z" {
            return Ok(Zone::UTC);
        }
        if text.starts_with('+') || text.starts_with('-') {
            return parse_offset(text)
                .map(Zone::Fixed)
                .ok_or_else(|| TimeError::UnknownZone(s.to_string()));
        }
        text.parse::<Tz>()
            .map(Zone::Named)
            .map_err(|_| TimeError::UnknownZone(s.to_string()))
    }
}

/// `+08:00`, `+0800`, `+08`, `-05:30`.
fn parse_offset(text: &str) -> Option<FixedOffset> {
    let sign = if text.starts_with('-') { -1 } else { 1 };
    let digits: String = text[1..].chars().filter(|c| *c != ':').collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (hours, minutes) = match digits.len() {
        2 => (digits.parse::<i32>().ok()?, 0),
        4 => (
            digits[..2].parse::<i32>().ok()?,
            digits[2..].parse::<i32>().ok()?,
        ),
        _ => return None,
    };
    if hours > 18 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Fixed(offset) => write!(f, "{offset}"),
            Zone::Named(tz) => write!(f, "{}", tz.name()),
        }
    }
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS[.fff]` (also with `T`) in `zone`, or RFC 3339 with
/// its own offset (then `zone` is not used).
pub fn parse_time(text: &str, zone: &Zone) -> Result<DateTime<Utc>, TimeError> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(local) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(zone.resolve(local));
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(zone.resolve(date.and_time(NaiveTime::MIN)));
    }
    Err(TimeError::BadTime(text.to_string()))
}

/// Parses what a person types for a time: the absolute forms of [`parse_time`], or a time
/// relative to `now`: `now`; `today`, `yesterday` or `tomorrow` (midnight in `zone`);
/// `-DURATION`, `now-DURATION` or `DURATION ago` (before now) and `+DURATION` or
/// `now+DURATION` (after now), with durations as humantime reads them (`15m`, `2h 30m`,
/// `1day`). The CLI's `--from`/`--to`, the API's `from`/`to` and the explorer's URL all read
/// times with this one grammar.
pub fn parse_time_at(
    text: &str,
    zone: &Zone,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, TimeError> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let midnight = |days: i64| {
        let date = zone.local(now).date() + Duration::days(days);
        zone.resolve(date.and_time(NaiveTime::MIN))
    };
    match lower.as_str() {
        "now" => return Ok(now),
        "today" => return Ok(midnight(0)),
        "yesterday" => return Ok(midnight(-1)),
        "tomorrow" => return Ok(midnight(1)),
        _ => {}
    }
    // `now-15m` and `now + 1h`, as the explorer's URLs write them, are `-15m` and `+1h`.
    let lower = match lower.strip_prefix("now") {
        Some(rest) if rest.trim_start().starts_with(['-', '+']) => rest.trim_start(),
        _ => lower.as_str(),
    };
    let (sign, duration) = if let Some(rest) = lower.strip_prefix('-') {
        (-1, rest)
    } else if let Some(rest) = lower.strip_prefix('+') {
        (1, rest)
    } else if let Some(rest) = lower.strip_suffix("ago") {
        (-1, rest)
    } else {
        return parse_time(text, zone).map_err(|_| {
            TimeError::BadRelative(
                text.to_string(),
                "use YYYY-MM-DD, YYYY-MM-DD HH:MM:SS or RFC 3339".into(),
            )
        });
    };
    // `-05:00` and `+08:00` are not durations; an RFC 3339 time never starts with a sign.
    let duration = humantime::parse_duration(duration.trim())
        .map_err(|e| TimeError::BadRelative(text.to_string(), e.to_string()))?;
    let duration = Duration::from_std(duration)
        .map_err(|e| TimeError::BadRelative(text.to_string(), e.to_string()))?;
    let shifted = if sign < 0 {
        now.checked_sub_signed(duration)
    } else {
        now.checked_add_signed(duration)
    };
    shifted.ok_or_else(|| TimeError::BadRelative(text.to_string(), "out of range".into()))
}

/// Parses `YYYY-MM` (the first of the month) or `YYYY-MM-DD`.
pub fn parse_month_or_day(text: &str) -> Result<NaiveDate, TimeError> {
    let text = text.trim();
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .or_else(|_| NaiveDate::parse_from_str(&format!("{text}-01"), "%Y-%m-%d"))
        .map_err(|_| TimeError::BadDate(text.to_string(), "YYYY-MM or YYYY-MM-DD"))
}

/// Unix seconds of an instant, rounded down (for a range's start).
pub fn floor_seconds(t: DateTime<Utc>) -> i64 {
    t.timestamp()
}

/// Unix seconds of an instant, rounded up (for a range's exclusive end), so a range ending
/// mid-second still covers that second's IDs.
pub fn ceil_seconds(t: DateTime<Utc>) -> i64 {
    t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0)
}

/// Unix seconds of an instant as IDs count them: rounded down, and 0 for an instant before the
/// epoch (IDs start there).
pub fn unix_seconds(t: DateTime<Utc>) -> u64 {
    u64::try_from(floor_seconds(t)).unwrap_or(0)
}

/// RFC 3339 in UTC, whole seconds: how commands print times.
pub fn format_utc(unix_seconds: u64) -> String {
    i64::try_from(unix_seconds)
        .ok()
        .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("@{unix_seconds}"))
}
