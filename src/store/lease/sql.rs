//! The lease's statements on `service_leases`. Each claim, renewal and release is one
//! conditional statement, so concurrent processes need no transaction and cannot deadlock: the
//! primary key decides who created a row, and the `WHERE` clause who changed it. Expiry is always
//! compared with the database's `NOW(6)`.

use std::time::Duration;

use mysql_async::params;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Error as MysqlError, Params, Row};
use serde::Serialize;

use super::rules::{Candidate, Seen};
use crate::mysql::DbError;
use crate::mysql::rows::{first, take};

/// ER_NO_SUCH_TABLE.
const NO_SUCH_TABLE: u16 = 1146;

/// Who holds (or last held) a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Random per process start, so a restarted process with the same host and pid is another
    /// holder.
    pub token: String,
}

/// A row of `service_leases`, with its state by the database's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseRow {
    pub service_id: u32,
    pub host: String,
    pub pid: u32,
    /// Where the holder serves `/metrics` and the health checks, once it said.
    pub telemetry_address: Option<String>,
    /// RFC 3339 UTC, microseconds.
    pub expires_at: String,
    /// Whether the lease is live now, by the database's clock.
    pub live: bool,
    /// Microseconds from now until the expiry (negative once expired), by the database's clock.
    #[serde(skip)]
    pub expires_in_micros: i64,
    /// The high-water mark: no ID under this service ID carries a later second (Unix seconds).
    pub issued_seconds_mark: u64,
}

