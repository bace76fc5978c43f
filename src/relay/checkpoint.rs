//! Capture's position in its server's binlog, kept in `relay_checkpoints`, with what it
//! published (its epoch and, per replication domain, the last GTID) in `relay_published_gtids`.
//!
//! A checkpoint is written only for a transaction whose changes Kafka has acknowledged, along
//! with every transaction before it, so a restart neither loses nor reorders anything: it
//! resumes after the checkpoint and publishes again what came after it (the appliers recognise
//! a transaction they already applied by its GTID, see [`super::order`]). Checkpoints stay on
//! the server they describe; on another server (after a failover) capture resumes after the
//! last message of its topic instead (see [`super::resume`]).

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::mysql::DbError;
use crate::mysql::rows::{first, take};

use super::context::{CHECKPOINT_TABLE, PUBLISHED_TABLE, RelayError};
use super::gtid::GtidState;

/// The end of the last transaction a capture finished with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub file: String,
    pub pos: u64,
    pub gtid_state: GtidState,
    /// `gtid_state` may lag the position, which a heartbeat moved past groups the server did
    /// not send; [`gtid_at`] tells the state there. Not stored.
    pub gtid_from_position: bool,
    /// The sequence number the next published transaction gets.
    pub next_seq: u64,
    /// The `seq` of the first transaction of the stream's epoch (see [`super::order`]).
    pub epoch: u64,
    /// Per replication domain, the GTID of the last transaction published in the epoch.
    pub published: GtidState,
    /// Commit time of the last transaction, Unix seconds (0 before the first).
    pub commit_ts: u32,
    pub published_transactions: u64,
    pub published_changes: u64,
}

/// Makes the connection's writes stay out of the binlog: a checkpoint describes this server's
/// binlog, so it means nothing to a replica, and logging it would make capture read its own
/// checkpoints. Needs the SUPER (or, from MariaDB 10.5, BINLOG ADMIN) privilege.
pub async fn unlogged(conn: &mut Conn) -> Result<(), DbError> {
    conn.query_drop("SET SESSION sql_log_bin = 0")
        .await
        .map_err(DbError::mysql(
            "turning off binary logging for checkpoints (the relay's MySQL user needs SUPER or BINLOG ADMIN)",
        ))
}

pub async fn load(conn: &mut Conn, dc: &str) -> Result<Option<Checkpoint>, RelayError> {
    let row: Option<mysql_async::Row> = conn
        .exec_first(
            format!(
                "SELECT c.binlog_file, c.binlog_pos, c.gtid_state, c.next_seq, c.commit_ts, \
                 c.published_transactions, c.published_changes, p.epoch, p.published \
                 FROM `{CHECKPOINT_TABLE}` c LEFT JOIN `{PUBLISHED_TABLE}` p ON p.dc = c.dc \
                 WHERE c.dc = ?"
            ),
            (dc,),
        )
        .await
        .map_err(DbError::mysql(format!("reading the checkpoint of {dc}")))?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    let gtid: String = take(&mut row, 2, "relay_checkpoints.gtid_state")?;
    let epoch: Option<u64> = take(&mut row, 7, "relay_published_gtids.epoch")?;
    let published: Option<String> = take(&mut row, 8, "relay_published_gtids.published")?;
    let bad = |e| {
        RelayError::Refused(format!(
            "the checkpoint of {dc} holds a bad GTID state: {e}"
        ))
    };
    Ok(Some(Checkpoint {
        file: take(&mut row, 0, "relay_checkpoints.binlog_file")?,
        pos: take(&mut row, 1, "relay_checkpoints.binlog_pos")?,
        gtid_state: gtid.parse().map_err(bad)?,
        gtid_from_position: false,
        next_seq: take(&mut row, 3, "relay_checkpoints.next_seq")?,
        epoch: epoch.unwrap_or(0),
        published: published.unwrap_or_default().parse().map_err(bad)?,
        commit_ts: take(&mut row, 4, "relay_checkpoints.commit_ts")?,
        published_transactions: take(&mut row, 5, "relay_checkpoints.published_transactions")?,
        published_changes: take(&mut row, 6, "relay_checkpoints.published_changes")?,
    }))
}

