//! The lease's decisions, without I/O: which service ID to try, where a generator starts and
//! stops, when to write to the lease row, and when a holder must give up.
//!
//! Times here are of two kinds, never mixed: Unix seconds of the host clock (the seconds inside
//! IDs, and the high-water mark that bounds them), and elapsed time on the monotonic clock (how
//! long since the database last confirmed the lease). Expiry itself is judged by the database.

use std::ops::RangeInclusive;
use std::time::Duration;

/// A service ID in the auto range as the database sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub service_id: u32,
    /// The lease has not expired by the database's clock.
    pub live: bool,
}

/// How an ID may be claimed: a row must be created, or an expired one taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    New(u32),
    Expired(u32),
}

impl Candidate {
    pub fn service_id(self) -> u32 {
        match self {
            Candidate::New(id) | Candidate::Expired(id) => id,
        }
    }
}

/// The IDs of `range` an `auto` claim may try, lowest first: those without a row and those
/// whose lease expired. `seen` holds the rows of the range, in any order.
pub fn candidates(range: RangeInclusive<u32>, seen: &[Seen]) -> Vec<Candidate> {
    let mut rows: Vec<Seen> = seen
        .iter()
        .copied()
        .filter(|s| range.contains(&s.service_id))
        .collect();
    rows.sort_unstable_by_key(|s| s.service_id);
    let mut out = Vec::new();
    let mut rows = rows.into_iter().peekable();
    for id in range {
        match rows.next_if(|s| s.service_id == id) {
            None => out.push(Candidate::New(id)),
            Some(Seen { live: false, .. }) => out.push(Candidate::Expired(id)),
            Some(Seen { live: true, .. }) => {}
        }
    }
    out
}

/// What a claimant of a fixed ID does about another holder's live lease, which may be that of a
/// process that died without releasing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileHeld {
    /// Nothing wrote the row since the wait began: look again after this long.
    Wait(Duration),
    /// The row's expiry moved (its holder renewed, or another process claimed it), so a live
    /// process has it; or the wait ran out.
    Refuse,
}

/// How often a waiting claimant reads the row at most: a renewal (every third of the holder's
/// TTL) is seen soon after it is made.
const WAIT_POLL: Duration = Duration::from_millis(250);

/// The least a waiting claimant sleeps, so a lease a few microseconds from its expiry is not
/// read again in a busy loop.
const WAIT_MIN: Duration = Duration::from_millis(10);

/// Whether to wait on: `first_expiry` is the row's expiry when the wait began and `expiry` now
/// (both as the database formats it), `expires_in` the time left by the database's clock,
/// `waited` the time since the wait began, of at most `limit`.
pub fn while_held(
    first_expiry: &str,
    expiry: &str,
    expires_in: Duration,
    waited: Duration,
    limit: Duration,
) -> WhileHeld {
    if expiry != first_expiry || waited >= limit {
        return WhileHeld::Refuse;
    }
    WhileHeld::Wait(expires_in.clamp(WAIT_MIN, WAIT_POLL).min(limit - waited))
}

/// The first second a new holder may issue, given the stored mark: the second after it, or
/// `None` when nothing was ever issued under the ID (a mark of 0).
pub fn floor_after(mark: u64) -> Option<u64> {
    (mark > 0).then(|| mark.saturating_add(1))
}

/// The mark to persist before issuing up to it: `window` seconds past the later of the host
/// clock and the generator's frontier (after a step back the frontier is ahead of the clock).
pub fn ceiling_for(host_now: u64, frontier: u64, window: Duration) -> u64 {
    host_now
        .max(frontier)
        .saturating_add(window.as_secs().max(1))
}

/// Whether the lease row must be written now: the renewal is due, or the IDs are within half a
/// window of the mark.
pub fn write_due(
    since_renewal: Duration,
    timing: &Timing,
    ceiling: u64,
    host_now: u64,
    frontier: u64,
) -> bool {
    since_renewal >= timing.renew_every
        || ceiling
            < host_now
                .max(frontier)
                .saturating_add(timing.window.as_secs() / 2)
}

/// The mark to leave on a clean release: the last second actually issued, never below the mark
/// found at the claim, which covers the holders before.
pub fn release_mark(mark_at_claim: u64, last_issued: Option<u64>) -> u64 {
    last_issued.map_or(mark_at_claim, |last| last.max(mark_at_claim))
}

/// When the lease task acts, from `id.lease_ttl` and `id.mark_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ttl: Duration,
    pub window: Duration,
    /// Renew this long after the last renewal: a third of the TTL, so two may fail in a row.
    pub renew_every: Duration,
    /// Give the lease up this long after the last renewal was sent, unless one succeeded since.
    /// The database computed that renewal's expiry after it was sent, so this comes before the
    /// expiry any other process can see, by a tenth of the TTL for scheduling delays.
    pub give_up_after: Duration,
    /// How often the task looks at the clock and the generator.
    pub tick: Duration,
}

/// The task never sleeps longer than this, so a mark running short is seen quickly.
const MAX_TICK: Duration = Duration::from_secs(1);

