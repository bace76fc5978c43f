//! Service-ID leases in `service_leases`: no two live processes stamp with the same service ID,
//! and no process issues an ID at or below one issued before under its service ID, whatever its
//! clock says.
//!
//! [`HeldLease::acquire`] claims the configured ID (`id.service_id = N`; another holder's live
//! lease is waited out unless renewed meanwhile) or the lowest free or expired one of
//! `id.auto_range` (`"auto"`), and yields an [`IdGenerator`] bounded by the lease:
//! it starts above the row's high-water mark (`issued_seconds_mark`, the latest second any holder
//! may have issued) and never passes the mark this holder persisted. A background task renews
//! the lease and raises the mark ahead of the IDs; when it cannot renew in time, or finds the
//! lease taken, it halts the generator and reports the loss. [`HeldLease::release`] ends the
//! lease on shutdown and lowers the mark to the last second actually issued.
//!
//! Why IDs stay unique even when a lease is wrongly taken over (an operator's forced release of
//! a live holder): a holder raises its generator's ceiling only after the database accepted the
//! raised mark, and a new holder starts above the mark it reads after claiming the row, so the
//! two never issue the same second.

mod rules;
mod sql;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::Pool;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout_at};

use crate::id::settings::{IdSettings, ServiceIdSetting};
use crate::id::{Clock, HaltReason, IdError, IdGenerator, SystemClock};
use crate::mysql::{self, DbError, MysqlUrl};

pub use sql::{Holder, LeaseRow, force_release, list};

use rules::{Candidate, Timing, WhileHeld};

/// Connections of the lease's own pool: renewals never queue behind the writer's batches.
const POOL_CONNECTIONS: usize = 2;

/// Rounds of reading the auto range and trying its candidates before giving up; each failed
/// round means other processes claimed every candidate seen.
const CLAIM_ROUNDS: usize = 10;

/// How long past `id.lease_ttl` a fixed claim waits for another holder's lease to expire: for
/// the statements and the polling around the expiry.
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// How often a waiting fixed claim says it is still waiting.
const WAIT_PROGRESS: Duration = Duration::from_secs(10);

/// How long claiming a lease (and recording the telemetry address) waits on the coordination
/// database for any one thing: a connection, handshake included, or a statement. A server that
/// hangs answers nothing: the start fails with an error saying so rather than waiting for ever.
const STATEMENT_BOUND: Duration = Duration::from_secs(10);

/// `work` within [`STATEMENT_BOUND`]; `what` names it in the error.
async fn bounded<T, E: From<DbError>>(
    what: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    crate::mysql::bound::within(STATEMENT_BOUND, what, work).await
}

/// Why a lease could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "service ID {service_id} is leased by another live process: host {host}, pid {pid}, \
         until {expires_at} (database clock, {expires_in_seconds} s from now); if that process is \
         gone, wait for the lease to expire or run `logstamp leases release {service_id} --force`"
    )]
    Held {
        service_id: u32,
        host: String,
        pid: u32,
        expires_at: String,
        expires_in_seconds: i64,
    },
    #[error(
        "no free service ID in id.auto_range {first}-{last}: every one is leased by a live process"
    )]
    NoFreeId { first: u32, last: u32 },
    #[error(
        "could not claim a service ID in {first}-{last}: other processes kept claiming the free \
         ones first; try again"
    )]
    Contended { first: u32, last: u32 },
    #[error("the lease of service ID {service_id} was lost while it was being set up")]
    LostAtStart { service_id: u32 },
    #[error(transparent)]
    Store(#[from] DbError),
    #[error("service ID lease: {0}")]
    Id(#[from] IdError),
}

/// The lease's state, as watched by [`HeldLease::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStatus {
    Held,
    /// The generator was halted; the reason says why the lease may be gone.
    Lost(String),
}

