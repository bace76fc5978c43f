//! Retrying MySQL work that failed for a transient reason (see [`DbError::is_transient`]),
//! for at most `store.give_up_after`.

use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use super::DbError;

/// Runs `operation` until it succeeds, fails for good, or has failed transiently for
/// `give_up_after`, with exponential backoff and jitter in between. `what` names the work in
/// the warning logged before each retry.
pub async fn retrying<T, F>(
    give_up_after: Duration,
    what: impl Fn() -> String,
    operation: impl FnMut() -> F,
) -> Result<T, DbError>
where
    F: Future<Output = Result<T, DbError>>,
{
    let started = Instant::now();
    // Retries go on until `give_up_after` has passed; capping each wait at a quarter of it
    // bounds the overshoot past the deadline.
    let min_delay = Duration::from_millis(50);
    let backoff = ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(min_delay)
        .with_max_delay(
            Duration::from_secs(10)
                .min(give_up_after / 4)
                .max(min_delay),
        )
        .without_max_times();
    operation
        .retry(backoff)
        .when(|e: &DbError| e.is_transient() && started.elapsed() < give_up_after)
        .notify(|e: &DbError, wait: Duration| {
            tracing::warn!(retry_in = ?wait, "{} failed, retrying: {e}", what());
        })
        .await
}