impl Timing {
    pub fn new(ttl: Duration, window: Duration) -> Timing {
        let renew_every = ttl / 3;
        Timing {
            ttl,
            window,
            renew_every,
            give_up_after: ttl - ttl / 10,
            tick: renew_every.min(MAX_TICK),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(service_id: u32, live: bool) -> Seen {
        Seen { service_id, live }
    }

    #[test]
    fn candidates_are_free_or_expired_ids_lowest_first() {
        let rows = [seen(3, false), seen(0, true), seen(1, true), seen(9, false)];
        assert_eq!(
            candidates(0..=4, &rows),
            [Candidate::New(2), Candidate::Expired(3), Candidate::New(4)]
        );
        // Rows outside the range do not matter; a range of one live ID has no candidate.
        assert_eq!(candidates(1..=1, &rows), []);
        assert_eq!(candidates(9..=9, &rows), [Candidate::Expired(9)]);
        assert_eq!(
            candidates(u32::MAX - 1..=u32::MAX, &[]),
            [Candidate::New(u32::MAX - 1), Candidate::New(u32::MAX)]
        );
    }

    #[test]
    fn a_claimant_waits_for_an_unrenewed_lease_and_refuses_once_it_is_renewed() {
        let limit = Duration::from_secs(5);
        let at = "2026-01-01T00:00:03.000000Z";
        let ms = Duration::from_millis;
        // Not written since: wait until the expiry, looking again at least every 250 ms.
        assert_eq!(
            while_held(at, at, ms(3000), ms(0), limit),
            WhileHeld::Wait(ms(250))
        );
        assert_eq!(
            while_held(at, at, ms(40), ms(2960), limit),
            WhileHeld::Wait(ms(40))
        );
        assert_eq!(
            while_held(at, at, Duration::from_micros(3), ms(3000), limit),
            WhileHeld::Wait(ms(10))
        );
        // Renewed (or claimed by another): a live process holds it.
        let renewed = "2026-01-01T00:00:04.000000Z";
        assert_eq!(
            while_held(at, renewed, ms(3000), ms(1000), limit),
            WhileHeld::Refuse
        );
        // A lease running past the wait's limit (its holder has a longer TTL): given up there.
        assert_eq!(
            while_held(at, at, ms(3000), ms(4900), limit),
            WhileHeld::Wait(ms(100))
        );
        assert_eq!(
            while_held(at, at, ms(3000), limit, limit),
            WhileHeld::Refuse
        );
    }

    #[test]
    fn a_new_holder_starts_after_the_mark() {
        assert_eq!(floor_after(0), None);
        assert_eq!(floor_after(1_700_000_000), Some(1_700_000_001));
        assert_eq!(floor_after(u64::MAX), Some(u64::MAX));
    }

    #[test]
    fn the_ceiling_runs_ahead_of_the_clock_or_the_frontier_whichever_is_later() {
        let window = Duration::from_secs(20);
        assert_eq!(ceiling_for(1_000, 900, window), 1_020);
        // Clock stepped back an hour below the IDs already issued: ahead of those instead.
        assert_eq!(ceiling_for(1_000, 4_600, window), 4_620);
        assert_eq!(ceiling_for(u64::MAX - 1, 0, window), u64::MAX);
    }

    #[test]
    fn writes_are_due_for_renewal_or_when_the_mark_runs_short() {
        let timing = Timing::new(Duration::from_secs(30), Duration::from_secs(20));
        let fresh = Duration::from_secs(1);
        // Mark 20 s ahead, renewed a second ago: nothing to do.
        assert!(!write_due(fresh, &timing, 1_020, 1_000, 1_000));
        // Renewal due after a third of the TTL.
        assert!(write_due(
            Duration::from_secs(10),
            &timing,
            1_020,
            1_000,
            1_000
        ));
        // Less than half the window left, by the clock or by the frontier.
        assert!(write_due(fresh, &timing, 1_009, 1_000, 1_000));
        assert!(write_due(fresh, &timing, 1_020, 1_000, 1_015));
        assert!(!write_due(fresh, &timing, 1_010, 1_000, 1_000));
    }

    #[test]
    fn release_leaves_the_last_issued_second_never_below_the_claimed_mark() {
        assert_eq!(release_mark(500, None), 500);
        assert_eq!(release_mark(500, Some(800)), 800);
        assert_eq!(release_mark(500, Some(400)), 500);
    }

    #[test]
    fn timing_gives_up_before_the_database_expires_the_lease() {
        let t = Timing::new(Duration::from_secs(30), Duration::from_secs(20));
        assert_eq!(t.renew_every, Duration::from_secs(10));
        assert_eq!(t.give_up_after, Duration::from_secs(27));
        assert_eq!(t.tick, Duration::from_secs(1));
        assert!(t.give_up_after < t.ttl);
        let short = Timing::new(Duration::from_secs(1), Duration::from_secs(14));
        assert!(short.tick <= short.renew_every && short.renew_every < short.give_up_after);
    }
}
