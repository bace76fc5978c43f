//! ID generator benchmarks: `IdGenerator::next_id` and `next_block` against peer crates on 1, 2
//! and 4 threads, plus sustained issuance at the default layout. Results: `docs/benchmarks.md`.
//!
//! Run with `cargo bench --bench id`.
//!
//! Hot-path cases use `Layout::new(1, 0)` (2^31 IDs per second) with unbounded borrowing, so the
//! counter space never throttles them. The `sustained_n10` group uses `Layout::default()` (n = 10,
//! 4,194,304 IDs per second) with the default borrowing bound, where issuance is limited by the
//! clock; it checks every ID for uniqueness and prints the generator's stats.
//!
//! Peers that are not `Sync` are measured two ways on several threads: one instance behind a
//! `Mutex` (how one ID source is shared) and one instance per thread (separate ID sources, each
//! with its own node ID where the crate has one).

use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group};
use logstamp::id::{IdGenerator, Layout};
use snowflake::{SnowflakeIdBucket, SnowflakeIdGenerator};
use uuid::{ContextV7, Timestamp, Uuid};

/// Thread counts of the multi-threaded cases (the single-threaded ones use `Bencher::iter`).
const THREADS: [usize; 2] = [2, 4];

/// IDs asked for per `next_block` call.
const BLOCK: u32 = 1000;

/// IDs one service may issue per second at the default layout (n = 10).
const PER_SECOND_N10: u64 = 1 << 22;

/// A generator whose counter space covers any run: 2^31 IDs per second and unbounded borrowing,
/// so the benchmark sees the hot path and never waits for the clock.
fn hot_generator() -> IdGenerator {
    IdGenerator::new(Layout::new(1, 0).expect("layout"), 0)
        .expect("generator")
        .with_max_borrow_seconds(u32::MAX)
}

fn ulid_next(generator: &mut ulid::Generator) -> ulid::Ulid {
    match generator.generate() {
        Ok(id) => id,
        Err(overflow) => overflow.commit_overflow_increment(),
    }
}

/// Runs `op` `iters` times on each of `threads` threads, each on the state `setup` gives it, and
/// returns the wall time from the first thread starting its loop to the last one finishing, with
/// the threads' states. Thread start-up, `setup` and dropping the states are not timed.
fn timed_threads<T: Send>(
    threads: usize,
    iters: u64,
    setup: impl Fn(usize) -> T + Sync,
    op: impl Fn(&mut T) + Sync,
) -> (Duration, Vec<T>) {
    let barrier = Barrier::new(threads);
    let runs: Vec<(Instant, Instant, T)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let (barrier, setup, op) = (&barrier, &setup, &op);
                scope.spawn(move || {
                    let mut state = setup(index);
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        op(&mut state);
                    }
                    (start, Instant::now(), state)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("benchmark thread panicked"))
            .collect()
    });
    let start = runs.iter().map(|run| run.0).min().expect("threads");
    let end = runs.iter().map(|run| run.1).max().expect("threads");
    (end - start, runs.into_iter().map(|run| run.2).collect())
}

/// Benchmarks `op` on `threads` threads, one element per call per thread.
fn bench_threads<T: Send>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    setup: impl Fn(usize) -> T + Sync,
    op: impl Fn(&mut T) + Sync,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| timed_threads(threads, iters, &setup, &op).0)
    });
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
}

fn next_id_single(c: &mut Criterion) {
    let mut group = c.benchmark_group("next_id_1_thread");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));

    let generator = hot_generator();
    group.bench_function("logstamp next_id", |b| {
        b.iter(|| generator.next_id().expect("id"))
    });

    let context = ContextV7::new();
    group.bench_function("uuid new_v7 (own ContextV7)", |b| {
        b.iter(|| Uuid::new_v7(Timestamp::now(&context)))
    });
    group.bench_function("uuid now_v7 (global Mutex context)", |b| {
        b.iter(Uuid::now_v7)
    });

    let mut ulid_generator = ulid::Generator::new();
    group.bench_function("ulid Generator", |b| {
        b.iter(|| ulid_next(&mut ulid_generator))
    });

    let mut snowflake = SnowflakeIdGenerator::new(1, 1);
    group.bench_function("rs-snowflake real_time_generate", |b| {
        b.iter(|| snowflake.real_time_generate())
    });
    let mut snowflake = SnowflakeIdGenerator::new(1, 1);
    group.bench_function("rs-snowflake generate", |b| b.iter(|| snowflake.generate()));

    let snowflaked = snowflaked::sync::Generator::new(1);
    group.bench_function("snowflaked sync::Generator", |b| {
        b.iter(|| snowflaked.generate::<u64>())
    });
    group.finish();
}

