//! Partition maintenance of the log table.

use chrono::{DateTime, NaiveDate, Utc};

use super::{Period, StoreError};
use crate::time::Zone;

/// The first day of the period holding `now`, in `zone`.
pub fn current_period_start(now: DateTime<Utc>, period: Period, zone: &Zone) -> NaiveDate {
    period.start_of(zone.local(now).date())
}

/// The first day of the period `count` periods after the one starting at `start`.
pub fn periods_after(
    start: NaiveDate,
    period: Period,
    count: u32,
) -> Result<NaiveDate, StoreError> {
    let mut day = start;
    for _ in 0..count {
        day = period.next_start(day).ok_or_else(|| {
            StoreError::Refused(format!(
                "the {period} after {day} is past the calendar's end"
            ))
        })?;
    }
    Ok(day)
}
