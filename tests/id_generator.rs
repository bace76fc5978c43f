//! The generator: uniqueness under threads, and every clock behaviour the brief names, driven by
//! an injected clock so no test sleeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use logstamp::id::{Clock, HaltReason, IdError, IdGenerator, Layout, ManualClock};

const T0: u64 = 1_700_000_000;

fn tiny_counter() -> Layout {
    // 30 service bits leave 2 counter bits: 4 IDs per second.
    Layout::new(30, 0).unwrap()
}

fn second_of(id: u64) -> u64 {
    id >> 32
}

#[test]
fn eight_threads_issue_unique_increasing_ids() {
    // 4 service bits: 2^28 IDs per second, so 16 million IDs need no borrowing on a real clock.
    let generator = Arc::new(IdGenerator::new(Layout::new(4, 0).unwrap(), 9).unwrap());
    let per_thread = 2_000_000usize;
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let generator = Arc::clone(&generator);
            thread::spawn(move || {
                let mut ids = Vec::with_capacity(per_thread + 1000);
                while ids.len() < per_thread {
                    if t % 2 == 0 {
                        ids.push(generator.next_id().unwrap());
                    } else {
                        ids.extend(generator.next_block(1000).unwrap());
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        let ids = handle.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's IDs went backwards"
        );
        assert!(
            ids.iter()
                .all(|&id| Layout::new(4, 0).unwrap().decode(id).service_id == 9)
        );
        all.extend(ids);
    }
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued, "duplicate IDs across threads");
}

#[test]
fn threads_racing_a_ticking_clock_never_duplicate_nor_see_false_clock_steps() {
    let clock = Arc::new(ManualClock::new(T0));
    // 4,096 IDs per second: the workers both borrow and see the clock tick under them.
    let generator = Arc::new(
        IdGenerator::with_clock(Layout::new(20, 0).unwrap(), 1, Arc::clone(&clock))
            .unwrap()
            .with_max_borrow_seconds(1_000_000),
    );
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (clock, done) = (Arc::clone(&clock), Arc::clone(&done));
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                clock.advance(1);
                thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let generator = Arc::clone(&generator);
            thread::spawn(move || {
                let mut ids = Vec::with_capacity(350_000);
                for _ in 0..50_000 {
                    ids.extend(generator.next_block(7).unwrap());
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for worker in workers {
        let ids = worker.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        all.extend(ids);
    }
    done.store(true, Ordering::SeqCst);
    ticker.join().unwrap();
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued);
    // The clock only moved forward; a stale read racing a newer one must not count as a step.
    assert_eq!(generator.stats().clock_back_events, 0);
}

#[test]
fn a_stalled_clock_keeps_counting_within_its_second() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 5, &clock).unwrap();
    let ids: Vec<u64> = (0..1000).map(|_| generator.next_id().unwrap()).collect();
    let layout = Layout::default();
    for (i, id) in ids.iter().enumerate() {
        let d = layout.decode(*id);
        assert_eq!((d.unix_seconds, d.service_id, d.counter), (T0, 5, i as u32));
    }
    assert_eq!(generator.stats().borrowed_seconds, 0);
}

#[test]
fn a_clock_jumping_forward_starts_the_new_second_at_counter_zero() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 5, &clock).unwrap();
    let before = generator.next_block(10).unwrap();
    clock.advance(3_600);
    let after = generator.next_id().unwrap();
    assert!(after > before.last());
    let d = Layout::default().decode(after);
    assert_eq!((d.unix_seconds, d.counter), (T0 + 3_600, 0));
    assert_eq!(generator.stats().clock_back_events, 0);
}

