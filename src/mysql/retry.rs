//! Trying again work that failed for a reason that may pass: one policy type for every part
//! that retries (the writer and start-up, `rollup rebuild`, the relay's parts), so waits grow
//! the same way everywhere and a give-up time means the same thing.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};

use super::DbError;

/// Waits growing from `first_wait` to `longest_wait`, with jitter, until `give_up_after` has
/// passed since the first try (never, when `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first_wait: Duration,
    pub longest_wait: Duration,
    pub give_up_after: Option<Duration>,
}

impl RetryPolicy {
    /// Retrying for at most `give_up_after` (`store.give_up_after`). Each wait is capped at a
    /// quarter of it, which bounds the overshoot past the deadline.
    pub fn giving_up_after(give_up_after: Duration) -> RetryPolicy {
        let first_wait = Duration::from_millis(50);
        RetryPolicy {
            first_wait,
            longest_wait: Duration::from_secs(10)
                .min(give_up_after / 4)
                .max(first_wait),
            give_up_after: Some(give_up_after),
        }
    }

    /// Retrying as long as the process runs: the relay's capture and appliers, which start
    /// again from their durable state after each transient failure.
    pub const FOREVER: RetryPolicy = RetryPolicy {
        first_wait: Duration::from_millis(200),
        longest_wait: Duration::from_secs(10),
        give_up_after: None,
    };

    /// The waits between tries, for work that loops by itself.
    pub fn waits(&self) -> ExponentialBackoff {
        self.backoff().build()
    }

    /// Tries from now on, for work that borrows its state mutably (which a closure run again
    /// and again cannot lend): see [`Tries::wait_after`].
    pub fn tries(&self) -> Tries {
        Tries {
            policy: *self,
            started: Instant::now(),
            waits: self.waits(),
            retried: false,
        }
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(self.first_wait)
            .with_max_delay(self.longest_wait)
            .without_max_times()
    }

    fn gave_up(&self, started: Instant) -> bool {
        self.give_up_after
            .is_some_and(|limit| started.elapsed() >= limit)
    }
}

/// The tries of one piece of work under a policy.
#[derive(Debug)]
pub struct Tries {
    policy: RetryPolicy,
    started: Instant,
    waits: ExponentialBackoff,
    /// Whether a retry was logged at warning level already: the later ones are logged at
    /// debug level, so an outage is one warning, not one per retry.
    retried: bool,
}

impl Tries {
    /// After a failed try: waits, logging why, and returns true; or returns false at once when
    /// the policy has given up.
    pub async fn wait_after(&mut self, what: &str, error: &DbError) -> bool {
        if self.policy.gave_up(self.started) {
            return false;
        }
        let wait = self.waits.next().unwrap_or(self.policy.longest_wait);
        if self.retried {
            tracing::debug!(retry_in = ?wait, "{what} failed again, retrying: {error}");
        } else {
            tracing::warn!(retry_in = ?wait, "{what} failed, retrying: {error}");
        }
        self.retried = true;
        tokio::time::sleep(wait).await;
        true
    }
}

/// Runs `operation` until it succeeds, fails for good (see [`DbError::is_transient`]), or
/// `policy` gives up. `what` names the work in the warning logged before the first retry (the
/// later ones are logged at debug level).
pub async fn retrying<T, F>(
    policy: RetryPolicy,
    what: impl Fn() -> String,
    operation: impl FnMut() -> F,
) -> Result<T, DbError>
where
    F: Future<Output = Result<T, DbError>>,
{
    let started = Instant::now();
    let mut retried = false;
    operation
        .retry(policy.backoff())
        .when(|e: &DbError| e.is_transient() && !policy.gave_up(started))
        .notify(|e: &DbError, wait: Duration| {
            // One warning per piece of work; the retries after it at debug level.
            if retried {
                tracing::debug!(retry_in = ?wait, "{} failed again, retrying: {e}", what());
            } else {
                tracing::warn!(retry_in = ?wait, "{} failed, retrying: {e}", what());
            }
            retried = true;
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_from_the_first_to_the_longest() {
        let policy = RetryPolicy {
            first_wait: Duration::from_millis(100),
            longest_wait: Duration::from_millis(800),
            give_up_after: None,
        };
        let waits: Vec<Duration> = policy.waits().take(8).collect();
        assert_eq!(
            waits.len(),
            8,
            "a policy without a give-up time never runs out"
        );
        // Jitter adds up to one more wait of the same size.
        assert!(waits[0] >= policy.first_wait && waits[0] <= policy.first_wait * 2);
        assert!(
            waits.iter().all(|w| *w <= policy.longest_wait * 2),
            "{waits:?}"
        );
        assert!(waits[7] >= policy.longest_wait, "{waits:?}");
    }

    #[test]
    fn a_short_give_up_time_caps_each_wait() {
        let policy = RetryPolicy::giving_up_after(Duration::from_secs(2));
        assert_eq!(policy.longest_wait, Duration::from_millis(500));
        let long = RetryPolicy::giving_up_after(Duration::from_secs(3600));
        assert_eq!(long.longest_wait, Duration::from_secs(10));
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_the_give_up_time_and_definite_ones_never() {
        let policy = RetryPolicy {
            first_wait: Duration::from_millis(1),
            longest_wait: Duration::from_millis(5),
            give_up_after: Some(Duration::from_millis(50)),
        };
        let mut tries = 0;
        let started = Instant::now();
        let busy = retrying(
            policy,
            || "work".into(),
            || {
                tries += 1;
                async { Err::<(), _>(DbError::Busy("held".into())) }
            },
        )
        .await;
        assert!(matches!(busy, Err(DbError::Busy(_))));
        assert!(tries > 1, "a transient failure is tried again");
        assert!(started.elapsed() >= Duration::from_millis(50));

        let mut tries = 0;
        let definite = retrying(
            policy,
            || "work".into(),
            || {
                tries += 1;
                async { Err::<(), _>(DbError::Invariant("no row".into())) }
            },
        )
        .await;
        assert!(matches!(definite, Err(DbError::Invariant(_))));
        assert_eq!(tries, 1, "a definite failure is not tried again");
    }
}
