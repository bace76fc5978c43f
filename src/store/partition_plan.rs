//! All the partition maths, pure and tested without a server: periods, the bounds of a plan,
//! reading bounds back from the catalog, checking an existing table's partitioning, and
//! deciding what maintenance adds and drops.
//!
//! MySQL refuses bit operators in a partition expression, so each bound is the literal
//! `(period start in the configured zone, as seconds since the ID epoch) << 32`: the first ID
//! of the next period.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Datelike, Months, NaiveDate, NaiveTime, Utc};
use serde::Serialize;

use crate::id::{IdError, Layout};
use crate::mysql::Ident;
use crate::time::{Zone, format_utc};

/// MariaDB's limit on partitions per table, `pmax` included.
pub const MAX_PARTITIONS: usize = 8192;

/// How a table is partitioned and kept: the settings every partition bound depends on.
#[derive(Debug, Clone)]
pub struct PartitionScheme {
    pub layout: Layout,
    pub period: Period,
    pub zone: Zone,
    /// Empty future partitions kept beyond the current one.
    pub ahead: u32,
    /// Partitions whose whole period is older than this are dropped; `None` keeps them.
    pub retention: Option<Duration>,
}

/// How much time one partition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    /// ISO week, Monday to Sunday.
    Week,
    Month,
}

impl Period {
    /// The first day of the period containing `date`.
    pub fn start_of(self, date: NaiveDate) -> NaiveDate {
        match self {
            Period::Day => date,
            // Clipped to the calendar's first day, which no ID layout reaches anyway.
            Period::Week => date
                .checked_sub_days(chrono::Days::new(u64::from(
                    date.weekday().num_days_from_monday(),
                )))
                .unwrap_or(NaiveDate::MIN),
            Period::Month => date.with_day(1).unwrap_or(date),
        }
    }

    /// The first day of the period after the one starting at `start`.
    pub fn next_start(self, start: NaiveDate) -> Option<NaiveDate> {
        match self {
            Period::Day => start.checked_add_days(chrono::Days::new(1)),
            Period::Week => start.checked_add_days(chrono::Days::new(7)),
            Period::Month => start.checked_add_months(Months::new(1)),
        }
    }

    /// `p20170701` (day), `p2017w27` (ISO week-numbering year and week), `p201707` (month).
    pub fn partition_name(self, start: NaiveDate) -> String {
        match self {
            Period::Day => format!("p{}", start.format("%Y%m%d")),
            Period::Week => {
                let week = start.iso_week();
                format!("p{:04}w{:02}", week.year(), week.week())
            }
            Period::Month => format!("p{}", start.format("%Y%m")),
        }
    }
}

impl FromStr for Period {
    type Err = String;

    fn from_str(s: &str) -> Result<Period, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "day" | "daily" => Ok(Period::Day),
            "week" | "weekly" => Ok(Period::Week),
            "month" | "monthly" => Ok(Period::Month),
            other => Err(format!("unknown period {other:?}: use day, week or month")),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        })
    }
}

/// One partition: IDs below `less_than` (and at or above the previous bound). `pmax` has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionBound {
    pub name: String,
    pub less_than: Option<u64>,
    /// The period's first day, in the plan's zone (absent for `pmax`).
    pub period_start: Option<NaiveDate>,
    /// The instant the next period starts (the bound as a time), RFC 3339 UTC.
    pub ends_at: Option<String>,
}

/// The partitions covering a span of periods, plus `pmax`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionPlan {
    pub period: Period,
    pub zone: String,
    pub partitions: Vec<PartitionBound>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--from {from} is after --to {to}")]
    Reversed { from: NaiveDate, to: NaiveDate },
    #[error("the plan would have more than {MAX_PARTITIONS} partitions, MariaDB's limit")]
    TooMany,
    #[error("period starting {0} is outside the ID layout's time range: {1}")]
    OutOfRange(NaiveDate, IdError),
    #[error("the period after {0} is past the last date the calendar supports")]
    DateOverflow(NaiveDate),
    #[error("period starting {0} begins at or before the ID epoch, so it cannot have a bound")]
    BeforeEpoch(NaiveDate),
}

/// The partition below the first period of a table: it holds anything older, so each period's
/// partition holds that period only. Tables made before it existed have none; their first
/// period's partition holds anything older instead.
pub const PMIN: &str = "pmin";

/// Whether the `index`-th partition of a table is its `pmin`.
pub fn is_pmin(index: usize, name: &str) -> bool {
    index == 0 && name.eq_ignore_ascii_case(PMIN)
}