/// Saves the checkpoint and what was published up to it, together.
pub async fn save(conn: &mut Conn, dc: &str, c: &Checkpoint) -> Result<(), DbError> {
    let context = || format!("saving the checkpoint of {dc} at {}:{}", c.file, c.pos);
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .map_err(DbError::mysql(context()))?;
    tx.exec_drop(
        format!(
            "INSERT INTO `{CHECKPOINT_TABLE}` (dc, binlog_file, binlog_pos, gtid_state, next_seq, \
             commit_ts, published_transactions, published_changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), \
             binlog_pos = VALUES(binlog_pos), gtid_state = VALUES(gtid_state), \
             next_seq = VALUES(next_seq), commit_ts = VALUES(commit_ts), \
             published_transactions = VALUES(published_transactions), \
             published_changes = VALUES(published_changes)"
        ),
        (
            dc,
            c.file.as_str(),
            c.pos,
            c.gtid_state.to_string(),
            c.next_seq,
            c.commit_ts,
            c.published_transactions,
            c.published_changes,
        ),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    tx.exec_drop(
        format!(
            "INSERT INTO `{PUBLISHED_TABLE}` (dc, epoch, published) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), published = VALUES(published)"
        ),
        (dc, c.epoch, c.published.to_string()),
    )
    .await
    .map_err(DbError::mysql(context()))?;
    tx.commit().await.map_err(DbError::mysql(context()))
}

/// Records the server's current position as `dc`'s checkpoint, starting epoch `epoch` of its
/// stream with nothing published in it yet: capture relays what is written from now on. For a
/// capture that has no checkpoint and nothing in its topic, and for `relay reset`; `counts`
/// carries the published totals on.
pub async fn start_here(
    conn: &mut Conn,
    dc: &str,
    epoch: u64,
    counts: Option<&Checkpoint>,
) -> Result<Checkpoint, RelayError> {
    let (file, pos, gtid_state) = server_position(conn).await?;
    let first = Checkpoint {
        file,
        pos,
        gtid_state,
        gtid_from_position: false,
        next_seq: epoch,
        epoch,
        published: GtidState::default(),
        commit_ts: 0,
        published_transactions: counts.map_or(0, |c| c.published_transactions),
        published_changes: counts.map_or(0, |c| c.published_changes),
    };
    save(conn, dc, &first).await?;
    Ok(first)
}

/// The GTID state at a binlog position (MariaDB's `BINLOG_GTID_POS`, which reads the file up to
/// there); `None` where the server has no such function or no answer.
pub async fn gtid_at(
    conn: &mut Conn,
    file: &str,
    pos: u64,
) -> Result<Option<GtidState>, RelayError> {
    let row: Option<mysql_async::Row> = match conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, pos))
        .await
    {
        Ok(row) => row,
        // ER_SP_DOES_NOT_EXIST: not MariaDB.
        Err(mysql_async::Error::Server(e)) if e.code == 1305 => return Ok(None),
        Err(e) => {
            return Err(
                DbError::mysql(format!("reading the GTID state at {file}:{pos}"))(e).into(),
            );
        }
    };
    let state: Option<Option<String>> = first(row, "BINLOG_GTID_POS")?;
    state
        .flatten()
        .map(|s| {
            s.parse()
                .map_err(|e| RelayError::Refused(format!("BINLOG_GTID_POS({file}, {pos}): {e}")))
        })
        .transpose()
}

/// Where the server is writing its binlog now, and its GTID state.
pub async fn server_position(conn: &mut Conn) -> Result<(String, u64, GtidState), RelayError> {
    let status: Option<mysql_async::Row> =
        conn.query_first("SHOW MASTER STATUS")
            .await
            .map_err(DbError::mysql(
                "reading the binlog position (SHOW MASTER STATUS)",
            ))?;
    let mut status = status.ok_or_else(|| {
        RelayError::Refused("the server has no binary log: the relay needs log_bin".into())
    })?;
    let file: String = take(&mut status, 0, "SHOW MASTER STATUS File")?;
    let pos: u64 = take(&mut status, 1, "SHOW MASTER STATUS Position")?;
    let gtid: Option<mysql_async::Row> = conn
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await
        .map_err(DbError::mysql("reading @@gtid_binlog_pos"))?;
    let gtid: Option<Option<String>> = first(gtid, "@@GLOBAL.gtid_binlog_pos")?;
    let gtid_state = gtid
        .flatten()
        .unwrap_or_default()
        .parse()
        .map_err(|e| RelayError::Refused(format!("the server's gtid_binlog_pos: {e}")))?;
    Ok((file, pos, gtid_state))
}