/// What [`HeldLease::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub service_id: u32,
    /// The mark left in the row: the last second issued under this lease (or the mark found at
    /// the claim if none was issued).
    pub mark: u64,
    /// False when the row could not be updated (the lease was lost, or the database did not
    /// answer in time): the lease then simply expires and the mark stays where it was, which is
    /// safe.
    pub row_released: bool,
}

/// A claimed service ID and the generator bound to it. Needs a tokio runtime (the renewal runs
/// as a task on it). Share the generator with [`HeldLease::generator`]; watch for loss with
/// [`HeldLease::lost`]; end with [`HeldLease::release`]. Dropping it without releasing halts the
/// generator and leaves the lease to expire.
#[derive(Debug)]
pub struct HeldLease<C: Clock + 'static = SystemClock> {
    keeper: Arc<Keeper<C>>,
    mark_at_claim: u64,
    status: watch::Receiver<LeaseStatus>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

/// What the renewal task needs; shared with it.
#[derive(Debug)]
struct Keeper<C: Clock + 'static> {
    pool: Pool,
    service_id: u32,
    holder: Holder,
    timing: Timing,
    generator: Arc<IdGenerator<C>>,
}

impl HeldLease<SystemClock> {
    /// Claims a service ID as `id` says, in the database at `url`, on the system clock.
    pub async fn acquire(url: &MysqlUrl, id: &IdSettings) -> Result<HeldLease, LeaseError> {
        HeldLease::acquire_with_clock(url, id, SystemClock::new()).await
    }
}

