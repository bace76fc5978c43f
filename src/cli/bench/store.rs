//! `logstamp bench store`: rows per second through the store writer, for each insert method,
//! against one `LOAD DATA LOCAL INFILE` of the same rows without the writer (the ceiling).
//!
//! Runs in a scratch database beside `mysql.url`'s, created and dropped by the command.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use serde::Serialize;
use serde_json::json;

use logstamp::config::{Settings, Sources};
use logstamp::id::IdGenerator;
use logstamp::store::settings::DurationOrOff;
use logstamp::store::settings::{InsertMethod, StoreSettings};
use logstamp::store::{Batch, Row, WriteOutcome, Writer};
use logstamp::transform::{MessageFormat, Pipeline};

use super::{in_scratch_database, log_message, median, writer};
use crate::cli::output::Output;
use crate::cli::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Rows inserted by each method in each run.
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    /// Rows per batch [default: batch.max_rows].
    #[arg(long, value_name = "N")]
    batch_rows: Option<usize>,
    /// Batches written at once, each for its own partition [default: store.concurrency].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Methods to measure, comma-separated [default: text,prepared,batch,load_data].
    #[arg(long, value_delimiter = ',', value_name = "METHODS")]
    methods: Vec<String>,
    /// Runs of every method; the summary gives the median.
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

/// The bookkeeping tables as the migrations create them.
/// Server counters shown with each run, to tell what a method sends.
const COUNTERS: &[&str] = &[
    "Com_insert",
    "Com_load",
    "Com_stmt_execute",
    "Com_stmt_prepare",
    "Com_commit",
    "Bytes_received",
];

const CEILING: &str = "load_data_unbatched";
const PARALLEL_CEILING: &str = "load_data_unbatched_parallel";

#[derive(Debug, Serialize)]
struct RunResult {
    method: String,
    run: usize,
    rows: usize,
    seconds: f64,
    rows_per_second: f64,
    server: serde_json::Value,
}

