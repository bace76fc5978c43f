//! Partition bounds for the log table, computed in Rust.
//!
//! MySQL refuses bit operators in a partition expression, so each bound is the literal
//! `(period start in the configured zone, as seconds since the ID epoch) << 32`: the first ID
//! of the next period.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, Months, NaiveDate, NaiveTime};
use serde::Serialize;

use crate::id::{IdError, Layout};
use crate::time::Zone;

/// MariaDB's limit on partitions per table, `pmax` included.
pub const MAX_PARTITIONS: usize = 8192;

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

impl PartitionPlan {
    /// Partitions for every period from the one containing `from` to the one containing `to`
    /// (both included), then `pmax`.
    pub fn new(
        from: NaiveDate,
        to: NaiveDate,
        period: Period,
        zone: &Zone,
        layout: &Layout,
    ) -> Result<PartitionPlan, PlanError> {
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
