//! `logstamp bench ingest`: produce N log messages of about 300 bytes, ingest them with W
//! `logstamp ingest` processes of one consumer group, and compare the rate with one `LOAD DATA
//! LOCAL INFILE` stream of the same rows (the ceiling), measured in the same run. Reports the
//! time of each stage and each worker's peak memory (VmHWM).
//!
//! The workers are separate processes so their memory is their own: the in-process Kafka
//! cluster that holds the backlog lives in this process.

use std::io::Read;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use serde_json::json;

use logstamp::config::{Settings, Sources, env_var};
use logstamp::id::IdGenerator;
use logstamp::ingest::kafka::{Outgoing, produce_all};
use logstamp::ingest::local_cluster::LocalCluster;
use logstamp::store::Row;
use logstamp::transform::Mapper;

use super::{in_scratch_database, log_message, writer};
use crate::cli::output::Output;
use crate::cli::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Messages produced before the workers start (the backlog).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Worker processes, in one consumer group.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Partitions of the topic [default: enough for the in-process cluster to hold the whole
    /// backlog, which keeps 5 MB per partition; at least 6].
    #[arg(long, value_name = "N")]
    partitions: Option<i32>,
}

/// Rows the ceiling loads per `LOAD DATA` statement, to bound this process's memory.
const CEILING_CHUNK: u64 = 500_000;