impl PartitionPlan {
    /// `pmin`, partitions for every period from the one containing `from` to the one containing
    /// `to` (both included), then `pmax`. `pmin` ends where the first period starts; it is left
    /// out when that is at or before the ID epoch (the bound would be 0, below every ID).
    pub fn new(
        from: NaiveDate,
        to: NaiveDate,
        period: Period,
        zone: &Zone,
        layout: &Layout,
    ) -> Result<PartitionPlan, PlanError> {
        let periods = period_partitions(from, to, period, zone, layout)?;
        let first = period.start_of(from);
        let starts = zone.resolve(first.and_time(NaiveTime::MIN));
        let pmin_bound = layout
            .first_id_at(starts.timestamp())
            .map_err(|e| PlanError::OutOfRange(first, e))?;
        let mut partitions = Vec::with_capacity(periods.len() + 2);
        if pmin_bound > 0 {
            partitions.push(PartitionBound {
                name: PMIN.to_string(),
                less_than: Some(pmin_bound),
                period_start: None,
                ends_at: Some(starts.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            });
        }
        partitions.extend(periods);
        // Room for `pmax`.
        if partitions.len() >= MAX_PARTITIONS {
            return Err(PlanError::TooMany);
        }
        partitions.push(PartitionBound {
            name: "pmax".to_string(),
            less_than: None,
            period_start: None,
            ends_at: None,
        });
        Ok(PartitionPlan {
            period,
            zone: zone.to_string(),
            partitions,
        })
    }

    /// `PARTITION BY RANGE (id) (...)`, each bound commented with the instant it stands for.
    pub fn partition_clause(&self) -> String {
        let lines: Vec<String> = self
            .partitions
            .iter()
            .map(|p| match (p.less_than, &p.ends_at) {
                (Some(bound), Some(ends)) => format!(
                    "  PARTITION `{}` VALUES LESS THAN ({bound}) /* {ends} */",
                    p.name
                ),
                _ => format!("  PARTITION `{}` VALUES LESS THAN MAXVALUE", p.name),
            })
            .collect();
        format!("PARTITION BY RANGE (`id`) (\n{}\n)", lines.join(",\n"))
    }
}

/// A partition for every period from the one containing `from` to the one containing `to`.
fn period_partitions(
    from: NaiveDate,
    to: NaiveDate,
    period: Period,
    zone: &Zone,
    layout: &Layout,
) -> Result<Vec<PartitionBound>, PlanError> {
    if from > to {
        return Err(PlanError::Reversed { from, to });
    }
    let mut partitions = Vec::new();
    let mut start = period.start_of(from);
    while start <= to {
        // Leave room for `pmax`.
        if partitions.len() == MAX_PARTITIONS - 1 {
            return Err(PlanError::TooMany);
        }
        let next = period
            .next_start(start)
            .ok_or(PlanError::DateOverflow(start))?;
        let ends = zone.resolve(next.and_time(NaiveTime::MIN));
        let less_than = layout
            .first_id_at(ends.timestamp())
            .map_err(|e| PlanError::OutOfRange(start, e))?;
        if less_than == 0 {
            return Err(PlanError::BeforeEpoch(start));
        }
        partitions.push(PartitionBound {
            name: period.partition_name(start),
            less_than: Some(less_than),
            period_start: Some(start),
            ends_at: Some(ends.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        });
        start = next;
    }
    Ok(partitions)
}

/// A partition as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExistingPartition {
    pub name: String,
    /// `None` for `MAXVALUE`.
    pub less_than: Option<u64>,
    /// The server's row estimate (`information_schema.PARTITIONS.TABLE_ROWS`).
    pub rows: u64,
}

/// How an existing table is partitioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    /// `RANGE`, `HASH`, ...; `None` when the table is not partitioned.
    pub method: Option<String>,
    pub expression: Option<String>,
    pub subpartitioned: bool,
    /// In order.
    pub partitions: Vec<ExistingPartition>,
}

/// MariaDB shows a bound above `i64::MAX` of an unsigned column as its two's complement
/// (`-9223372036854775808` for 2^63); MySQL 8 shows it as is. Both are read back as the `u64`
/// written, without going through `i64`.
pub fn parse_bound(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("MAXVALUE") {
        return Ok(None);
    }
    let bad = || format!("partition bound {text:?} is not an unsigned 64-bit number");
    match text.strip_prefix('-') {
        Some(magnitude) => {
            let m: u64 = magnitude.parse().map_err(|_| bad())?;
            if m == 0 || m > 1 << 63 {
                return Err(bad());
            }
            Ok(Some(m.wrapping_neg()))
        }
        None => text.parse().map(Some).map_err(|_| bad()),
    }
}

