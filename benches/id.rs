//! Generator throughput: one ID at a time and in blocks, single-threaded.
//!
//! Kept minimal so `cargo clippy --all-targets` builds; the comparison with other ID crates
//! that the README mentions is not written yet.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use logstamp::id::{IdGenerator, Layout};

fn generator(c: &mut Criterion) {
    let mut group = c.benchmark_group("logstamp");
    group.throughput(Throughput::Elements(1));
    let ids = IdGenerator::new(Layout::default(), 1).expect("service 1 fits the default layout");
    group.bench_function("next_id", |b| b.iter(|| black_box(ids.next_id())));
    group.throughput(Throughput::Elements(64));
    group.bench_function("next_block_64", |b| {
        b.iter(|| black_box(ids.next_block(64)))
    });
    group.finish();
}

criterion_group!(benches, generator);
criterion_main!(benches);