#[test]
fn a_clock_stepping_back_an_hour_continues_from_the_last_second_used() {
    let clock = ManualClock::new(T0);
    let layout = Layout::default();
    let generator = IdGenerator::with_clock(layout, 5, &clock).unwrap();
    let before = generator.next_block(100).unwrap();
    clock.set(T0 - 3_600);
    let after: Vec<u64> = (0..50).map(|_| generator.next_id().unwrap()).collect();
    assert!(after[0] > before.last());
    // Same second, the counter carries on: no reset, no reuse.
    let d = layout.decode(after[0]);
    assert_eq!((d.unix_seconds, d.counter), (T0, 100));
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(generator.stats().clock_back_events, 1);
    // The second in use still had counters: nothing waited for the clock.
    assert_eq!(clock.waits(), 0);
    assert_eq!(clock.unix_seconds(), T0 - 3_600);
    // Clock creeping forward but still behind the last second used: still no reuse, no new count.
    clock.advance(10);
    let later = generator.next_id().unwrap();
    assert!(later > *after.last().unwrap());
    assert_eq!(generator.stats().clock_back_events, 1);
}

#[test]
fn exhausting_a_tiny_counter_borrows_up_to_the_bound_then_waits_for_the_clock() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(tiny_counter(), 3, &clock)
        .unwrap()
        .with_max_borrow_seconds(2);
    // Seconds T0, T0+1, T0+2 hold 4 IDs each without waiting: the current one plus 2 borrowed.
    let ids: Vec<u64> = (0..12).map(|_| generator.next_id().unwrap()).collect();
    let seconds: Vec<u64> = ids.iter().map(|&id| second_of(id)).collect();
    assert_eq!(seconds[..4], [T0; 4]);
    assert_eq!(seconds[4..8], [T0 + 1; 4]);
    assert_eq!(seconds[8..], [T0 + 2; 4]);
    assert_eq!(clock.waits(), 0, "borrowing within the bound must not wait");
    assert_eq!(generator.stats().borrowed_seconds, 2);
    assert_eq!(clock.unix_seconds(), T0);

    // The 13th ID would need T0+3, three seconds ahead: the generator waits for the clock.
    let next = generator.next_id().unwrap();
    assert_eq!(second_of(next), T0 + 3);
    assert_eq!(clock.waits(), 1);
    assert_eq!(generator.stats().clock_waits, 1);
    assert!(
        clock.unix_seconds() + 2 >= T0 + 3,
        "issued a second further ahead than the bound"
    );
    assert!(next > ids[11]);
}

#[test]
fn with_no_borrowing_allowed_a_full_second_waits() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(tiny_counter(), 0, &clock)
        .unwrap()
        .with_max_borrow_seconds(0);
    let ids: Vec<u64> = (0..9).map(|_| generator.next_id().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(clock.waits(), 2);
    assert_eq!(generator.stats().borrowed_seconds, 0);
    assert_eq!(second_of(ids[8]), T0 + 2);
}

#[test]
fn blocks_stop_at_the_end_of_a_second() {
    let clock = ManualClock::new(T0);
    let layout = Layout::new(28, 0).unwrap(); // 16 IDs per second
    let generator = IdGenerator::with_clock(layout, 1, &clock).unwrap();
    let first = generator.next_block(10).unwrap();
    assert_eq!(first.len(), 10);
    let rest = generator.next_block(10).unwrap();
    assert_eq!(rest.len(), 6, "block must not cross into the next second");
    assert_eq!(rest.first(), first.last() + 1);
    assert_eq!(layout.decode(rest.last()).counter, 15);
    let borrowed = generator.next_block(10).unwrap();
    assert_eq!(second_of(borrowed.first()), T0 + 1);
    assert_eq!(layout.decode(borrowed.first()).counter, 0);
    let collected: Vec<u64> = first.into_iter().collect();
    assert_eq!(collected.len(), 10);
    assert!(collected.windows(2).all(|w| w[1] == w[0] + 1));
}