/// A failed statement as a store error; a missing table says how to create it.
fn failed(what: String) -> impl FnOnce(MysqlError) -> DbError {
    move |source| match &source {
        MysqlError::Server(e) if e.code == NO_SUCH_TABLE => DbError::catalog(
            "service_leases",
            format!("{what}: table service_leases does not exist: run `logstamp migrate` first"),
        ),
        _ => DbError::Mysql {
            context: what,
            source,
        },
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

const ROW_COLUMNS: &str = "`service_id`, `host`, `pid`, \
     DATE_FORMAT(`expires_at`, '%Y-%m-%dT%H:%i:%s.%fZ'), `expires_at` > NOW(6), \
     TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`), `issued_seconds_mark`, \
     `telemetry_address`";

fn lease_row(mut row: Row) -> Result<LeaseRow, DbError> {
    Ok(LeaseRow {
        service_id: take(&mut row, 0, "service_leases.service_id")?,
        host: take(&mut row, 1, "service_leases.host")?,
        pid: take(&mut row, 2, "service_leases.pid")?,
        expires_at: take(&mut row, 3, "service_leases.expires_at")?,
        live: take::<i64>(&mut row, 4, "whether the lease is live")? == 1,
        expires_in_micros: take(&mut row, 5, "time to the lease's expiry")?,
        issued_seconds_mark: take(&mut row, 6, "service_leases.issued_seconds_mark")?,
        telemetry_address: take(&mut row, 7, "service_leases.telemetry_address")?,
    })
}

/// Every lease row, by service ID.
pub async fn list(conn: &mut Conn) -> Result<Vec<LeaseRow>, DbError> {
    let rows: Vec<Row> = conn
        .query(format!(
            "SELECT {ROW_COLUMNS} FROM `service_leases` ORDER BY `service_id`"
        ))
        .await
        .map_err(failed("reading service_leases".into()))?;
    rows.into_iter().map(lease_row).collect()
}

/// The row of one service ID, if it has one.
pub async fn read(conn: &mut Conn, service_id: u32) -> Result<Option<LeaseRow>, DbError> {
    let row: Option<Row> = conn
        .exec_first(
            format!("SELECT {ROW_COLUMNS} FROM `service_leases` WHERE `service_id` = ?"),
            (service_id,),
        )
        .await
        .map_err(failed(format!(
            "reading the lease of service ID {service_id}"
        )))?;
    row.map(lease_row).transpose()
}

/// Which IDs of `first..=last` have rows, and whether each is live.
pub async fn seen(conn: &mut Conn, first: u32, last: u32) -> Result<Vec<Seen>, DbError> {
    let rows: Vec<Row> = conn
        .exec(
            "SELECT `service_id`, `expires_at` > NOW(6) FROM `service_leases` \
             WHERE `service_id` BETWEEN ? AND ?",
            (first, last),
        )
        .await
        .map_err(failed(format!(
            "reading the leases of service IDs {first}-{last}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(Seen {
                service_id: take(&mut row, 0, "service_leases.service_id")?,
                live: take::<i64>(&mut row, 1, "whether the lease is live")? == 1,
            })
        })
        .collect()
}

/// Runs a statement that changes at most one row; whether it changed one. The statements here
/// move the expiry or the holder of any row they match (a release of a lease already ended may
/// change nothing, and reports so), so the connection's found-rows option does not matter.
async fn changed_one(
    conn: &mut Conn,
    statement: &str,
    params: impl Into<Params> + Send,
    what: String,
) -> Result<bool, DbError> {
    conn.exec_drop(statement, params)
        .await
        .map_err(failed(what))?;
    Ok(conn.affected_rows() == 1)
}

/// Claims a candidate ID: creates the row of an ID nobody ever held, or takes over the row of
/// one whose lease expired. False if another process got there first (created the row, or
/// claimed it since it was seen expired).
pub async fn try_claim(
    conn: &mut Conn,
    candidate: Candidate,
    holder: &Holder,
    ttl: Duration,
) -> Result<bool, DbError> {
    let statement = match candidate {
        // IGNORE turns only the duplicate key into "no row": the other values always fit.
        Candidate::New(_) => {
            "INSERT IGNORE INTO `service_leases` \
             (`service_id`, `host`, `pid`, `instance_token`, `expires_at`, `issued_seconds_mark`) \
             VALUES (:service_id, :host, :pid, :token, NOW(6) + INTERVAL :ttl MICROSECOND, 0)"
        }
        Candidate::Expired(_) => {
            "UPDATE `service_leases` SET `host` = :host, `pid` = :pid, `instance_token` = :token, \
             `telemetry_address` = NULL, `expires_at` = NOW(6) + INTERVAL :ttl MICROSECOND \
             WHERE `service_id` = :service_id AND `expires_at` <= NOW(6)"
        }
    };
    let service_id = candidate.service_id();
    let params = params! {
        "service_id" => service_id,
        "host" => holder.host.as_str(),
        "pid" => holder.pid,
        "token" => holder.token.as_str(),
        "ttl" => micros(ttl),
    };
    changed_one(
        conn,
        statement,
        params,
        format!("claiming service ID {service_id}"),
    )
    .await
}

/// Records where this holder serves its telemetry, while it holds the lease.
pub async fn advertise(
    conn: &mut Conn,
    service_id: u32,
    holder: &Holder,
    address: &str,
) -> Result<(), DbError> {
    conn.exec_drop(
        "UPDATE `service_leases` SET `telemetry_address` = ? \
         WHERE `service_id` = ? AND `instance_token` = ?",
        (address, service_id, holder.token.as_str()),
    )
    .await
    .map_err(failed(format!(
        "recording the telemetry address of service ID {service_id}"
    )))
}

/// Extends a live lease this holder has and raises its mark to at least `mark`. False if the
/// lease is no longer this holder's or has expired: it must not be used any more.
pub async fn renew(
    conn: &mut Conn,
    service_id: u32,
    holder: &Holder,
    ttl: Duration,
    mark: u64,
) -> Result<bool, DbError> {
    changed_one(
        conn,
        "UPDATE `service_leases` SET `expires_at` = NOW(6) + INTERVAL ? MICROSECOND, \
         `issued_seconds_mark` = GREATEST(`issued_seconds_mark`, ?) \
         WHERE `service_id` = ? AND `instance_token` = ? AND `expires_at` > NOW(6)",
        (micros(ttl), mark, service_id, holder.token.as_str()),
        format!("renewing the lease of service ID {service_id}"),
    )
    .await
}

/// The mark this holder found after claiming, before it raised it.
pub async fn claimed_mark(
    conn: &mut Conn,
    service_id: u32,
    holder: &Holder,
) -> Result<Option<u64>, DbError> {
    let row: Option<Row> = conn
        .exec_first(
            "SELECT `issued_seconds_mark` FROM `service_leases` \
             WHERE `service_id` = ? AND `instance_token` = ?",
            (service_id, holder.token.as_str()),
        )
        .await
        .map_err(failed(format!(
            "reading the mark of service ID {service_id}"
        )))?;
    first(row, "service_leases.issued_seconds_mark")
}

/// Ends this holder's lease now and sets the mark to `mark`, the last second it issued. False
/// if the row is another holder's by now (nothing is changed then).
pub async fn release(
    conn: &mut Conn,
    service_id: u32,
    holder: &Holder,
    mark: u64,
) -> Result<bool, DbError> {
    changed_one(
        conn,
        "UPDATE `service_leases` SET `expires_at` = LEAST(`expires_at`, NOW(6)), \
         `issued_seconds_mark` = ? WHERE `service_id` = ? AND `instance_token` = ?",
        (mark, service_id, holder.token.as_str()),
        format!("releasing the lease of service ID {service_id}"),
    )
    .await
}

/// Ends whatever live lease the ID has, for an operator whose holder died. The mark is kept,
/// so IDs issued later under the ID still start above every earlier one. The row as it was
/// before, if a live lease was ended.
pub async fn force_release(conn: &mut Conn, service_id: u32) -> Result<Option<LeaseRow>, DbError> {
    let Some(before) = read(conn, service_id).await? else {
        return Ok(None);
    };
    let ended = changed_one(
        conn,
        "UPDATE `service_leases` SET `expires_at` = NOW(6) \
         WHERE `service_id` = ? AND `expires_at` > NOW(6)",
        (service_id,),
        format!("releasing the lease of service ID {service_id}"),
    )
    .await?;
    Ok(ended.then_some(before))
}
