//! Bounding a wait on MySQL. A server that hangs (stopped, a stalled disk, a path dropping
//! packets) keeps its TCP connections open and answers nothing, and the driver has no read
//! timeout of its own: without a bound, work on it waits for ever and never fails.
//!
//! Dropping the timed-out future drops the connection it used: the driver marks a connection
//! disconnected while a command is under way, so the pool discards it rather than reusing it.

use std::time::Duration;

use super::DbError;

/// Runs `work`, failing with [`DbError::TimedOut`] (transient) if it takes longer than
/// `limit`; `what` names the work in that error.
pub async fn within<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, DbError>>,
) -> Result<T, DbError> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        Err(DbError::TimedOut {
            context: what(),
            after: limit,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_past_its_bound_is_a_transient_timeout_and_one_within_it_is_its_result() {
        let limit = Duration::from_millis(20);
        let hung = within(limit, || "reading".into(), async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        })
        .await;
        let Err(error) = hung else {
            panic!("a hung wait finished: {hung:?}");
        };
        assert!(error.is_transient(), "{error}");
        assert!(matches!(error, DbError::TimedOut { after, .. } if after == limit));
        assert!(
            error.to_string().starts_with("reading: no answer within"),
            "{error}"
        );
        let quick = within(limit, || "reading".into(), async { Ok(7) }).await;
        assert_eq!(quick.ok(), Some(7));
    }
}
