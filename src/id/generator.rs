//! The lock-free ID generator.
//!
//! All mutable state is one atomic word, the next *sequence number*
//! `(seconds since epoch << counter_bits) | counter`. Sequence numbers are contiguous across
//! seconds, so taking the next one after a full second simply moves into the next second
//! ("borrowing" it), and continuing from the stored word after the clock stepped back never
//! reuses a counter. An ID is the sequence number with the service ID spliced in.
//!
//! A generator bound to a service-ID lease also has a floor (the first second it may issue: above
//! every ID issued under the service ID before) and a ceiling (the last second it may issue: the
//! high-water mark persisted with the lease), and can be halted for good when the lease is lost
//! or released. The floor and ceiling are only consulted when a new second is entered, and the
//! halt is a bit of the state word, so the hot path gains one branch on a value it already read.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use serde::Serialize;

use super::clock::{Clock, SystemClock};
use super::{IdError, Layout};

/// How far ahead of the clock the generator may run when a second's counter is used up.
pub const DEFAULT_MAX_BORROW_SECONDS: u32 = 5;

/// At most one warning of each kind per this many seconds: a stuck clock must not flood logs.
const WARN_INTERVAL_SECONDS: u64 = 10;

/// Set in the state word once the generator is halted. Sequence numbers stay below 2^63 (32 bits
/// of seconds above at most 31 counter bits), so the bit is free, and setting it with one atomic
/// operation both stops issuance and fixes the last sequence number issued.
const HALTED: u64 = 1 << 63;

/// Why a generator was halted; stored before the halt bit is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltReason {
    /// The service-ID lease was lost (not renewed in time, or taken over).
    LeaseLost,
    /// The lease was released on shutdown.
    Released,
}

impl HaltReason {
    fn code(self) -> u8 {
        match self {
            HaltReason::LeaseLost => 1,
            HaltReason::Released => 2,
        }
    }
}

/// Keeps the hot word on its own cache line, away from the read-mostly fields.
#[repr(align(64))]
#[derive(Debug, Default)]
struct CacheLine(AtomicU64);

/// A run of consecutive IDs within one second, taken with one atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdBlock {
    first: u64,
    len: u32,
}

impl IdBlock {
    pub fn first(&self) -> u64 {
        self.first
    }

    pub fn last(&self) -> u64 {
        self.first + u64::from(self.len) - 1
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    /// Always false: a block holds at least one ID.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> std::ops::Range<u64> {
        self.first..self.first + u64::from(self.len)
    }
}

impl IntoIterator for IdBlock {
    type Item = u64;
    type IntoIter = std::ops::Range<u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl IntoIterator for &IdBlock {
    type Item = u64;
    type IntoIter = std::ops::Range<u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Counts of the generator's unusual events, for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GeneratorStats {
    /// Seconds entered ahead of the clock because the current second's counter ran out.
    pub borrowed_seconds: u64,
    /// Times the clock was seen to step backwards.
    pub clock_back_events: u64,
    /// Times issuance waited for the clock because borrowing reached its bound.
    pub clock_waits: u64,
}

#[derive(Debug, Default)]
struct Counters {
    borrowed_seconds: AtomicU64,
    clock_back_events: AtomicU64,
    clock_waits: AtomicU64,
}

/// Lets one warning of a kind through per [`WARN_INTERVAL_SECONDS`].
#[derive(Debug, Default)]
struct WarnLimiter(AtomicU64);

impl WarnLimiter {
    fn allow(&self, now: u64) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        (last == 0 || now >= last + WARN_INTERVAL_SECONDS || now < last)
            && self
                .0
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Issues IDs for one service ID. `Send + Sync`: share it by reference or `Arc`.
///
/// Guarantees: IDs from one generator strictly increase in issue order; generators with
/// distinct service IDs never issue the same ID; a second's counter is never reused, whatever
/// the clock does.
#[derive(Debug)]
pub struct IdGenerator<C: Clock = SystemClock> {
    /// Next sequence number to issue.
    next: CacheLine,
    /// Last clock reading seen, to notice the clock stepping back.
    last_clock: CacheLine,
    /// Lowest second (since the epoch) to issue: the clock reads as at least this.
    floor: u64,
    /// Highest second (since the epoch) that may be issued; only ever raised.
    ceiling: AtomicU64,
    /// `HaltReason::code` once halted, 0 before.
    halt_reason: AtomicU8,
    layout: Layout,
    service_id: u32,
    /// `service_id << counter_bits`, spliced into every ID.
    service_field: u64,
    max_borrow: u64,
    clock: C,
    counters: Counters,
    borrow_warning: WarnLimiter,
    clock_back_warning: WarnLimiter,
    wait_warning: WarnLimiter,
}

impl IdGenerator<SystemClock> {
    /// A generator on the system clock.
    pub fn new(layout: Layout, service_id: u32) -> Result<Self, IdError> {
        IdGenerator::with_clock(layout, service_id, SystemClock::new())
    }
}

impl<C: Clock> IdGenerator<C> {
    /// A generator on the given clock.
    pub fn with_clock(layout: Layout, service_id: u32, clock: C) -> Result<Self, IdError> {
        layout.check_service_id(service_id)?;
        Ok(IdGenerator {
            next: CacheLine::default(),
            last_clock: CacheLine::default(),
            floor: 0,
            ceiling: AtomicU64::new(u64::MAX),
            halt_reason: AtomicU8::new(0),
            layout,
            service_id,
            service_field: u64::from(service_id) << layout.counter_bits(),
            max_borrow: u64::from(DEFAULT_MAX_BORROW_SECONDS),
            clock,
            counters: Counters::default(),
            borrow_warning: WarnLimiter::default(),
            clock_back_warning: WarnLimiter::default(),
            wait_warning: WarnLimiter::default(),
        })
    }

