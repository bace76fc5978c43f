//! The text filter's cost to a writer: `TextFilterPlan::aggregate` over a batch of the demo's
//! lines (the default table's text columns: level, host, service and message, about 110
//! characters). Results: `docs/benchmarks.md`, "Text search".
//!
//! Run with `cargo bench --bench text_filter`.

use std::hint::black_box;

use chrono::{TimeZone, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use logstamp::id::Layout;
use logstamp::ingest::sample::log_message;
use logstamp::mysql::{Ident, SqlValue};
use logstamp::store::text_filter::TextFilterPlan;

/// Rows per batch: the default `batch.max_rows`'s order.
const ROWS: u64 = 1_000;

fn aggregate(c: &mut Criterion) {
    let layout = Layout::default();
    let at = Utc.with_ymd_and_hms(2026, 11, 27, 12, 0, 0).unwrap();
    let columns = ["level", "host", "service", "message"];
    let rows: Vec<(u64, Vec<SqlValue>)> = (0..ROWS)
        .map(|n| {
            let doc: serde_json::Value = serde_json::from_str(&log_message(n, at)).unwrap();
            let values = columns
                .iter()
                .map(|c| SqlValue::Text(doc[c].as_str().unwrap().to_string()))
                .collect();
            let id = layout.encode(at.timestamp() as u64, 1, n as u32).unwrap();
            (id, values)
        })
        .collect();
    let plan = TextFilterPlan {
        table: Ident::new("logs").unwrap(),
        table_index: 0,
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.to_string()))
            .collect(),
    };
    let mut group = c.benchmark_group("text_filter");
    group.throughput(Throughput::Elements(ROWS));
    group.bench_function("aggregate a batch of demo lines", |b| {
        b.iter(|| black_box(plan.aggregate(&layout, rows.iter().map(|(id, v)| (*id, &v[..])))))
    });
    group.finish();
}

criterion_group!(benches, aggregate);
criterion_main!(benches);
