//! `relay status`: how far capture and each applier are, and how far behind.

use std::time::Duration;

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;

use crate::kafka::CreateRedacted;
use crate::mysql::rows::take;
use crate::mysql::{self, DbError};

use super::change::binlog_file_number;
use super::checkpoint::{self, Checkpoint};
use super::context::{
    APPLIED_TABLE, CONFLICTS_TABLE, DEAD_LETTERS_TABLE, RelayContext, RelayError,
};

#[derive(Debug, Clone, Serialize)]
pub struct CaptureStatus {
    pub dc: String,
    pub topic: String,
    /// The position capture resumes from (`None` before its first start).
    pub checkpoint: Option<Location>,
    pub published_transactions: u64,
    pub published_changes: u64,
    /// Where the server writes now.
    pub server: Location,
    /// Event groups (transactions and DDL) written since the checkpoint, from the GTIDs.
    pub behind_transactions: Option<u64>,
    /// Binlog bytes written since the checkpoint.
    pub behind_bytes: Option<u64>,
    /// Seconds since the commit of the checkpointed transaction, when behind; 0 when not.
    pub lag_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Location {
    pub file: String,
    pub pos: u64,
    pub gtid: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApplyStatus {
    pub source_dc: String,
    pub topic: String,
    pub next_offset: i64,
    /// The topic's end offset (`None` when Kafka did not answer).
    pub end_offset: Option<i64>,
    /// Messages published and not applied yet.
    pub behind_messages: Option<i64>,
    pub applied_transactions: u64,
    pub applied_changes: u64,
    /// The source position of the last applied transaction.
    pub source: Location,
    pub source_commit_time: Option<DateTime<Utc>>,
    /// Seconds since the commit of the last applied transaction, when behind; 0 when not.
    pub lag_seconds: Option<i64>,
    pub last_error: Option<String>,
    /// Conflicts recorded in `relay_conflicts` for this source.
    pub conflicts: u64,
    /// Messages from this source recorded in `relay_dead_letters` and skipped.
    pub dead_letters: u64,
    pub updated_at: String,
}

/// Capture's status, from its checkpoint and the server's binlog.
pub async fn capture(
    context: &RelayContext,
    now: DateTime<Utc>,
) -> Result<CaptureStatus, RelayError> {
    let dc = context.dc();
    let bound = context.statement_bound();
    let mut conn = mysql::connect(context.url()).await?;
    let found = bound
        .wait(
            || "reading the checkpoint".into(),
            checkpoint::load(&mut conn, dc),
        )
        .await?;
    let (file, pos, gtid) = bound
        .wait(
            || "reading the binlog position".into(),
            checkpoint::server_position(&mut conn),
        )
        .await?;
    let logs: Vec<mysql_async::Row> = bound
        .call(
            || "listing binary logs".into(),
            conn.query("SHOW BINARY LOGS"),
        )
        .await?;
    let _ = conn.disconnect().await;
    // By position: MySQL 8 adds an `Encrypted` column.
    let logs = logs
        .into_iter()
        .map(|mut row| {
            let name: String = take(&mut row, 0, "SHOW BINARY LOGS Log_name")?;
            let size: u64 = take(&mut row, 1, "SHOW BINARY LOGS File_size")?;
            Ok((name, size))
        })
        .collect::<Result<Vec<_>, DbError>>()?;
    let behind_bytes = found
        .as_ref()
        .and_then(|c| bytes_between(&logs, (&c.file, c.pos), (&file, pos)));
    let behind_transactions = found.as_ref().map(|c| gtid.groups_since(&c.gtid_state));
    let lag_seconds = found
        .as_ref()
        .and_then(|c| lag(c.commit_ts, behind_transactions.map(|b| b > 0), now));
    Ok(CaptureStatus {
        dc: dc.to_string(),
        topic: context.topic(dc),
        checkpoint: found.as_ref().map(location),
        published_transactions: found.as_ref().map_or(0, |c| c.published_transactions),
        published_changes: found.as_ref().map_or(0, |c| c.published_changes),
        server: Location {
            file,
            pos,
            gtid: gtid.to_string(),
        },
        behind_transactions,
        behind_bytes,
        lag_seconds,
    })
}

/// Each applier's status, from `relay_applied` and the topics' end offsets.
pub async fn appliers(
    context: &RelayContext,
    now: DateTime<Utc>,
) -> Result<Vec<ApplyStatus>, RelayError> {
    let mut conn: Conn = mysql::connect(context.url()).await?;
    let reading = conn.query(format!(
        "SELECT source_dc, topic, next_offset, source_file, source_pos, source_gtid, \
         source_commit_ts, applied_transactions, applied_changes, last_error, \
         CAST(updated_at AS CHAR), (SELECT COUNT(*) FROM `{CONFLICTS_TABLE}` c \
         WHERE c.source_dc = a.source_dc), (SELECT COUNT(*) FROM `{DEAD_LETTERS_TABLE}` d \
         WHERE d.source_dc = a.source_dc) FROM `{APPLIED_TABLE}` a ORDER BY source_dc"
    ));
    let rows: Vec<mysql_async::Row> = context
        .statement_bound()
        .call(|| "reading relay_applied".into(), reading)
        .await?;
    let _ = conn.disconnect().await;
    let mut out = Vec::new();
    for mut row in rows {
        let source_dc: String = take(&mut row, 0, "source_dc")?;
        let topic: String = take(&mut row, 1, "topic")?;
        let next_offset: i64 = take(&mut row, 2, "next_offset")?;
        let commit_ts: u32 = take(&mut row, 6, "source_commit_ts")?;
        let local = &context.kafka.brokers;
        let brokers = context
            .relay
            .remotes
            .iter()
            .find(|r| r.dc == source_dc)
            .map_or(local.as_str(), |r| r.brokers_or(local));
        let end_offset = end_offset(context, brokers, &topic).await;
        let behind = end_offset.map(|end| (end - next_offset).max(0));
        out.push(ApplyStatus {
            lag_seconds: lag(commit_ts, behind.map(|b| b > 0), now),
            source_commit_time: (commit_ts > 0)
                .then(|| DateTime::from_timestamp(i64::from(commit_ts), 0))
                .flatten(),
            source: Location {
                file: take(&mut row, 3, "source_file")?,
                pos: take(&mut row, 4, "source_pos")?,
                gtid: take(&mut row, 5, "source_gtid")?,
            },
            applied_transactions: take(&mut row, 7, "applied_transactions")?,
            applied_changes: take(&mut row, 8, "applied_changes")?,
            last_error: take(&mut row, 9, "last_error")?,
            updated_at: take(&mut row, 10, "updated_at")?,
            conflicts: take(&mut row, 11, "conflicts")?,
            dead_letters: take(&mut row, 12, "dead_letters")?,
            source_dc,
            topic,
            next_offset,
            end_offset,
            behind_messages: behind,
        });
    }
    Ok(out)
}

fn location(c: &Checkpoint) -> Location {
    Location {
        file: c.file.clone(),
        pos: c.pos,
        gtid: c.gtid_state.to_string(),
    }
}

/// Seconds from `commit_ts` to `now` when behind, 0 when caught up, `None` when unknown.
fn lag(commit_ts: u32, behind: Option<bool>, now: DateTime<Utc>) -> Option<i64> {
    match behind? {
        false => Some(0),
        true if commit_ts == 0 => None,
        true => Some((now.timestamp() - i64::from(commit_ts)).max(0)),
    }
}

/// Bytes of binlog from `from` to `to`, given the files and sizes of `SHOW BINARY LOGS`.
pub fn bytes_between(logs: &[(String, u64)], from: (&str, u64), to: (&str, u64)) -> Option<u64> {
    let (from_n, to_n) = (binlog_file_number(from.0)?, binlog_file_number(to.0)?);
    if (from_n, from.1) >= (to_n, to.1) {
        return Some(0);
    }
    if from_n == to_n {
        return Some(to.1 - from.1);
    }
    let mut total = 0;
    for (name, size) in logs {
        let n = binlog_file_number(name)?;
        if n == from_n {
            total += size.saturating_sub(from.1);
        } else if n > from_n && n < to_n {
            total += size;
        }
    }
    Some(total + to.1)
}

/// The topic's end offset, or `None` (and a warning) when Kafka does not answer in time.
pub(super) async fn end_offset(context: &RelayContext, brokers: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = match context.kafka_config(brokers).create_redacted() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(topic, "cannot reach Kafka: {e}");
            return None;
        }
    };
    let name = topic.to_string();
    let result = tokio::task::spawn_blocking(move || {
        consumer.fetch_watermarks(&name, 0, Duration::from_secs(5))
    })
    .await;
    match result {
        Ok(Ok((_, high))) => Some(high),
        Ok(Err(e)) => {
            tracing::warn!(topic, "cannot read the end offset: {e}");
            None
        }
        Err(e) => {
            tracing::warn!(topic, "cannot read the end offset: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_between_positions_across_files() {
        let logs = [
            ("bin.000001".to_string(), 1000),
            ("bin.000002".to_string(), 500),
            ("bin.000003".to_string(), 300),
        ];
        assert_eq!(
            bytes_between(&logs, ("bin.000002", 100), ("bin.000002", 400)),
            Some(300)
        );
        assert_eq!(
            bytes_between(&logs, ("bin.000001", 900), ("bin.000003", 50)),
            Some(100 + 500 + 50)
        );
        assert_eq!(
            bytes_between(&logs, ("bin.000003", 50), ("bin.000001", 900)),
            Some(0)
        );
        assert_eq!(bytes_between(&logs, ("bin", 50), ("bin.000001", 900)), None);
    }

    #[test]
    fn lag_is_zero_when_caught_up_and_unknown_without_a_commit() {
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        assert_eq!(lag(990, Some(true), now), Some(10));
        assert_eq!(lag(990, Some(false), now), Some(0));
        assert_eq!(lag(0, Some(true), now), None);
        assert_eq!(lag(990, None, now), None);
    }
}