fn next_id_threads(c: &mut Criterion) {
    for threads in THREADS {
        let mut group = c.benchmark_group(format!("next_id_{threads}_threads"));
        configure(&mut group);
        // One iteration is one call on every thread.
        group.throughput(Throughput::Elements(threads as u64));

        let generator = hot_generator();
        bench_threads(
            &mut group,
            "logstamp next_id (shared)",
            threads,
            |_| &generator,
            |g| {
                black_box(g.next_id().expect("id"));
            },
        );

        let snowflaked = snowflaked::sync::Generator::new(1);
        bench_threads(
            &mut group,
            "snowflaked sync::Generator (shared)",
            threads,
            |_| &snowflaked,
            |g| {
                black_box(g.generate::<u64>());
            },
        );

        bench_threads(
            &mut group,
            "uuid now_v7 (global Mutex context)",
            threads,
            |_| (),
            |_| {
                black_box(Uuid::now_v7());
            },
        );
        bench_threads(
            &mut group,
            "uuid new_v7 (ContextV7 per thread)",
            threads,
            |_| ContextV7::new(),
            |context| {
                black_box(Uuid::new_v7(Timestamp::now(&*context)));
            },
        );

        let ulid_shared = Mutex::new(ulid::Generator::new());
        bench_threads(
            &mut group,
            "ulid Mutex<Generator> (shared)",
            threads,
            |_| &ulid_shared,
            |g| {
                black_box(ulid_next(&mut g.lock().expect("lock")));
            },
        );
        bench_threads(
            &mut group,
            "ulid Generator per thread",
            threads,
            |_| ulid::Generator::new(),
            |g| {
                black_box(ulid_next(g));
            },
        );

        let snowflake_shared = Mutex::new(SnowflakeIdGenerator::new(1, 1));
        bench_threads(
            &mut group,
            "rs-snowflake Mutex real_time_generate (shared)",
            threads,
            |_| &snowflake_shared,
            |g| {
                black_box(g.lock().expect("lock").real_time_generate());
            },
        );
        bench_threads(
            &mut group,
            "rs-snowflake real_time_generate per thread",
            threads,
            |index| SnowflakeIdGenerator::new(1, index as i32),
            |g| {
                black_box(g.real_time_generate());
            },
        );
        group.finish();
    }
}