impl<C: Clock + 'static> HeldLease<C> {
    /// Claims a service ID as `id` says, in the database at `url`, with a generator on
    /// `clock`.
    pub async fn acquire_with_clock(
        url: &MysqlUrl,
        id: &IdSettings,
        clock: C,
    ) -> Result<HeldLease<C>, LeaseError> {
        let timing = Timing::new(id.lease_ttl, id.mark_window);
        let holder = Holder::this_process();
        let pool = mysql::pool(url, POOL_CONNECTIONS)?;
        let connecting = || format!("connecting to {} for the service-ID lease", url.redacted());
        let mut conn = bounded(connecting, async {
            pool.get_conn().await.map_err(DbError::mysql(connecting()))
        })
        .await?;
        // The renewal clock starts before the claim was sent: the database's expiry is later.
        let (service_id, claimed_at) = match id.service_id {
            ServiceIdSetting::Fixed(service_id) => {
                claim_fixed(&mut conn, service_id, &holder, timing.ttl).await?
            }
            ServiceIdSetting::Auto => {
                let claimed_at = Instant::now();
                let service_id = claim_auto(&mut conn, id.auto_ids(), &holder, timing.ttl).await?;
                (service_id, claimed_at)
            }
        };
        let mark_at_claim = bounded(
            || format!("reading the high-water mark of service ID {service_id}"),
            sql::claimed_mark(&mut conn, service_id, &holder),
        )
        .await?
        .ok_or(LeaseError::LostAtStart { service_id })?;
        let mut generator = IdGenerator::with_clock(id.layout, service_id, clock)?
            .with_max_borrow_seconds(id.max_borrow_seconds);
        if let Some(floor) = rules::floor_after(mark_at_claim) {
            generator = generator.with_floor(floor)?;
        }
        let host_now = generator.clock().unix_seconds();
        let ceiling =
            rules::ceiling_for(host_now, generator.frontier_unix_seconds(), timing.window);
        let renewed = bounded(
            || format!("renewing the lease of service ID {service_id} as it starts"),
            sql::renew(&mut conn, service_id, &holder, timing.ttl, ceiling),
        )
        .await?;
        if !renewed {
            return Err(LeaseError::LostAtStart { service_id });
        }
        let generator = Arc::new(generator.with_ceiling(ceiling));
        let frontier = generator.frontier_unix_seconds();
        if frontier > host_now.saturating_add(id.mark_window.as_secs()) {
            tracing::warn!(
                service_id,
                ahead_seconds = frontier - host_now,
                "IDs continue above the stored high-water mark, ahead of this host's clock"
            );
        }
        tracing::info!(
            service_id,
            host = %holder.host,
            pid = holder.pid,
            mark = mark_at_claim,
            "service ID leased"
        );
        let keeper = Arc::new(Keeper {
            pool,
            service_id,
            holder,
            timing,
            generator,
        });
        let (status_tx, status) = watch::channel(LeaseStatus::Held);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(Arc::clone(&keeper).keep(claimed_at, status_tx, stop_rx));
        Ok(HeldLease {
            keeper,
            mark_at_claim,
            status,
            stop,
            task: Some(task),
        })
    }

    pub fn service_id(&self) -> u32 {
        self.keeper.service_id
    }

    pub fn holder(&self) -> &Holder {
        &self.keeper.holder
    }

    /// Records where this process serves `/metrics` and the health checks (`host:port`), for
    /// `leases list` and Prometheus' discovery of the fleet.
    pub async fn advertise(&self, address: &str) -> Result<(), LeaseError> {
        let keeper = &self.keeper;
        let what = || "recording the telemetry address".to_string();
        let mut conn = bounded(what, async {
            keeper.pool.get_conn().await.map_err(DbError::mysql(what()))
        })
        .await?;
        bounded(
            what,
            sql::advertise(&mut conn, keeper.service_id, &keeper.holder, address),
        )
        .await?;
        Ok(())
    }

    /// The generator bound to the lease. It refuses with [`IdError::LeaseLost`] once the lease
    /// is lost, [`IdError::Released`] after release, and [`IdError::PastMark`] (transient) if
    /// IDs got ahead of the persisted mark before the task could raise it.
    pub fn generator(&self) -> &Arc<IdGenerator<C>> {
        &self.keeper.generator
    }

    /// Changes of the lease's status: `Held` until the lease is lost.
    pub fn watch(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    /// Resolves when the lease is lost, with the reason; the generator is halted by then. Never
    /// resolves while the lease is held.
    pub async fn lost(&self) -> String {
        let mut status = self.status.clone();
        let lost = status
            .wait_for(|s| matches!(s, LeaseStatus::Lost(_)))
            .await
            .map(|s| s.clone());
        match lost {
            Ok(LeaseStatus::Lost(reason)) => reason,
            // The task ended without a loss: it was stopped by release or drop.
            _ => std::future::pending().await,
        }
    }

    /// Ends the lease: halts the generator (later calls are refused), stops the renewal, and
    /// sets the row's expiry to now and its mark to the last second issued, so a restart
    /// continues right above it instead of a window ahead. Waits at most one TTL for the
    /// database.
    pub async fn release(mut self) -> Result<Released, LeaseError> {
        let last_issued = self.keeper.generator.halt(HaltReason::Released);
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            // The task ends at its next tick, or after a write in flight (bounded by the TTL).
            let _ = task.await;
        }
        let mark = rules::release_mark(self.mark_at_claim, last_issued);
        let keeper = &self.keeper;
        let deadline = Instant::now() + keeper.timing.ttl;
        let released = timeout_at(deadline, async {
            let mut conn = keeper
                .pool
                .get_conn()
                .await
                .map_err(DbError::mysql("connecting to release the service-ID lease"))?;
            sql::release(&mut conn, keeper.service_id, &keeper.holder, mark).await
        })
        .await;
        // A connection left blocked by a lost lease's last renewal would hold up the goodbye.
        let _ = timeout_at(deadline, keeper.pool.clone().disconnect()).await;
        let row_released = match released {
            Ok(Ok(done)) => done,
            Ok(Err(e)) if !self.is_lost() => return Err(e.into()),
            Ok(Err(e)) => {
                tracing::warn!(service_id = keeper.service_id, error = %e, "could not release a lost lease");
                false
            }
            Err(_) => false,
        };
        tracing::info!(
            service_id = keeper.service_id,
            mark,
            row_released,
            "service ID released"
        );
        Ok(Released {
            service_id: keeper.service_id,
            mark,
            row_released,
        })
    }

    fn is_lost(&self) -> bool {
        matches!(*self.status.borrow(), LeaseStatus::Lost(_))
    }
}