/// The first day of the period that starts exactly at the ID `bound`, if it is such a start:
/// a partition bound of this layout, period and zone.
pub fn aligned_period_start(
    bound: u64,
    layout: &Layout,
    period: Period,
    zone: &Zone,
) -> Option<NaiveDate> {
    if bound & 0xFFFF_FFFF != 0 {
        return None;
    }
    let unix = layout.decode(bound).unix_seconds;
    let instant = DateTime::<Utc>::from_timestamp(i64::try_from(unix).ok()?, 0)?;
    let date = zone.local(instant).date();
    (period.start_of(date) == date && zone.resolve(date.and_time(NaiveTime::MIN)) == instant)
        .then_some(date)
}

/// Refuses a table logstamp cannot maintain: not `RANGE` partitioned on `id`, sub-partitioned,
/// without a last `MAXVALUE` partition, or with bounds that are not period starts of this
/// layout, period and zone.
pub fn check_partitioning(
    table: &Ident,
    partitioning: &Partitioning,
    layout: &Layout,
    period: Period,
    zone: &Zone,
) -> Result<(), String> {
    let method = partitioning.method.as_deref().unwrap_or("");
    let expression = partitioning.expression.as_deref().unwrap_or("");
    let on_id = expression
        .trim()
        .trim_matches('`')
        .eq_ignore_ascii_case("id");
    if !method.eq_ignore_ascii_case("RANGE") || !on_id {
        let now = if method.is_empty() {
            "not partitioned".to_string()
        } else {
            format!("partitioned by {method} ({expression})")
        };
        return Err(format!(
            "table {table} is {now}; logstamp needs PARTITION BY RANGE (id)"
        ));
    }
    if partitioning.subpartitioned {
        return Err(format!(
            "table {table} has subpartitions, which logstamp does not maintain"
        ));
    }
    let Some((last, bounded)) = partitioning.partitions.split_last() else {
        return Err(format!("table {table} has no partitions"));
    };
    if last.less_than.is_some() {
        return Err(format!(
            "table {table} has no last partition VALUES LESS THAN MAXVALUE (pmax) to split \
             new partitions from"
        ));
    }
    for p in bounded {
        let Some(bound) = p.less_than else {
            return Err(format!(
                "partition {} of table {table} has no bound",
                p.name
            ));
        };
        if aligned_period_start(bound, layout, period, zone).is_none() {
            return Err(format!(
                "partition {} of table {table} ends at ID {bound}, which is not the start of a \
                 {period} in {zone} with the ID epoch {}: the table was partitioned with other \
                 settings",
                p.name,
                layout.epoch_unix_seconds()
            ));
        }
    }
    Ok(())
}

impl PartitionScheme {
    /// Partitions for a new table: the current period through `ahead` periods after it.
    pub fn initial_plan(&self, now: DateTime<Utc>) -> Result<PartitionPlan, PlanError> {
        let first = current_period_start(now, self.period, &self.zone);
        let last = periods_after(first, self.period, self.ahead)?;
        PartitionPlan::new(first, last, self.period, &self.zone, &self.layout)
    }
}

/// The first day of the period holding `now`, in `zone`.
pub fn current_period_start(now: DateTime<Utc>, period: Period, zone: &Zone) -> NaiveDate {
    period.start_of(zone.local(now).date())
}

/// The first day of the period `count` periods after the one starting at `start`.
pub fn periods_after(start: NaiveDate, period: Period, count: u32) -> Result<NaiveDate, PlanError> {
    let mut day = start;
    for _ in 0..count {
        day = period.next_start(day).ok_or(PlanError::DateOverflow(day))?;
    }
    Ok(day)
}

/// What maintenance does to the table, in this order: split `add` off `pmax`, then drop `drop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Maintenance {
    pub add: Vec<PartitionBound>,
    pub drop: Vec<ExistingPartition>,
    /// Set when the table has a `pmin` and `drop` is not empty: `pmin` and the partitions of
    /// `drop` are emptied and merged into one `pmin` ending at this bound, where the oldest
    /// period kept starts. So `pmin` keeps holding only what is older than every period, and
    /// its rows, older than those of `drop`, go with them.
    pub pmin_to: Option<u64>,
}

impl Maintenance {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.drop.is_empty()
    }

    /// The lowest ID the table can still hold once `drop` is done (`None`: nothing dropped):
    /// `pmin`'s new bound, or the bound of the last partition dropped.
    pub fn first_kept_id(&self) -> Option<u64> {
        self.pmin_to
            .or_else(|| self.drop.iter().filter_map(|p| p.less_than).max())
    }
}

