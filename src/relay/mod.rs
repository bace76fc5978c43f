//! The cross-data-centre relay: each data centre's capture publishes its relayed tables'
//! changes from the binlog to its Kafka topic, and each data centre applies the other data
//! centres' topics, without loops, loss or reordering.
//!
//! One concern per module, after the shape of Materialize's MySQL source: `gtid` (MariaDB's
//! raw events), `table` and `decode` (table maps and row images), `events` (binlog events to
//! transactions), `change` (the message), `loop_filter`, `capture`, `checkpoint` and `resume`
//! (where capture starts), `order` (exactly once by GTID), `sql` and `apply`, `keys` and `signing` (signed messages), `snapshot` (copying existing rows online), `status`, `verify` (comparing data centres' tables), `stats`
//! (what a running relay counts, for its metrics), and `context` (what they share).

pub mod apply;
pub mod capture;
pub mod change;
pub mod checkpoint;
pub mod context;
pub mod contract;
pub mod decode;
pub mod delivery;
pub mod events;
pub mod gtid;
pub mod keys;
pub mod loop_filter;
pub mod metrics;
pub mod order;
pub mod resume;
pub mod settings;
pub mod signing;
pub mod snapshot;
pub mod sql;
pub mod stage_times;
pub mod stats;
pub mod status;
pub mod table;
pub mod text_filter;
pub mod verify;

use std::future::Future;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use tokio::sync::watch;

pub use context::{RelayContext, RelayError};
pub use settings::TablePattern;

use crate::mysql::bound::within;
use crate::mysql::retry::RetryPolicy;
use crate::mysql::{self, DbError};
use context::{
    APPLIED_GTIDS_TABLE, APPLIED_TABLE, APPLIED_TABLES_TABLE, CHECKPOINT_TABLE, CONFLICTS_TABLE,
    DEAD_LETTERS_TABLE, LOOP_KEYS_TABLE, PUBLISHED_TABLE, SNAPSHOTS_TABLE, WATERMARKS_TABLE,
};

/// A part that ran this long before failing starts again after the shortest wait.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Runs this data centre's capture and an applier per remote data centre until `shutdown` is
/// set (or its sender dropped). A part that fails for a transient reason (lost connection,
/// Kafka unavailable) starts again from its durable state; the first definite failure stops
/// every part and is returned.
pub async fn run(context: RelayContext, shutdown: watch::Receiver<bool>) -> Result<(), RelayError> {
    check_migrated(&context).await?;
    if context.tables.is_empty() {
        tracing::warn!("relay.tables is empty: capture publishes nothing");
    }
    let (stop, stopped) = watch::channel(false);
    let mut parts = tokio::task::JoinSet::new();
    {
        let context = context.clone();
        parts.spawn(supervise(
            "capture".to_string(),
            stopped.clone(),
            move |mut rx| {
                let context = context.clone();
                async move { capture::run_once(&context, &mut rx).await }
            },
        ));
    }
    for remote in &context.relay.remotes {
        let (context, remote) = (context.clone(), remote.clone());
        parts.spawn(supervise(
            format!("apply from {}", remote.dc),
            stopped.clone(),
            move |mut rx| {
                let (context, remote) = (context.clone(), remote.clone());
                async move { apply::run_once(&context, &remote, &mut rx).await }
            },
        ));
    }
    let mut shutdown = shutdown;
    let mut first_error = None;
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                let _ = stop.send(true);
            }
            done = parts.join_next() => match done {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => {
                    first_error.get_or_insert(e);
                    let _ = stop.send(true);
                }
                Some(Err(e)) => {
                    first_error.get_or_insert(RelayError::Refused(format!("a relay task failed: {e}")));
                    let _ = stop.send(true);
                }
            },
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Runs `part` again after each transient failure, waiting longer each time in a row.
async fn supervise<F, Fut>(
    name: String,
    mut shutdown: watch::Receiver<bool>,
    mut part: F,
) -> Result<(), RelayError>
where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = Result<(), RelayError>>,
{
    let mut waits = RetryPolicy::FOREVER.waits();
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let started = Instant::now();
        let wait = match part(shutdown.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                if started.elapsed() > HEALTHY_RUN {
                    waits = RetryPolicy::FOREVER.waits();
                }
                let wait = waits.next().unwrap_or(RetryPolicy::FOREVER.longest_wait);
                if e.is_hang() {
                    // The part said so once when the server stopped answering.
                    tracing::debug!(part = name, retry_in = ?wait, "relay {name} failed, starting again: {e}");
                } else {
                    tracing::warn!(part = name, retry_in = ?wait, "relay {name} failed, starting again: {e}");
                }
                wait
            }
            Err(e) => {
                tracing::error!(part = name, "relay {name} stopped: {e}");
                return Err(e);
            }
        };
        tokio::select! {
            _ = shutdown.changed() => return Ok(()),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Refuses to start before `logstamp migrate` created the relay tables.
async fn check_migrated(context: &RelayContext) -> Result<(), RelayError> {
    let mut conn = mysql::connect(context.url()).await?;
    let tables = [
        CHECKPOINT_TABLE,
        APPLIED_TABLE,
        PUBLISHED_TABLE,
        APPLIED_GTIDS_TABLE,
        LOOP_KEYS_TABLE,
        CONFLICTS_TABLE,
        DEAD_LETTERS_TABLE,
        SNAPSHOTS_TABLE,
        WATERMARKS_TABLE,
        APPLIED_TABLES_TABLE,
    ];
    let marks = vec!["?"; tables.len()].join(", ");
    let params: Vec<mysql_async::Value> = std::iter::once(context.state_database.as_str())
        .chain(tables)
        .map(mysql_async::Value::from)
        .collect();
    // Rows, not strings: a name is counted whatever form the server sends it in.
    let query = conn.exec(
        format!(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? \
             AND TABLE_NAME IN ({marks})"
        ),
        params,
    );
    let found: Vec<mysql_async::Row> = within(
        context.relay.apply_timeout,
        || "looking for the relay tables".into(),
        async {
            query
                .await
                .map_err(DbError::mysql("looking for the relay tables"))
        },
    )
    .await?;
    let _ = conn.disconnect().await;
    if found.len() == tables.len() {
        Ok(())
    } else {
        Err(RelayError::Refused(format!(
            "database {} has no relay tables: run `logstamp migrate` first",
            context.state_database
        )))
    }
}
