//! Bounding a wait on MySQL. A server that hangs (stopped, a stalled disk, a path dropping
//! packets) keeps its TCP connections open and answers nothing, and the driver has no read
//! timeout of its own: without a bound, work on it waits for ever and never fails.
//!
//! Dropping the timed-out future drops the connection it used: the driver marks a connection
//! disconnected while a command is under way, so the pool discards it rather than reusing it.

use std::time::Duration;

use super::{DbError, MysqlUrl};

/// Runs `work`, failing with [`DbError::TimedOut`] (transient) if it takes longer than
/// `limit`; `what` names the work in that error.
pub async fn within<T, E: From<DbError>>(
    limit: Duration,
    what: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        Err(DbError::TimedOut {
            context: what(),
            after: limit,
        }
        .into())
    })
}

/// The bound on each wait on one server, which its timeouts name (`host:port`): for work that
/// talks to several servers, or whose errors leave the process (a command's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    limit: Duration,
    server: String,
}

impl Bound {
    pub fn new(url: &MysqlUrl, limit: Duration) -> Bound {
        Bound {
            limit,
            server: format!("{}:{}", url.host(), url.port().unwrap_or(3306)),
        }
    }

    /// This bound with `extra` time, for a wait the server itself may prolong by that much (a
    /// lock wait of its own).
    pub fn longer_by(&self, extra: Duration) -> Bound {
        Bound {
            limit: self.limit.saturating_add(extra),
            server: self.server.clone(),
        }
    }

    /// [`within`] this bound; past it, the error says "`what` at host:port".
    pub async fn wait<T, E: From<DbError>>(
        &self,
        what: impl FnOnce() -> String,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        within(
            self.limit,
            || format!("{} at {}", what(), self.server),
            work,
        )
        .await
    }

    /// [`Bound::wait`] on one call of the driver, whose error then says `what` too.
    pub async fn call<T>(
        &self,
        what: impl Fn() -> String,
        work: impl Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, DbError> {
        self.wait(&what, async { work.await.map_err(DbError::mysql(what())) })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_past_its_bound_is_a_transient_timeout_and_one_within_it_is_its_result() {
        let limit = Duration::from_millis(20);
        let hung = within(limit, || "reading".into(), async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<(), DbError>(())
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
        let quick = within(limit, || "reading".into(), async { Ok::<_, DbError>(7) }).await;
        assert_eq!(quick.ok(), Some(7));
    }

    #[tokio::test]
    async fn a_bound_names_the_server_and_its_port_never_the_password() {
        let url = MysqlUrl::try_from("mysql://u:secret@db.example:3307/logs".to_string())
            .expect("a valid URL");
        let bound = Bound::new(&url, Duration::from_millis(20));
        let error = hung_error(&bound, "reading the checkpoint").await;
        assert!(
            error.starts_with("reading the checkpoint at db.example:3307: no answer within 20ms"),
            "{error}"
        );
        assert!(!error.contains("secret"), "{error}");
        let longer = hung_error(&bound.longer_by(Duration::from_millis(10)), "locking").await;
        assert!(
            longer.starts_with("locking at db.example:3307: no answer within 30ms"),
            "the extra time is added: {longer}"
        );
        let default_port = MysqlUrl::try_from("mysql://u@db/logs".to_string()).expect("valid");
        let other = hung_error(&Bound::new(&default_port, Duration::from_millis(1)), "x").await;
        assert!(
            other.starts_with("x at db:3306:"),
            "the default port is named"
        );
    }

    /// The error of a wait on `bound` that never ends.
    async fn hung_error(bound: &Bound, what: &str) -> String {
        let hung: Result<(), DbError> = bound
            .wait(|| what.to_string(), std::future::pending())
            .await;
        hung.expect_err("a hung wait finished").to_string()
    }
}