pub fn ingest(args: IngestArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.messages == 0 || args.workers == 0 {
        return Err(UsageError("--messages and --workers must be at least 1".into()).into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(in_scratch_database(settings, async |settings| {
        bench(settings, &args, &sources).await
    }))?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(settings: &Settings, args: &IngestArgs, sources: &Sources) -> anyhow::Result<()> {
    let mut out = Output::new();
    let message_bytes = log_message(0).len() as u64;
    let partitions = args
        .partitions
        .unwrap_or_else(|| LocalCluster::partitions_to_hold(args.messages, message_bytes));
    let cluster = LocalCluster::start(1)?;
    // The settings' own topic, so per-topic normalize rules apply as in production; the
    // cluster, the group and the database are fresh for every run.
    let topic = settings
        .kafka
        .topics
        .first()
        .cloned()
        .unwrap_or_else(|| "logs".to_string());
    cluster.create_topic(&topic, partitions)?;
    let brokers = cluster.bootstrap_servers();

    let started = Instant::now();
    let (messages, brokers_, topic_) = (args.messages, brokers.clone(), topic.clone());
    tokio::task::spawn_blocking(move || {
        let all = (0..messages).map(|n| Outgoing {
            partition: Some((n % partitions as u64) as i32),
            key: None,
            payload: Some(log_message(n).into_bytes()),
        });
        produce_all(&brokers_, &topic_, all)
    })
    .await??;
    let produce_seconds = started.elapsed().as_secs_f64();
    out.json(&json!({
        "stage": "produce",
        "messages": args.messages,
        "message_bytes": message_bytes,
        "partitions": partitions,
        "seconds": round3(produce_seconds),
    }))?;
    out.flush()?;

    let started = Instant::now();
    let mut workers = (0..args.workers)
        .map(|_| spawn_worker(settings, sources, &brokers, &topic, &[]))
        .collect::<anyhow::Result<Vec<Child>>>()?;
    let ingested = watch(settings, args.messages, &mut workers, started).await;
    let peaks: Vec<Option<u64>> = workers.iter().map(|w| peak_rss_kib(w.id())).collect();
    let summaries = stop_workers(workers)?;
    let (first_row, all_rows) = ingested?;
    let steady_seconds = all_rows - first_row;
    let ingest_rate = args.messages as f64 / steady_seconds;
    out.json(&json!({
        "stage": "ingest",
        "workers": args.workers,
        "first_row_after_seconds": round3(first_row),
        "all_rows_after_seconds": round3(all_rows),
        "rows_per_second": ingest_rate.round(),
        "rows_per_second_from_start": (args.messages as f64 / all_rows).round(),
        "peak_rss_mib": peaks.iter().map(|p| p.map(|kib| kib / 1024)).collect::<Vec<_>>(),
        "workers_totals": summaries,
    }))?;
    out.flush()?;
    check_stored(settings, args.messages).await?;

    let ceiling_rate = ceiling(settings, args.messages).await?;
    out.json(&json!({
        "stage": "ceiling",
        "method": "one LOAD DATA LOCAL INFILE stream, no batches or offsets",
        "rows_per_second": ceiling_rate.round(),
    }))?;
    let max_peak = peaks.iter().flatten().max().map(|kib| kib / 1024);
    out.json(&json!({
        "summary": "ingest",
        "messages": args.messages,
        "workers": args.workers,
        "rows_per_second": ingest_rate.round(),
        "ceiling_rows_per_second": ceiling_rate.round(),
        "percent_of_ceiling": (1000.0 * ingest_rate / ceiling_rate).round() / 10.0,
        "max_peak_rss_mib": max_peak,
    }))?;
    out.finish()?;
    Ok(())
}

/// A `logstamp ingest` of this binary, with the bench's settings file and the scratch database,
/// the cluster and the topic (also its consumer group), and settings `(key, value)` over those;
/// it leases a service ID of its own.
pub(super) fn spawn_worker(
    settings: &Settings,
    sources: &Sources,
    brokers: &str,
    topic: &str,
    overrides: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let program = std::env::current_exe().context("finding this program")?;
    let mut command = Command::new(program);
    if let Some(file) = &sources.file {
        command.arg("--config").arg(file);
    }
    command
        .args(["ingest", "--service-id", "auto"])
        .env(env_var("mysql.url"), settings.mysql.url.expose())
        .env(env_var("kafka.brokers"), brokers)
        .env(env_var("kafka.topics"), topic)
        .env(env_var("kafka.group_id"), topic)
        // The in-process cluster completes a rebalance when a session times out: keep it short.
        .env(env_var("kafka.properties.session.timeout.ms"), "3000")
        .env(env_var("kafka.properties.heartbeat.interval.ms"), "300")
        .env(env_var("telemetry.log_level"), "warn")
        // Several workers on one host: each serves its metrics on a port of its own.
        .env(env_var("telemetry.listen"), "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .envs(overrides.iter().map(|(key, value)| (env_var(key), value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command.spawn().context("starting a worker")
}

/// Polls the committed offsets until every message is in; returns when the first and the last
/// rows were committed, in seconds after `started`. Shows progress on stderr.
pub(super) async fn watch(
    settings: &Settings,
    messages: u64,
    workers: &mut [Child],
    started: Instant,
) -> anyhow::Result<(f64, f64)> {
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose()).await?;
    let mut first = None;
    let mut shown = Instant::now();
    loop {
        let done: Option<u64> = conn
            .query_first(
                "SELECT CAST(COALESCE(SUM(next_offset), 0) AS UNSIGNED) FROM ingest_offsets",
            )
            .await?;
        let done = done.unwrap_or(0);
        let at = started.elapsed().as_secs_f64();
        if done > 0 && first.is_none() {
            first = Some(at);
        }
        if done >= messages {
            conn.disconnect().await?;
            return Ok((first.unwrap_or(at), at));
        }
        for worker in workers.iter_mut() {
            if let Some(status) = worker.try_wait()? {
                bail!("a worker exited early ({status}) with {done} of {messages} messages in");
            }
        }
        if shown.elapsed() >= Duration::from_secs(5) {
            eprintln!("ingested {done} of {messages} ({at:.0} s)");
            shown = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM to every worker, then each one's final totals line.
pub(super) fn stop_workers(workers: Vec<Child>) -> anyhow::Result<Vec<serde_json::Value>> {
    for worker in &workers {
        let pid = libc::pid_t::try_from(worker.id()).context("worker pid")?;
        // SAFETY: kill(2) with a pid of our own child and a valid signal number.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let mut totals = Vec::new();
    for mut worker in workers {
        let mut stdout = String::new();
        if let Some(mut pipe) = worker.stdout.take() {
            pipe.read_to_string(&mut stdout)?;
        }
        let status = worker.wait()?;
        if !status.success() {
            bail!("a worker failed to stop cleanly: {status}");
        }
        let last = stdout.lines().last().unwrap_or("null");
        totals.push(serde_json::from_str(last).unwrap_or(serde_json::Value::Null));
    }
    Ok(totals)
}

/// A process's peak resident memory so far, from Linux's `/proc/PID/status`.
pub(super) fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub(super) async fn check_stored(settings: &Settings, messages: u64) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose()).await?;
    let (rows, ids): (u64, u64) = conn
        .query_first(format!(
            "SELECT COUNT(*), COUNT(DISTINCT id) FROM {}",
            settings.store.table
        ))
        .await?
        .unwrap_or((0, 0));
    conn.disconnect().await?;
    if (rows, ids) != (messages, messages) {
        bail!("stored {rows} rows with {ids} distinct IDs for {messages} messages");
    }
    Ok(())
}

/// The same rows (mapped and stamped as the workers do) loaded with `LOAD DATA` in chunks on
/// one connection, after emptying the table: rows per second.
async fn ceiling(settings: &Settings, messages: u64) -> anyhow::Result<f64> {
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose()).await?;
    conn.query_drop(format!("TRUNCATE TABLE {}", settings.store.table))
        .await?;
    conn.disconnect().await?;
    let mapper = Mapper::new(&settings.store.columns);
    // Rows for a scratch table, dropped afterwards: these IDs need no lease.
    let generator = IdGenerator::new(settings.id.layout, 0)?;
    let writer = writer(settings)?;
    let mut seconds = 0.0;
    let mut made = 0;
    while made < messages {
        let count = CEILING_CHUNK.min(messages - made);
        let mut rows = Vec::with_capacity(count as usize);
        for n in made..made + count {
            let mapped = mapper
                .map(log_message(n).as_bytes())
                .map_err(|e| anyhow::anyhow!("the benchmark's own message did not map: {e}"))?;
            rows.push(Row {
                id: generator.next_id()?,
                offset: n as i64,
                mapped,
            });
        }
        let started = Instant::now();
        writer.load_unbatched(&rows).await?;
        seconds += started.elapsed().as_secs_f64();
        made += count;
    }
    writer.close().await?;
    Ok(messages as f64 / seconds)
}

pub(super) fn round3(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}