pub fn store(args: StoreArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.rows == 0 || args.runs == 0 {
        return Err(UsageError("--rows and --runs must be at least 1".into()).into());
    }
    let methods = if args.methods.is_empty() {
        vec![
            InsertMethod::Text,
            InsertMethod::Prepared,
            InsertMethod::Batch,
            InsertMethod::LoadData,
        ]
    } else {
        args.methods
            .iter()
            .map(|m| {
                serde_json::from_value(json!(m.trim()))
                    .map_err(|_| UsageError::new("--methods", format!("unknown method {m:?}")))
            })
            .collect::<Result<Vec<InsertMethod>, _>>()?
    };
    let plan = Plan {
        rows: args.rows,
        batch_rows: args.batch_rows.unwrap_or(settings.batch.max_rows).max(1),
        concurrency: args
            .concurrency
            .unwrap_or(settings.store.concurrency)
            .max(1),
        methods,
        runs: args.runs,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(bench_store(settings, plan))?;
    Ok(ExitCode::SUCCESS)
}

struct Plan {
    rows: usize,
    batch_rows: usize,
    concurrency: usize,
    methods: Vec<InsertMethod>,
    runs: usize,
}

async fn bench_store(mut settings: Settings, plan: Plan) -> anyhow::Result<()> {
    settings.store.concurrency = plan.concurrency;
    in_scratch_database(settings, async |settings| bench_in(settings, &plan).await).await
}

async fn bench_in(settings: &Settings, plan: &Plan) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose())
        .await
        .context("connecting to the scratch database")?;

    let started = Instant::now();
    let (partitions, message_bytes) =
        make_batches(settings, plan.rows, plan.batch_rows, plan.concurrency)?;
    let partitions = Arc::new(partitions);
    let mut out = Output::new();
    out.json(&json!({
        "rows": plan.rows,
        "mean_message_bytes": message_bytes / plan.rows,
        "batch_rows": plan.batch_rows,
        "concurrency": plan.concurrency,
        "columns": settings.store.columns.len(),
        "payload": settings.store.payload,
        "prepared_in_seconds": started.elapsed().as_secs_f64(),
    }))?;
    out.flush()?;

    let mut results: Vec<RunResult> = Vec::new();
    for run in 1..=plan.runs {
        for &method in &plan.methods {
            reset(&mut conn, settings).await?;
            let store = StoreSettings {
                insert_method: method,
                // Batches are stamped once, before the runs, and written again in each.
                commit_window: DurationOrOff(None),
                ..settings.store.clone()
            };
            let writer = Writer::new(
                &settings.mysql.url,
                &store,
                &settings.rollup_plans,
                settings.id.layout,
            )?;
            let before = counters(&mut conn).await?;
            let started = Instant::now();
            write_all(&writer, &partitions).await?;
            let seconds = started.elapsed().as_secs_f64();
            let after = counters(&mut conn).await?;
            writer.close().await?;
            check_stored(&mut conn, settings, plan.rows).await?;
            let result = run_result(method.to_string(), run, plan.rows, seconds, &before, &after);
            out.json(&result)?;
            out.flush()?;
            results.push(result);
        }
        // The ceilings: the same rows in one load (the brief's ceiling), and in one load per
        // partition at once (the writer's concurrency, without its batches and transactions).
        for (name, streams) in [(CEILING, 1), (PARALLEL_CEILING, plan.concurrency)] {
            reset(&mut conn, settings).await?;
            let writer = writer(settings)?;
            let loads: Vec<Vec<Row>> = (0..streams)
                .map(|s| {
                    partitions
                        .iter()
                        .enumerate()
                        .filter(|(p, _)| p % streams == s)
                        .flat_map(|(_, batches)| batches.iter().flat_map(|b| b.rows.clone()))
                        .collect()
                })
                .collect();
            let before = counters(&mut conn).await?;
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for rows in loads {
                let writer = writer.clone();
                tasks.spawn(async move { writer.load_unbatched(&rows).await });
            }
            let mut loaded = 0;
            while let Some(done) = tasks.join_next().await {
                loaded += done??;
            }
            let seconds = started.elapsed().as_secs_f64();
            let after = counters(&mut conn).await?;
            writer.close().await?;
            if loaded != plan.rows as u64 {
                bail!("the {name} load stored {loaded} of {} rows", plan.rows);
            }
            check_stored(&mut conn, settings, plan.rows).await?;
            let result = run_result(name.into(), run, plan.rows, seconds, &before, &after);
            out.json(&result)?;
            out.flush()?;
            results.push(result);
        }
    }

    let rates = |method: &str| -> Vec<f64> {
        results
            .iter()
            .filter(|r| r.method == method)
            .map(|r| r.rows_per_second)
            .collect()
    };
    let ceiling = median(rates(CEILING));
    let parallel = median(rates(PARALLEL_CEILING));
    let mut names: Vec<String> = plan.methods.iter().map(|m| m.to_string()).collect();
    names.extend([CEILING.to_string(), PARALLEL_CEILING.to_string()]);
    let percent = |rate: f64, of: f64| (1000.0 * rate / of).round() / 10.0;
    for name in names {
        let rate = median(rates(&name));
        out.json(&json!({
            "summary": name,
            "runs": plan.runs,
            "median_rows_per_second": rate.round(),
            "percent_of_ceiling": percent(rate, ceiling),
            "percent_of_parallel_ceiling": percent(rate, parallel),
        }))?;
    }
    out.finish()?;
    conn.disconnect().await?;
    Ok(())
}

