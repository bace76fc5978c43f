//! What an applier records of its progress and its stops: `relay_applied`,
//! `relay_applied_gtids` and the errors `relay status` shows.

use super::*;

/// Records the transactions in `relay_applied`: where a restart resumes.
pub(super) fn applied_update(
    source_dc: &str,
    end: &End,
    transactions: usize,
    changes: u64,
) -> String {
    let mut sql = format!(
        "UPDATE `{APPLIED_TABLE}` SET next_offset = {}, source_pos = {}, \
         source_seq = {}, source_commit_ts = {}, \
         applied_transactions = applied_transactions + {transactions}, \
         applied_changes = applied_changes + {changes}, last_error = NULL, source_run = {}, \
         source_file = ",
        end.next_offset,
        end.position.pos,
        end.seq,
        end.commit_ts,
        end.run.map_or("NULL".to_string(), |run| run.to_string())
    );
    push_sql_string(&mut sql, &end.position.file);
    sql.push_str(", source_gtid = ");
    push_sql_string(&mut sql, end.position.gtid.as_deref().unwrap_or_default());
    sql.push_str(" WHERE source_dc = ");
    push_sql_string(&mut sql, source_dc);
    sql
}

/// Records that the source's capture resumed at the message before `next_offset`: applying
/// goes on after it, in `run`.
pub(super) async fn record_resumed(
    conn: &mut Conn,
    limit: Duration,
    source_dc: &str,
    next_offset: i64,
    run: Option<u64>,
) -> Result<(), RelayError> {
    // GREATEST: a retry after an answer that never came records nothing twice.
    on_target(
        limit,
        || format!("recording in {APPLIED_TABLE} that the capture of {source_dc} resumed"),
        conn.exec_drop(
            format!(
                "UPDATE `{APPLIED_TABLE}` SET next_offset = GREATEST(next_offset, ?), \
                 source_run = ? WHERE source_dc = ?"
            ),
            (next_offset, run, source_dc),
        ),
    )
    .await?;
    Ok(())
}

/// Records that `source_dc` changed `tables` here (nothing to record when there are none), so
/// that a snapshot of them taken here is refused (see [`crate::relay::snapshot`]).
pub(super) fn applied_tables_update(
    source_dc: &str,
    tables: &[(String, String)],
) -> Option<String> {
    if tables.is_empty() {
        return None;
    }
    let mut sql = format!(
        "INSERT IGNORE INTO `{APPLIED_TABLES_TABLE}` (source_dc, table_schema, table_name) VALUES "
    );
    for (i, (schema, table)) in tables.iter().enumerate() {
        sql.push_str(if i == 0 { "(" } else { ", (" });
        push_sql_string(&mut sql, source_dc);
        sql.push_str(", ");
        push_sql_string(&mut sql, schema);
        sql.push_str(", ");
        push_sql_string(&mut sql, table);
        sql.push(')');
    }
    Some(sql)
}

/// Records how far the applier is in the source's stream: what recognises a transaction
/// published again, on any server of the source.
pub(super) fn gtids_update(source_dc: &str, followed: &Followed) -> String {
    let mut sql =
        format!("INSERT INTO `{APPLIED_GTIDS_TABLE}` (source_dc, epoch, applied) VALUES (");
    push_sql_string(&mut sql, source_dc);
    sql.push_str(&format!(", {}, ", followed.epoch));
    push_sql_string(&mut sql, &followed.applied.to_string());
    sql.push_str(") ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), applied = VALUES(applied)");
    sql
}

pub(super) async fn load_applied(
    conn: &mut Conn,
    limit: Duration,
    source_dc: &str,
    topic: &str,
) -> Result<Applied, RelayError> {
    let context = || format!("reading the applied offset of {source_dc}");
    on_target(
        limit,
        context,
        conn.exec_drop(
            format!(
                "INSERT IGNORE INTO `{APPLIED_TABLE}` (source_dc, topic, next_offset) \
                 VALUES (?, ?, 0)"
            ),
            (source_dc, topic),
        ),
    )
    .await?;
    let row: Option<mysql_async::Row> = on_target(
        limit,
        context,
        conn.exec_first(
            format!(
                "SELECT a.next_offset, g.epoch, g.applied, a.topic, a.source_run \
                 FROM `{APPLIED_TABLE}` a LEFT JOIN `{APPLIED_GTIDS_TABLE}` g ON g.source_dc = a.source_dc \
                 WHERE a.source_dc = ?"
            ),
            (source_dc,),
        ),
    )
    .await?;
    let mut row = row.ok_or_else(|| RelayError::Refused(format!("{}: no row", context())))?;
    let stored_topic: String = take(&mut row, 3, "relay_applied.topic")?;
    if stored_topic != topic {
        return Err(RelayError::Refused(format!(
            "{source_dc} was applied from topic {stored_topic}, now configured as {topic}: \
             offsets of one topic mean nothing in another; reset its row in relay_applied"
        )));
    }
    let epoch: Option<u64> = take(&mut row, 1, "relay_applied_gtids.epoch")?;
    let applied: Option<String> = take(&mut row, 2, "relay_applied_gtids.applied")?;
    Ok(Applied {
        next_offset: take(&mut row, 0, "relay_applied.next_offset")?,
        run: take(&mut row, 4, "relay_applied.source_run")?,
        followed: Followed {
            epoch: epoch.unwrap_or(0),
            applied: applied.unwrap_or_default().parse().map_err(|e| {
                RelayError::Refused(format!(
                    "relay_applied_gtids of {source_dc} holds a bad GTID state: {e}"
                ))
            })?,
        },
    })
}

/// Stops applying from `source_dc` where everybody sees it: the log, `relay status`, the
/// metric and readiness that show `stopped`.
pub(super) async fn stop_visibly(
    conn: &mut Conn,
    limit: Duration,
    stopped: &AtomicBool,
    source_dc: &str,
    why: &str,
) -> Result<(), RelayError> {
    stopped.store(true, Ordering::Relaxed);
    tracing::error!(
        source = source_dc,
        "applying from {source_dc} stopped: {why}"
    );
    record_error(conn, limit, source_dc, why).await
}

/// Ends the local transaction a failed or cut-short apply left open.
pub(super) async fn rollback(
    conn: &mut Conn,
    limit: Duration,
    source_dc: &str,
) -> Result<(), RelayError> {
    on_target(
        limit,
        || format!("rolling back a transaction from {source_dc} not applied whole"),
        conn.query_drop("ROLLBACK"),
    )
    .await?;
    Ok(())
}

/// Stores why applying is stuck, for `relay status`.
pub(super) async fn record_error(
    conn: &mut Conn,
    limit: Duration,
    source_dc: &str,
    message: &str,
) -> Result<(), RelayError> {
    on_target(
        limit,
        || format!("recording the error of {source_dc}"),
        conn.exec_drop(
            format!("UPDATE `{APPLIED_TABLE}` SET last_error = ? WHERE source_dc = ?"),
            (message, source_dc),
        ),
    )
    .await?;
    Ok(())
}