    /// Bounds borrowing to `seconds` ahead of the clock; 0 never borrows.
    pub fn with_max_borrow_seconds(mut self, seconds: u32) -> Self {
        self.max_borrow = u64::from(seconds);
        self
    }

    /// Issues no second before `unix_seconds`: the generator reads the clock as at least that,
    /// so a host clock behind it (stepped back, or wrong) cannot take IDs below it. The floor
    /// second counts as the clock's own, not as borrowed.
    pub fn with_floor(mut self, unix_seconds: u64) -> Result<Self, IdError> {
        self.floor = if unix_seconds <= self.layout.epoch_unix_seconds() {
            0
        } else {
            u64::from(self.layout.seconds_since_epoch(unix_seconds)?)
        };
        Ok(self)
    }

    /// Issues no second after `unix_seconds` until [`raise_ceiling`](Self::raise_ceiling) allows
    /// more: an ID past it is refused with [`IdError::PastMark`].
    pub fn with_ceiling(self, unix_seconds: u64) -> Self {
        self.ceiling
            .store(self.since_epoch_saturating(unix_seconds), Ordering::Relaxed);
        self
    }

    /// Allows seconds up to `unix_seconds`. A lower value than the current ceiling is ignored.
    pub fn raise_ceiling(&self, unix_seconds: u64) {
        self.ceiling
            .fetch_max(self.since_epoch_saturating(unix_seconds), Ordering::Release);
    }

    /// The highest second that may be issued, as Unix seconds; `None` when unbounded.
    pub fn ceiling_unix_seconds(&self) -> Option<u64> {
        match self.ceiling.load(Ordering::Acquire) {
            u64::MAX => None,
            since_epoch => Some(self.layout.epoch_unix_seconds() + since_epoch),
        }
    }

    /// The second the next ID would carry if the clock stood still (Unix seconds): the later of
    /// the second in use and the floor. A mark kept ahead of this covers every ID issued so far.
    pub fn frontier_unix_seconds(&self) -> u64 {
        let next = self.next.0.load(Ordering::Acquire) & !HALTED;
        let second = (next >> self.layout.counter_bits()).max(self.floor);
        // After the layout's very last ID the word points one second past the range.
        self.layout.epoch_unix_seconds().saturating_add(second)
    }

