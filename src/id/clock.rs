//! Where the generator reads the time.
//!
//! An ID only needs whole seconds, and reading the system clock costs tens of nanoseconds,
//! several times the rest of the hot path. So [`SystemClock`] reads a second counter that one
//! background thread keeps current; a read is a single relaxed atomic load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of Unix seconds for the generator.
pub trait Clock: Send + Sync {
    /// The current Unix time in whole seconds. May go backwards; the generator copes.
    fn unix_seconds(&self) -> u64;

    /// Blocks until the clock has probably moved past `unix_seconds`. The generator calls this
    /// when it may not issue more IDs until the clock advances.
    fn wait_past(&self, unix_seconds: u64);
}

/// The wall clock, read through a shared ticker thread.
///
/// The ticker wakes at each second boundary and at least every [`TICK_CAP`], so a step of the
/// wall clock is seen within that time. If the thread cannot be started, reads fall back to the
/// system clock directly: slower, never wrong.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    ticker: Option<&'static AtomicU64>,
}

/// The longest the ticker sleeps, bounding how late it notices a step of the wall clock.
const TICK_CAP: Duration = Duration::from_millis(50);

/// Poll interval while waiting for the clock to move past a second.
const WAIT_POLL: Duration = Duration::from_millis(5);

impl SystemClock {
    pub fn new() -> SystemClock {
        static TICKER: OnceLock<Option<&'static AtomicU64>> = OnceLock::new();
        let ticker = *TICKER.get_or_init(|| {
            let seconds: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(wall_seconds())));
            let started = thread::Builder::new()
                .name("logstamp-clock".into())
                .spawn(move || {
                    loop {
                        let now = wall_now();
                        seconds.store(now.as_secs(), Ordering::Relaxed);
                        let to_next = Duration::from_secs(1)
                            - Duration::from_nanos(now.subsec_nanos().into());
                        thread::sleep(to_next.min(TICK_CAP));
                    }
                });
            started.ok().map(|_| seconds)
        });
        SystemClock { ticker }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn unix_seconds(&self) -> u64 {
        match self.ticker {
            Some(seconds) => seconds.load(Ordering::Relaxed),
            None => wall_seconds(),
        }
    }

    fn wait_past(&self, unix_seconds: u64) {
        while self.unix_seconds() <= unix_seconds {
            thread::sleep(WAIT_POLL);
        }
    }
}

/// Time since the Unix epoch; a wall clock set before 1970 reads as the epoch itself.
fn wall_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

fn wall_seconds() -> u64 {
    wall_now().as_secs()
}

/// A clock that only moves when told to: for tests and tools that replay time.
///
/// `wait_past` advances it to the second after the one waited on, so a generator that must wait
/// for the clock makes progress without sleeping; each such wait is counted.
#[derive(Debug, Default)]
pub struct ManualClock {
    seconds: AtomicU64,
    waits: AtomicU64,
}

impl ManualClock {
    pub fn new(unix_seconds: u64) -> ManualClock {
        ManualClock {
            seconds: AtomicU64::new(unix_seconds),
            waits: AtomicU64::new(0),
        }
    }

    pub fn set(&self, unix_seconds: u64) {
        self.seconds.store(unix_seconds, Ordering::SeqCst);
    }

    pub fn advance(&self, seconds: u64) {
        self.seconds.fetch_add(seconds, Ordering::SeqCst);
    }

    /// How many times a caller waited on this clock.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::SeqCst)
    }
}

impl Clock for ManualClock {
    fn unix_seconds(&self) -> u64 {
        self.seconds.load(Ordering::SeqCst)
    }

    fn wait_past(&self, unix_seconds: u64) {
        self.waits.fetch_add(1, Ordering::SeqCst);
        self.seconds.fetch_max(unix_seconds + 1, Ordering::SeqCst);
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn unix_seconds(&self) -> u64 {
        (**self).unix_seconds()
    }

    fn wait_past(&self, unix_seconds: u64) {
        (**self).wait_past(unix_seconds)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn unix_seconds(&self) -> u64 {
        (**self).unix_seconds()
    }

    fn wait_past(&self, unix_seconds: u64) {
        (**self).wait_past(unix_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_tracks_the_wall_clock() {
        let clock = SystemClock::new();
        let wall = wall_seconds();
        let read = clock.unix_seconds();
        // The ticker may lag a boundary by its wake-up latency, never by more than a second.
        assert!(
            read + 1 >= wall && read <= wall + 1,
            "ticker {read} vs wall {wall}"
        );
    }

    #[test]
    fn manual_clock_wait_moves_time_past_the_second() {
        let clock = ManualClock::new(100);
        clock.wait_past(104);
        assert_eq!(clock.unix_seconds(), 105);
        assert_eq!(clock.waits(), 1);
    }
}