#[test]
fn bad_requests_and_clocks_are_errors_not_panics() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 1, &clock).unwrap();
    assert_eq!(generator.next_block(0), Err(IdError::EmptyBlock));

    assert!(matches!(
        IdGenerator::with_clock(Layout::default(), 1024, &clock),
        Err(IdError::ServiceIdOutOfRange { .. })
    ));

    let before_epoch = ManualClock::new(100);
    let late_epoch =
        IdGenerator::with_clock(Layout::new(10, 1_000).unwrap(), 1, &before_epoch).unwrap();
    assert!(matches!(
        late_epoch.next_id(),
        Err(IdError::TimeOutOfRange { .. })
    ));

    let past_range = ManualClock::new(1 << 32);
    let generator = IdGenerator::with_clock(Layout::default(), 1, &past_range).unwrap();
    assert!(matches!(
        generator.next_id(),
        Err(IdError::TimeOutOfRange { .. })
    ));
}

#[test]
fn ids_past_2038_are_above_i64_max_and_still_increase() {
    let clock = ManualClock::new(1 << 31);
    let generator = IdGenerator::with_clock(Layout::default(), 1023, &clock).unwrap();
    let a = generator.next_id().unwrap();
    let b = generator.next_id().unwrap();
    assert!(a > i64::MAX as u64 && b > a);
}

// ---------------------------------------------------------------------------------------------
// Floor, ceiling and halt: what a service-ID lease bounds the generator with
// ---------------------------------------------------------------------------------------------

#[test]
fn a_floor_ahead_of_the_clock_continues_above_every_earlier_id() {
    let layout = Layout::default();
    let before_clock = ManualClock::new(T0);
    let before = IdGenerator::with_clock(layout, 5, &before_clock).unwrap();
    let issued: Vec<u64> = (0..100).map(|_| before.next_id().unwrap()).collect();
    let last_second = before.halt(HaltReason::Released).unwrap();
    assert_eq!(last_second, T0);

    // Restarted with the clock an hour behind, from the second after the last one issued.
    let after_clock = ManualClock::new(T0 - 3_600);
    let after = IdGenerator::with_clock(layout, 5, &after_clock)
        .unwrap()
        .with_floor(last_second + 1)
        .unwrap();
    assert_eq!(after.frontier_unix_seconds(), T0 + 1);
    let next: Vec<u64> = (0..100).map(|_| after.next_id().unwrap()).collect();
    assert!(next.iter().min() > issued.iter().max());
    let d = layout.decode(next[0]);
    assert_eq!((d.unix_seconds, d.counter), (T0 + 1, 0));
    // The floor second is the generator's own, not borrowed, and nothing waited.
    assert_eq!(after.stats().borrowed_seconds, 0);
    assert_eq!(after_clock.waits(), 0);
    // Once the clock passes the floor, IDs follow the clock again.
    after_clock.set(T0 + 10);
    assert_eq!(second_of(after.next_id().unwrap()), T0 + 10);
}

#[test]
fn a_floor_behind_the_clock_changes_nothing() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 5, &clock)
        .unwrap()
        .with_floor(T0 - 100)
        .unwrap();
    assert_eq!(second_of(generator.next_id().unwrap()), T0);
    // Below the epoch: no floor at all; past the layout's range: refused.
    let late = Layout::new(10, 1_000).unwrap();
    assert!(
        IdGenerator::with_clock(late, 1, &clock)
            .unwrap()
            .with_floor(5)
            .is_ok()
    );
    assert!(matches!(
        IdGenerator::with_clock(Layout::default(), 1, &clock)
            .unwrap()
            .with_floor(1 << 33),
        Err(IdError::TimeOutOfRange { .. })
    ));
}