impl<C: Clock + 'static> Drop for HeldLease<C> {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.keeper.generator.halt(HaltReason::Released);
            let _ = self.stop.send(true);
        }
    }
}

impl<C: Clock + 'static> Keeper<C> {
    /// Renews the lease and raises the mark until stopped or until the lease is lost.
    async fn keep(
        self: Arc<Self>,
        mut renewed_at: Instant,
        status: watch::Sender<LeaseStatus>,
        mut stop: watch::Receiver<bool>,
    ) {
        let timing = self.timing;
        loop {
            tokio::select! {
                _ = sleep(timing.tick) => {}
                _ = stop.changed() => return,
            }
            let deadline = renewed_at + timing.give_up_after;
            let now = Instant::now();
            if now >= deadline {
                return self.lose(&status, "it could not be renewed in time");
            }
            let clock = self.generator.clock().unix_seconds();
            let frontier = self.generator.frontier_unix_seconds();
            let ceiling = self.generator.ceiling_unix_seconds().unwrap_or(u64::MAX);
            if !rules::write_due(now - renewed_at, &timing, ceiling, clock, frontier) {
                continue;
            }
            let mark = rules::ceiling_for(clock, frontier, timing.window);
            let sent = Instant::now();
            match timeout_at(deadline, self.renew(mark)).await {
                Err(_) => return self.lose(&status, "its renewal did not finish in time"),
                Ok(Ok(true)) => {
                    renewed_at = sent;
                    self.generator.raise_ceiling(mark);
                }
                Ok(Ok(false)) => {
                    return self.lose(
                        &status,
                        "it expired or was taken over (another process, or a forced release)",
                    );
                }
                Ok(Err(e)) => tracing::warn!(
                    service_id = self.service_id,
                    error = %e,
                    "renewing the service-ID lease failed; retrying"
                ),
            }
        }
    }

    async fn renew(&self, mark: u64) -> Result<bool, DbError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(DbError::mysql("connecting to renew the service-ID lease"))?;
        sql::renew(
            &mut conn,
            self.service_id,
            &self.holder,
            self.timing.ttl,
            mark,
        )
        .await
    }

    fn lose(&self, status: &watch::Sender<LeaseStatus>, why: &str) {
        self.generator.halt(HaltReason::LeaseLost);
        let reason = format!(
            "the lease of service ID {} was lost: {why}",
            self.service_id
        );
        tracing::error!(
            service_id = self.service_id,
            "{reason}; no more IDs are issued"
        );
        let _ = status.send(LeaseStatus::Lost(reason));
    }
}