/// Decides the maintenance of a table partitioned as `existing` (checked by
/// `check_partitioning`: bounded partitions aligned to period starts, then a `MAXVALUE` one).
///
/// - Adds a partition for every period from the end of the last bounded one through `ahead`
///   periods after the one holding `now`. A table left alone for a while gets the missing
///   periods too, so rows that waited in `pmax` move into the partitions of their period.
/// - Drops the bounded partitions whose end is at or before `now - retention`: every row in
///   them is older than the retention. So the partition holding `now` is never dropped (it
///   ends after `now`), nor `pmax`. Partitions added for a neglected table that are already
///   past the retention are dropped in the same run, after their rows left `pmax`.
/// - Keeps `pmin`: it is emptied with the oldest periods and raised to where the periods kept
///   start (`pmin_to`), so its rows live until the first period's do.
pub fn plan_maintenance(
    existing: &[ExistingPartition],
    now: DateTime<Utc>,
    scheme: &PartitionScheme,
) -> Result<Maintenance, String> {
    let (period, zone, layout) = (scheme.period, &scheme.zone, &scheme.layout);
    let current = current_period_start(now, period, zone);
    let last_wanted = periods_after(current, period, scheme.ahead).map_err(|e| e.to_string())?;
    let bounded: Vec<&ExistingPartition> =
        existing.iter().filter(|p| p.less_than.is_some()).collect();
    let first_missing = match bounded.last().and_then(|p| p.less_than) {
        Some(bound) => aligned_period_start(bound, layout, period, zone).ok_or_else(|| {
            format!("the last bounded partition ends at ID {bound}, which is not a {period} start")
        })?,
        None => current,
    };
    let add = if first_missing <= last_wanted {
        period_partitions(first_missing, last_wanted, period, zone, layout)
            .map_err(|e| format!("partitions to add: {e}"))?
    } else {
        Vec::new()
    };

    let mut drop = Vec::new();
    if let Some(retention) = scheme.retention {
        let cutoff = i128::from(now.timestamp()) - i128::from(retention.as_secs());
        let ends = |bound: u64| i128::from(layout.decode(bound).unix_seconds);
        let added = add.iter().filter_map(|p| {
            p.less_than.map(|bound| ExistingPartition {
                name: p.name.clone(),
                less_than: Some(bound),
                rows: 0,
            })
        });
        drop = bounded
            .iter()
            .enumerate()
            .filter(|(i, p)| !is_pmin(*i, &p.name))
            .map(|(_, p)| (*p).clone())
            .chain(added)
            .filter(|p| p.less_than.is_some_and(|b| ends(b) <= cutoff))
            .collect();
    }

    let total = existing.len() + add.len() - drop.len();
    if total > MAX_PARTITIONS {
        return Err(format!(
            "the table would have {total} partitions, more than MariaDB's {MAX_PARTITIONS}: \
             lower partitions.ahead or set a retention"
        ));
    }
    let has_pmin = existing.first().is_some_and(|p| is_pmin(0, &p.name));
    let pmin_to = drop.last().and_then(|p| p.less_than).filter(|_| has_pmin);
    Ok(Maintenance { add, drop, pmin_to })
}

/// A partition as `partitions list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionInfo {
    pub name: String,
    /// When its period starts (RFC 3339, UTC): the previous partition's bound, or for the
    /// first partition the start of its period (it also holds anything older). `None` for
    /// `pmin`, which holds anything older than its bound.
    pub from: Option<String>,
    /// When the next period starts: its bound as a time. `None` for `pmax`.
    pub to: Option<String>,
    pub less_than: Option<u64>,
    /// The server's estimate.
    pub rows: u64,
}

/// The time each partition covers, from its bound and the previous one.
pub fn describe(existing: &[ExistingPartition], scheme: &PartitionScheme) -> Vec<PartitionInfo> {
    let time_of = |bound: u64| format_utc(scheme.layout.decode(bound).unix_seconds);
    let mut previous: Option<u64> = None;
    existing
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let from = match previous {
                Some(bound) => Some(time_of(bound)),
                None if i == 0 && !is_pmin(i, &p.name) => {
                    p.less_than.and_then(|bound| nominal_start(bound, scheme))
                }
                None => None,
            };
            previous = p.less_than.or(previous);
            PartitionInfo {
                name: p.name.clone(),
                from,
                to: p.less_than.map(time_of),
                less_than: p.less_than,
                rows: p.rows,
            }
        })
        .collect()
}

/// The start of the period that ends at `bound`, if the bound is a period start.
fn nominal_start(bound: u64, scheme: &PartitionScheme) -> Option<String> {
    let end = aligned_period_start(bound, &scheme.layout, scheme.period, &scheme.zone)?;
    let start = scheme.period.start_of(end.pred_opt()?);
    let at = scheme.zone.resolve(start.and_time(NaiveTime::MIN));
    Some(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}