#[test]
fn the_ceiling_refuses_new_seconds_past_it_until_raised() {
    let clock = ManualClock::new(T0);
    // 4 IDs per second, so seconds are entered quickly.
    let generator = IdGenerator::with_clock(tiny_counter(), 3, &clock)
        .unwrap()
        .with_ceiling(T0 + 1);
    assert_eq!(generator.ceiling_unix_seconds(), Some(T0 + 1));
    let ids: Vec<u64> = (0..8).map(|_| generator.next_id().unwrap()).collect();
    assert_eq!(second_of(ids[7]), T0 + 1);
    // T0 + 2 would pass the mark: refused, transiently, without waiting for the clock.
    let refused = generator.next_id().unwrap_err();
    assert_eq!(
        refused,
        IdError::PastMark {
            service_id: 3,
            unix_seconds: T0 + 2,
            mark: T0 + 1
        }
    );
    assert!(refused.is_transient());
    assert_eq!(clock.waits(), 0);
    // The clock moving on does not help: the mark bounds whatever the clock says.
    clock.set(T0 + 5);
    assert!(matches!(generator.next_id(), Err(IdError::PastMark { .. })));
    // A lower value never lowers the ceiling; a higher one lets issuance go on.
    generator.raise_ceiling(T0);
    assert_eq!(generator.ceiling_unix_seconds(), Some(T0 + 1));
    generator.raise_ceiling(T0 + 5);
    let next = generator.next_id().unwrap();
    assert_eq!(second_of(next), T0 + 5);
    assert!(next > ids[7]);
    // Unbounded by default.
    let free = IdGenerator::with_clock(Layout::default(), 1, &clock).unwrap();
    assert_eq!(free.ceiling_unix_seconds(), None);
}

#[test]
fn a_second_entered_below_the_ceiling_keeps_its_counters() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 3, &clock)
        .unwrap()
        .with_ceiling(T0);
    generator.next_id().unwrap();
    // The clock steps forward past the mark: issuing follows it, so that second is refused.
    clock.set(T0 + 1);
    assert!(matches!(generator.next_id(), Err(IdError::PastMark { .. })));
    // Back within the mark, the second in use goes on.
    clock.set(T0);
    assert_eq!(second_of(generator.next_id().unwrap()), T0);
}

#[test]
fn halting_stops_issuance_for_good_and_names_the_reason() {
    let clock = ManualClock::new(T0);
    let generator = IdGenerator::with_clock(Layout::default(), 2, &clock).unwrap();
    assert_eq!(
        generator.halt(HaltReason::LeaseLost),
        None,
        "nothing issued"
    );
    assert!(generator.is_halted());
    assert_eq!(
        generator.next_id(),
        Err(IdError::LeaseLost { service_id: 2 })
    );
    assert_eq!(
        generator.next_block(5),
        Err(IdError::LeaseLost { service_id: 2 })
    );
    // The first reason stays.
    generator.halt(HaltReason::Released);
    assert_eq!(
        generator.next_id(),
        Err(IdError::LeaseLost { service_id: 2 })
    );
    assert!(!generator.next_id().unwrap_err().is_transient());

    let released = IdGenerator::with_clock(Layout::default(), 2, &clock).unwrap();
    released.next_block(10).unwrap();
    clock.advance(3);
    released.next_id().unwrap();
    assert_eq!(released.halt(HaltReason::Released), Some(T0 + 3));
    assert_eq!(released.next_id(), Err(IdError::Released { service_id: 2 }));
    assert_eq!(released.frontier_unix_seconds(), T0 + 3);
}

#[test]
fn a_halt_racing_issuers_reports_the_last_second_any_of_them_got() {
    let clock = Arc::new(ManualClock::new(T0));
    // 4 IDs per second and unbounded borrowing: the issuers cross many seconds.
    let generator = Arc::new(
        IdGenerator::with_clock(tiny_counter(), 1, Arc::clone(&clock))
            .unwrap()
            .with_max_borrow_seconds(u32::MAX),
    );
    let issuers: Vec<_> = (0..4)
        .map(|_| {
            let generator = Arc::clone(&generator);
            thread::spawn(move || {
                let mut seconds = Vec::new();
                loop {
                    match generator.next_id() {
                        Ok(id) => seconds.push(second_of(id)),
                        Err(IdError::Released { .. }) => return seconds,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    while generator.frontier_unix_seconds() < T0 + 1_000 {
        thread::yield_now();
    }
    let last = generator.halt(HaltReason::Released).unwrap();
    let highest = issuers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .max()
        .unwrap();
    assert_eq!(highest, last);
}
