//! How long changes spend in one stage of the relay's path, counted per 100 µs step: cheap
//! enough to record for every message, fine enough to split a lag of a few milliseconds
//! between Kafka and the applier. Read by `bench relay` around its lag phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Width of a step.
const STEP: Duration = Duration::from_micros(100);
/// Steps counted one by one (up to 200 ms); longer durations share the last.
const STEPS: usize = 2_000;

/// Counts of durations per step.
#[derive(Debug)]
pub struct StageTimes {
    counts: Box<[AtomicU64]>,
}

impl Default for StageTimes {
    fn default() -> StageTimes {
        StageTimes {
            counts: (0..=STEPS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl StageTimes {
    pub fn record(&self, took: Duration) {
        let step = usize::try_from(took.as_micros() / STEP.as_micros()).unwrap_or(STEPS);
        self.counts[step.min(STEPS)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, to take from a later reading with [`Counts::since`].
    pub fn counts(&self) -> Counts {
        Counts(
            self.counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        )
    }
}

/// A reading of [`StageTimes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(Vec<u64>);

impl Counts {
    /// What was recorded between `earlier` and this reading.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .zip(&earlier.0)
                .map(|(now, before)| now.saturating_sub(*before))
                .collect(),
        )
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The duration at quantile `q` (0 to 1), as the upper edge of its step; `None` when nothing
    /// was recorded. At or past the last step it says that step's lower edge (200 ms).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64 * q.clamp(0.0, 1.0)).ceil() as u64).max(1);
        let mut seen = 0;
        for (step, count) in self.0.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let edge = if step == STEPS { step } else { step + 1 };
                return Some(STEP * u32::try_from(edge).unwrap_or(u32::MAX));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_steps() {
        let times = StageTimes::default();
        for micros in [50, 150, 150, 950, 5_000] {
            times.record(Duration::from_micros(micros));
        }
        let counts = times.counts();
        assert_eq!(counts.total(), 5);
        assert_eq!(counts.quantile(0.0), Some(Duration::from_micros(100)));
        assert_eq!(counts.quantile(0.5), Some(Duration::from_micros(200)));
        assert_eq!(counts.quantile(0.8), Some(Duration::from_micros(1_000)));
        assert_eq!(counts.quantile(1.0), Some(Duration::from_micros(5_100)));
    }

    #[test]
    fn long_durations_share_the_last_step_and_readings_subtract() {
        let times = StageTimes::default();
        times.record(Duration::from_secs(3));
        let before = times.counts();
        times.record(Duration::from_millis(1));
        times.record(Duration::from_secs(60));
        let between = times.counts().since(&before);
        assert_eq!(between.total(), 2);
        assert_eq!(between.quantile(1.0), Some(Duration::from_millis(200)));
        assert_eq!(between.quantile(0.5), Some(Duration::from_micros(1_100)));
        assert_eq!(StageTimes::default().counts().quantile(0.5), None);
    }
}
