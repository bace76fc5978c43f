//! What mapping one message costs, alone: the dispatcher's share of a worker's CPU, measured
//! without Kafka, MySQL or another thread, so a change to the mapping (or to how it is
//! compiled) can be compared in a few seconds (docs/benchmarks.md).
//!
//! `cargo run --release --example mapping_cost -- [MESSAGES] [ROUNDS]` makes MESSAGES (default
//! 200,000) of `bench ingest`'s log messages, maps them ROUNDS times (default 7) through the
//! pipeline of the built-in settings, as the worker does (each message handed over as its own
//! bytes), and prints the nanoseconds per message of each round and the fastest. It then
//! prints the fastest of as many rounds of serde_json only reading the same texts, keeping
//! nothing: what the mapping costs at the least while it accepts and refuses the texts serde_json
//! does. Last, the fastest of as many rounds of serde_json reading MESSAGES doubles (`n / 7 + n`
//! in their shortest digits, as OTLP/JSON writers write doubles), and how many it read as
//! another double: what serde_json's `float_roundtrip` (exact floats) costs, built with and
//! without it. It allocates with jemalloc, as the `logstamp` binary does.

use std::time::Instant;

use anyhow::{Context, bail};
use chrono::DateTime;

use logstamp::config::Settings;
use logstamp::ingest::sample::log_message;
use logstamp::transform::Pipeline;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The first message's time, as `bench ingest` has it.
const FIRST_MILLIS: i64 = 1_714_566_896_000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let messages: usize = args.next().map_or(Ok(200_000), |m| m.parse())?;
    let rounds: usize = args.next().map_or(Ok(7), |r| r.parse())?;
    if messages == 0 || rounds == 0 {
        bail!("usage: mapping_cost [MESSAGES] [ROUNDS], both at least 1");
    }
    let settings = Settings::defaults().context("the built-in settings")?;
    let pipeline =
        Pipeline::from_settings(settings.ingest.format, &settings.normalize, &settings.store);
    let topic = settings.kafka.topics.first().map_or("logs", String::as_str);
    let texts = (0..messages)
        .map(|n| {
            let at = DateTime::from_timestamp_millis(FIRST_MILLIS + n as i64)
                .context("a message time")?;
            Ok(log_message(n as u64, at).into_bytes())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut fastest = f64::MAX;
    for round in 1..=rounds {
        // Copied before the clock starts: the worker maps bytes it owns.
        let owned = texts.clone();
        let mut records = Vec::with_capacity(messages);
        let started = Instant::now();
        for text in owned {
            pipeline
                .map_records(topic, text, |record| records.push(record))
                .map_err(|(e, _)| e)
                .context("mapping a message")?;
        }
        let nanos = started.elapsed().as_nanos() as f64 / messages as f64;
        if let Some(Err(e)) = records.iter().find(|r| r.is_err()) {
            bail!("a record was refused: {}", e.error);
        }
        drop(records);
        println!("round {round}: {nanos:.0} ns a message");
        fastest = fastest.min(nanos);
    }
    println!("fastest: {fastest:.0} ns a message ({messages} messages, {rounds} rounds)");
    let mut reading = f64::MAX;
    for _ in 0..rounds {
        let started = Instant::now();
        for text in &texts {
            let text = std::str::from_utf8(text).context("a message's text")?;
            serde_json::from_str::<serde::de::IgnoredAny>(std::hint::black_box(text))
                .context("reading a message")?;
        }
        reading = reading.min(started.elapsed().as_nanos() as f64 / messages as f64);
    }
    println!("reading alone (serde_json, nothing kept): {reading:.0} ns a message");
    let doubles: Vec<f64> = (0..messages).map(|n| n as f64 / 7.0 + n as f64).collect();
    let text = serde_json::to_string(&doubles).context("writing the doubles")?;
    let (mut per_double, mut misread) = (f64::MAX, 0);
    for _ in 0..rounds {
        let started = Instant::now();
        let read: Vec<f64> =
            serde_json::from_str(std::hint::black_box(&text)).context("reading the doubles")?;
        per_double = per_double.min(started.elapsed().as_nanos() as f64 / messages as f64);
        misread = read
            .iter()
            .zip(&doubles)
            .filter(|(read, written)| read.to_bits() != written.to_bits())
            .count();
    }
    println!(
        "reading doubles (serde_json): {per_double:.1} ns a double, {misread} of {messages} read \
         as another double"
    );
    Ok(())
}