/// Claims `service_id`: creates its row, or takes it over if the lease expired; with the time
/// just before the claim that succeeded was sent.
///
/// A live lease of another holder may be that of a process that died without releasing it,
/// such as this worker before a crash and a restart: the claim waits for the lease to expire
/// (at most `ttl` and [`WAIT_MARGIN`]), and refuses as soon as the row's expiry moves, which
/// only a live process does (a renewal, or another claim). The holder's pid is no evidence
/// either way: a pid seen from another host, or from another pid namespace with the same host
/// name, says nothing about whether that process is alive.
async fn claim_fixed(
    conn: &mut mysql_async::Conn,
    service_id: u32,
    holder: &Holder,
    ttl: Duration,
) -> Result<(u32, Instant), LeaseError> {
    let limit = ttl + WAIT_MARGIN;
    // The wait's start and the row's expiry then, once a live lease was seen.
    let mut waiting: Option<(Instant, String)> = None;
    let mut progress_at = Instant::now() + WAIT_PROGRESS;
    // A pass finding no live lease after failing to claim means the row changed between two
    // statements (created, or expired); a few such passes settle it.
    let mut unsettled = 0;
    loop {
        let sent = Instant::now();
        let claiming = || format!("claiming service ID {service_id}");
        if bounded(
            claiming,
            sql::try_claim(conn, Candidate::New(service_id), holder, ttl),
        )
        .await?
            || bounded(
                claiming,
                sql::try_claim(conn, Candidate::Expired(service_id), holder, ttl),
            )
            .await?
        {
            return Ok((service_id, sent));
        }
        let read = bounded(
            || format!("reading the lease of service ID {service_id}"),
            sql::read(conn, service_id),
        )
        .await?;
        let Some(row) = read.filter(|row| row.live) else {
            unsettled += 1;
            if unsettled == CLAIM_ROUNDS {
                return Err(LeaseError::Contended {
                    first: service_id,
                    last: service_id,
                });
            }
            continue;
        };
        let expires_in = Duration::from_micros(u64::try_from(row.expires_in_micros).unwrap_or(0));
        let (started, first_expiry) = waiting.get_or_insert_with(|| {
            tracing::warn!(
                service_id,
                expires_at = %row.expires_at,
                "service ID {service_id} is leased by host {}, pid {}, for {} s more (database \
                 clock): waiting for the lease to expire, as its holder may have died; refusing \
                 if the holder renews it",
                row.host,
                row.pid,
                expires_in.as_secs(),
            );
            (Instant::now(), row.expires_at.clone())
        });
        let now = Instant::now();
        match rules::while_held(
            first_expiry,
            &row.expires_at,
            expires_in,
            now - *started,
            limit,
        ) {
            WhileHeld::Wait(pause) => {
                if now >= progress_at {
                    progress_at = now + WAIT_PROGRESS;
                    tracing::info!(
                        service_id,
                        "still waiting for the lease of service ID {service_id} to expire \
                         ({} s left)",
                        expires_in.as_secs()
                    );
                }
                sleep(pause).await;
            }
            WhileHeld::Refuse => {
                return Err(LeaseError::Held {
                    service_id,
                    host: row.host,
                    pid: row.pid,
                    expires_at: row.expires_at,
                    expires_in_seconds: row.expires_in_micros.div_euclid(1_000_000),
                });
            }
        }
    }
}

/// Claims the lowest free or expired ID of `range`.
async fn claim_auto(
    conn: &mut mysql_async::Conn,
    range: std::ops::RangeInclusive<u32>,
    holder: &Holder,
    ttl: std::time::Duration,
) -> Result<u32, LeaseError> {
    let (first, last) = (*range.start(), *range.end());
    for _ in 0..CLAIM_ROUNDS {
        let seen = bounded(
            || format!("reading the leases of id.auto_range {first}-{last}"),
            sql::seen(conn, first, last),
        )
        .await?;
        let candidates = rules::candidates(range.clone(), &seen);
        if candidates.is_empty() {
            return Err(LeaseError::NoFreeId { first, last });
        }
        for candidate in candidates {
            let claimed = bounded(
                || format!("claiming service ID {}", candidate.service_id()),
                sql::try_claim(conn, candidate, holder, ttl),
            )
            .await?;
            if claimed {
                return Ok(candidate.service_id());
            }
        }
    }
    Err(LeaseError::Contended { first, last })
}

impl Holder {
    /// This process: its host name, pid and a fresh random token.
    pub fn this_process() -> Holder {
        Holder {
            host: host_name(),
            pid: std::process::id(),
            token: format!("{:032x}", rand::random::<u128>()),
        }
    }
}

/// The host's name for operators reading `leases list`; "unknown" if it cannot be read.
fn host_name() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    from_kernel
        .or_else(|| std::env::var("HOSTNAME").ok())
        // The column holds 255 characters.
        .map(|name| name.trim().chars().take(255).collect::<String>())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