    /// Stops issuance for good: every later call is refused with the reason's error. Returns the
    /// second (Unix) of the last ID this generator issued, `None` if it issued none. Exact even
    /// under concurrent issuance: the halt and each issue are operations on the same atomic word.
    /// Halting again keeps the first reason.
    pub fn halt(&self, reason: HaltReason) -> Option<u64> {
        let _ = self.halt_reason.compare_exchange(
            0,
            reason.code(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let next = self.next.0.fetch_or(HALTED, Ordering::AcqRel) & !HALTED;
        // The word starts at 0 and only grows once an ID is taken.
        (next > 0)
            .then(|| self.layout.epoch_unix_seconds() + ((next - 1) >> self.layout.counter_bits()))
    }

    /// Whether [`halt`](Self::halt) was called.
    pub fn is_halted(&self) -> bool {
        self.next.0.load(Ordering::Acquire) & HALTED != 0
    }

    fn since_epoch_saturating(&self, unix_seconds: u64) -> u64 {
        unix_seconds.saturating_sub(self.layout.epoch_unix_seconds())
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn service_id(&self) -> u32 {
        self.service_id
    }

    pub fn clock(&self) -> &C {
        &self.clock
    }

    pub fn stats(&self) -> GeneratorStats {
        GeneratorStats {
            borrowed_seconds: self.counters.borrowed_seconds.load(Ordering::Relaxed),
            clock_back_events: self.counters.clock_back_events.load(Ordering::Relaxed),
            clock_waits: self.counters.clock_waits.load(Ordering::Relaxed),
        }
    }

    /// One ID.
    #[inline]
    pub fn next_id(&self) -> Result<u64, IdError> {
        self.next_block(1).map(|block| block.first)
    }

    /// Up to `n` consecutive IDs with one atomic operation. The block stops at the end of a
    /// second's counter, so it may be shorter than asked; ask again for the rest.
    ///
    /// Blocks the calling thread only when borrowing has reached its bound, until the clock
    /// catches up.
    pub fn next_block(&self, n: u32) -> Result<IdBlock, IdError> {
        if n == 0 {
            return Err(IdError::EmptyBlock);
        }
        let counter_bits = self.layout.counter_bits();
        let per_second = 1u64 << counter_bits;
        let mut current = self.next.0.load(Ordering::Relaxed);
        loop {
            if current & HALTED != 0 {
                return Err(self.halted_error());
            }
            let now = self.observe_clock(self.clock.unix_seconds());
            let now_since_epoch = u64::from(self.layout.seconds_since_epoch(now)?).max(self.floor);
            // A clock ahead of the stored word starts a fresh second; otherwise continue the
            // word, which covers both a stalled or stepped-back clock and a borrowed second.
            let start = current.max(now_since_epoch << counter_bits);
            let second = start >> counter_bits;
            let counter = start & (per_second - 1);
            // The bounds apply to entering a new second only: a second already in use keeps
            // its remaining counters even when the clock has stepped back behind it.
            if counter == 0 {
                let ceiling = self.ceiling.load(Ordering::Acquire);
                if second > ceiling {
                    return Err(self.past_mark_error(second, ceiling));
                }
                if second > now_since_epoch + self.max_borrow {
                    self.wait_for_clock(second, now);
                    current = self.next.0.load(Ordering::Relaxed);
                    continue;
                }
            }
            let Ok(second32) = u32::try_from(second) else {
                return Err(IdError::TimeOutOfRange {
                    unix_seconds: i128::from(self.layout.epoch_unix_seconds() + second),
                    epoch: self.layout.epoch_unix_seconds(),
                });
            };
            let len = u64::from(n).min(per_second - counter);
            match self.next.0.compare_exchange_weak(
                current,
                start + len,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if counter == 0 && second > now_since_epoch {
                        self.note_borrow(second, now_since_epoch, now);
                    }
                    return Ok(IdBlock {
                        first: (u64::from(second32) << 32) | self.service_field | counter,
                        len: len as u32,
                    });
                }
                Err(actual) => current = actual,
            }
        }
    }

    #[cold]
    fn halted_error(&self) -> IdError {
        let service_id = self.service_id;
        // Pairs with the halt's release, which follows the store of the reason.
        let _ = self.next.0.load(Ordering::Acquire);
        match self.halt_reason.load(Ordering::Relaxed) {
            1 => IdError::LeaseLost { service_id },
            _ => IdError::Released { service_id },
        }
    }

    #[cold]
    fn past_mark_error(&self, second: u64, ceiling: u64) -> IdError {
        let epoch = self.layout.epoch_unix_seconds();
        IdError::PastMark {
            service_id: self.service_id,
            unix_seconds: epoch.saturating_add(second),
            mark: epoch.saturating_add(ceiling),
        }
    }

    /// Tracks the clock and counts backward steps. A reading below the last one may only be a
    /// read that raced a newer one, so it is confirmed with a fresh read first.
    #[inline]
    fn observe_clock(&self, now: u64) -> u64 {
        let last = self.last_clock.0.load(Ordering::Acquire);
        if now >= last {
            if now > last {
                self.last_clock.0.fetch_max(now, Ordering::Release);
            }
            return now;
        }
        let fresh = self.clock.unix_seconds();
        if fresh >= last {
            return fresh;
        }
        if self
            .last_clock
            .0
            .compare_exchange(last, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.counters
                .clock_back_events
                .fetch_add(1, Ordering::Relaxed);
            if self.clock_back_warning.allow(fresh) {
                tracing::warn!(
                    service_id = self.service_id,
                    from = last,
                    to = fresh,
                    "clock stepped back {} s; issuing continues from the last second used",
                    last - fresh
                );
            }
        }
        fresh
    }

    fn note_borrow(&self, second: u64, now_since_epoch: u64, now: u64) {
        self.counters
            .borrowed_seconds
            .fetch_add(1, Ordering::Relaxed);
        if self.borrow_warning.allow(now) {
            tracing::warn!(
                service_id = self.service_id,
                ahead_seconds = second - now_since_epoch,
                "ID counter for the current second ran out; borrowing a future second"
            );
        }
    }

    fn wait_for_clock(&self, second: u64, now: u64) {
        self.counters.clock_waits.fetch_add(1, Ordering::Relaxed);
        let now_since_epoch = now - self.layout.epoch_unix_seconds();
        if self.wait_warning.allow(now) {
            tracing::warn!(
                service_id = self.service_id,
                ahead_seconds = second - now_since_epoch,
                max_borrow_seconds = self.max_borrow,
                "next free ID second is past the borrowing bound (id.max_borrow_seconds); \
                 waiting for the clock"
            );
        }
        // The second becomes issuable once the clock reaches `second - max_borrow`.
        let issuable_at = self.layout.epoch_unix_seconds() + second - self.max_borrow;
        self.clock.wait_past(issuable_at - 1);
    }
}