fn blocks(c: &mut Criterion) {
    let mut hot = Vec::new();

    let mut group = c.benchmark_group("next_block_1_thread");
    configure(&mut group);
    group.throughput(Throughput::Elements(BLOCK.into()));
    let generator = hot_generator();
    group.bench_function("logstamp next_block(1000)", |b| {
        b.iter(|| generator.next_block(BLOCK).expect("block"))
    });
    let walked = hot_generator();
    group.bench_function("logstamp next_block(1000), every ID read", |b| {
        b.iter(|| {
            for id in walked.next_block(BLOCK).expect("block") {
                black_box(id);
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    let mut bucket = SnowflakeIdBucket::new(1, 1);
    group.bench_function("rs-snowflake SnowflakeIdBucket::get_id", |b| {
        b.iter(|| bucket.get_id())
    });
    group.finish();
    hot.push(("next_block, 1 thread", generator.stats()));
    hot.push(("next_block walked, 1 thread", walked.stats()));

    for threads in THREADS {
        let mut group = c.benchmark_group(format!("next_block_{threads}_threads"));
        configure(&mut group);
        // One iteration is one block (or one bucket ID) on every thread.
        group.throughput(Throughput::Elements(u64::from(BLOCK) * threads as u64));
        let generator = hot_generator();
        bench_threads(
            &mut group,
            "logstamp next_block(1000) (shared)",
            threads,
            |_| &generator,
            |g| {
                black_box(g.next_block(BLOCK).expect("block"));
            },
        );
        group.throughput(Throughput::Elements(threads as u64));
        let bucket_shared = Mutex::new(SnowflakeIdBucket::new(1, 1));
        bench_threads(
            &mut group,
            "rs-snowflake Mutex<SnowflakeIdBucket> (shared)",
            threads,
            |_| &bucket_shared,
            |bucket| {
                black_box(bucket.lock().expect("lock").get_id());
            },
        );
        bench_threads(
            &mut group,
            "rs-snowflake SnowflakeIdBucket per thread",
            threads,
            |index| SnowflakeIdBucket::new(1, index as i32),
            |bucket| {
                black_box(bucket.get_id());
            },
        );
        group.finish();
        hot.push((
            if threads == 2 {
                "next_block, 2 threads"
            } else {
                "next_block, 4 threads"
            },
            generator.stats(),
        ));
    }

    // Cases filtered out (or run once in test mode) issued too little to borrow: not worth a line.
    for (case, stats) in hot
        .into_iter()
        .filter(|(_, stats)| stats.borrowed_seconds > 0)
    {
        println!(
            "hot layout (n = 1, unbounded borrowing) {case}: borrowed_seconds {}, clock_waits {}",
            stats.borrowed_seconds, stats.clock_waits
        );
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Sustained issuance at the default layout, checking every ID.
struct Sustained {
    threads: usize,
    generator: IdGenerator,
    /// The largest ID issued so far: every later call must issue only larger ones.
    last_id: u64,
    /// When borrowing reached its bound, when the last call finished issuing, and the IDs issued
    /// in between.
    steady_since: Instant,
    last_end: Instant,
    steady_ids: u64,
    verified: u64,
    max_ahead_seconds: i64,
}

impl Sustained {
    /// A default-layout generator driven until borrowing has reached its bound, so that every
    /// measured call runs at the clock's pace. It then issues half a second's worth more, so each
    /// measured call starts mid-second and its threads wait for the clock together.
    fn new(threads: usize) -> Sustained {
        let generator = IdGenerator::new(Layout::default(), 1).expect("generator");
        let (mut last_id, mut verified) = (0, 0);
        let mut issue = || {
            let id = generator.next_id().expect("id");
            assert!(id > last_id, "IDs must increase");
            last_id = id;
            verified += 1;
        };
        while generator.stats().clock_waits == 0 {
            issue();
        }
        for _ in 0..PER_SECOND_N10 / 2 {
            issue();
        }
        let now = Instant::now();
        Sustained {
            threads,
            generator,
            last_id,
            steady_since: now,
            last_end: now,
            steady_ids: 0,
            verified,
            max_ahead_seconds: 0,
        }
    }

    /// Issues `iters * 2^22` IDs (one second's worth each) across the threads, then checks them:
    /// unique, increasing per thread, newer than every earlier call's.
    ///
    /// The time returned runs from the end of the previous call's issuing to the end of this
    /// one's, so it includes the checking in between: issuance is paced by the clock, and a
    /// generator idle while the clock ticks can issue the next second's IDs at once, so timing
    /// only the issuing would overstate the sustained rate.
    fn run(&mut self, iters: u64) -> Duration {
        let per_thread = (iters * PER_SECOND_N10) as usize / self.threads;
        let generator = &self.generator;
        let (_, issued) = timed_threads(
            self.threads,
            1,
            |_| Vec::with_capacity(per_thread),
            |ids: &mut Vec<u64>| {
                for _ in 0..per_thread {
                    ids.push(generator.next_id().expect("id"));
                }
            },
        );
        let end = Instant::now();
        let wall = unix_now();

        let mut all = Vec::with_capacity(per_thread * self.threads);
        for ids in &issued {
            assert!(
                ids.windows(2).all(|pair| pair[0] < pair[1]),
                "IDs of one thread must increase"
            );
            all.extend_from_slice(ids);
        }
        all.sort_unstable();
        assert!(
            all.windows(2).all(|pair| pair[0] < pair[1]),
            "duplicate ID issued"
        );
        if let Some(&first) = all.first() {
            assert!(first > self.last_id, "ID not newer than an earlier call's");
        }
        for &id in [all.first(), all.last()].into_iter().flatten() {
            assert_eq!(self.generator.layout().decode(id).service_id, 1);
        }
        self.last_id = all.last().copied().unwrap_or(self.last_id);
        let newest = self.generator.layout().decode(self.last_id).unix_seconds;
        self.max_ahead_seconds = self.max_ahead_seconds.max(newest as i64 - wall as i64);
        self.verified += all.len() as u64;
        self.steady_ids += all.len() as u64;
        let elapsed = end - self.last_end;
        self.last_end = end;
        elapsed
    }

    fn report(&self) {
        let stats = self.generator.stats();
        let seconds = (self.last_end - self.steady_since).as_secs_f64();
        println!(
            "sustained n = 10, {} thread(s): {} IDs checked, no duplicate; {} IDs in {seconds:.2} s \
             since borrowing reached its bound = {:.0} IDs/s; borrowed_seconds {}, clock_waits {}, \
             clock_back_events {}, most seconds ahead of the wall clock {}",
            self.threads,
            self.verified,
            self.steady_ids,
            self.steady_ids as f64 / seconds,
            stats.borrowed_seconds,
            stats.clock_waits,
            stats.clock_back_events,
            self.max_ahead_seconds,
        );
    }
}

fn sustained(c: &mut Criterion) {
    let mut group = c.benchmark_group("sustained_n10");
    group
        .sampling_mode(SamplingMode::Flat)
        // Each iteration takes about a second: one sample of one iteration each.
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(9))
        .sample_size(10)
        // One iteration is one second's worth of IDs for the service.
        .throughput(Throughput::Elements(PER_SECOND_N10));
    let mut runs = Vec::new();
    for threads in [1, 2, 4] {
        let mut state: Option<Sustained> = None;
        group.bench_function(format!("logstamp next_id, {threads} thread(s)"), |b| {
            let state = state.get_or_insert_with(|| Sustained::new(threads));
            b.iter_custom(|iters| state.run(iters))
        });
        runs.extend(state);
    }
    group.finish();
    for run in &runs {
        run.report();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = next_id_single, next_id_threads, blocks, sustained
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