/// `rows` rows as batches of `batch_rows`, one list per partition (`partitions` of them, taking
/// turns), with IDs from the generator and mapped as the writer's caller would. Returns the
/// batches and the message bytes.
pub(super) fn make_batches(
    settings: &Settings,
    total: usize,
    batch_rows: usize,
    partition_count: usize,
) -> anyhow::Result<(Vec<Vec<Batch>>, usize)> {
    // Mapped as a worker maps them (normalize rules, fan-out tables), so any settings' writer
    // takes the batches.
    let pipeline =
        Pipeline::from_settings(MessageFormat::Json, &settings.normalize, &settings.store);
    let topic = settings.kafka.topics.first().map_or("logs", String::as_str);
    // Rows for a scratch database, dropped afterwards: these IDs need no lease.
    let service_id = settings.id.service_id.fixed().unwrap_or(0);
    let generator = IdGenerator::new(settings.id.layout, service_id)?;
    let mut partitions: Vec<Vec<Batch>> = vec![Vec::new(); partition_count];
    let mut offsets = vec![0i64; partition_count];
    let mut bytes = 0;
    let mut made = 0;
    let mut turn = 0;
    while made < total {
        let count = batch_rows.min(total - made);
        let partition = turn % partition_count;
        turn += 1;
        let start = offsets[partition];
        let mut rows = Vec::with_capacity(count);
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            let want = u32::try_from(count - ids.len()).unwrap_or(u32::MAX);
            ids.extend(generator.next_block(want)?.iter());
        }
        for (k, id) in ids.into_iter().enumerate() {
            let message = log_message((made + k) as u64);
            bytes += message.len();
            let mapped = pipeline
                .map(topic, message.as_bytes())
                .map_err(|e| anyhow::anyhow!("the benchmark's own message did not map: {e}"))?;
            rows.push(Row {
                id,
                offset: start + k as i64,
                mapped,
            });
        }
        offsets[partition] = start + count as i64;
        partitions[partition].push(Batch {
            consumer_group: "bench".into(),
            topic: topic.into(),
            partition: i32::try_from(partition)?,
            start_offset: start,
            next_offset: start + count as i64,
            rows,
            dead_letters: Vec::new(),
        });
        made += count;
    }
    Ok((partitions, bytes))
}

/// Every partition's batches in order, the partitions at once.
pub(super) async fn write_all(
    writer: &Writer,
    partitions: &Arc<Vec<Vec<Batch>>>,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for partition in 0..partitions.len() {
        let writer = writer.clone();
        let partitions = partitions.clone();
        tasks.spawn(async move {
            for batch in &partitions[partition] {
                match writer.write(batch).await? {
                    WriteOutcome::Committed(_) => {}
                    moved => bail!("batch from {} not committed: {moved:?}", batch.start_offset),
                }
            }
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

async fn reset(conn: &mut mysql_async::Conn, settings: &Settings) -> anyhow::Result<()> {
    conn.query_drop(format!("TRUNCATE TABLE {}", settings.store.table))
        .await?;
    conn.query_drop("TRUNCATE TABLE ingest_offsets").await?;
    conn.query_drop("TRUNCATE TABLE dead_letters").await?;
    Ok(())
}

async fn check_stored(
    conn: &mut mysql_async::Conn,
    settings: &Settings,
    rows: usize,
) -> anyhow::Result<()> {
    let stored: Option<u64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {}", settings.store.table))
        .await?;
    if stored != Some(rows as u64) {
        bail!("stored {stored:?} rows of {rows}");
    }
    Ok(())
}

async fn counters(conn: &mut mysql_async::Conn) -> anyhow::Result<Vec<(String, u64)>> {
    let all: Vec<(String, String)> = conn.query("SHOW GLOBAL STATUS").await?;
    Ok(COUNTERS
        .iter()
        .map(|name| {
            let value = all
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            (name.to_string(), value)
        })
        .collect())
}

fn run_result(
    method: String,
    run: usize,
    rows: usize,
    seconds: f64,
    before: &[(String, u64)],
    after: &[(String, u64)],
) -> RunResult {
    let server = before
        .iter()
        .zip(after)
        .map(|((name, b), (_, a))| (name.clone(), json!(a.saturating_sub(*b))))
        .collect::<serde_json::Map<_, _>>();
    RunResult {
        method,
        run,
        rows,
        seconds: (seconds * 1000.0).round() / 1000.0,
        rows_per_second: (rows as f64 / seconds).round(),
        server: server.into(),
    }
}
