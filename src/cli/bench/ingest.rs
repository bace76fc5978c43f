//! `logstamp bench ingest`: produce N log messages of about 300 bytes, ingest them with W
//! `logstamp ingest` processes of one consumer group, and compare the rate with the same rows
//! loaded by one `LOAD DATA LOCAL INFILE` stream, read by a Kafka consumer alone (the Kafka
//! client's part of the work) and written by the store writer alone (the writer's part), each
//! measured in the same run. Reports the time of each stage, the CPU the workers and the
//! database server spent per row, and each worker's peak memory (VmHWM).
//!
//! The workers are separate processes so their memory and CPU are their own. The backlog is in
//! an in-process Kafka cluster in this process, or with `--brokers` in an existing Kafka (a
//! broker process of its own, so its CPU is not counted in the workers').

use std::io::Read;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

use logstamp::config::{Settings, Sources, env_var};
use logstamp::id::IdGenerator;
use logstamp::ingest::kafka::{Outgoing, consumer_config, produce_all};
use logstamp::ingest::local_cluster::LocalCluster;
use logstamp::mysql::MysqlUrl;
use logstamp::store::Row;
use logstamp::transform::Mapper;

use super::store::{make_batches, write_all};
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
    /// Partitions of the topic [default: with --brokers, 8; else enough for the in-process
    /// cluster to hold the whole backlog, which keeps 5 MB per partition; at least 6].
    #[arg(long, value_name = "N")]
    partitions: Option<i32>,
    /// An existing Kafka to hold the backlog (bootstrap servers, host:port,...) instead of the
    /// in-process cluster: the command creates a topic of its own there, fills it before the
    /// workers start, and deletes it at the end.
    #[arg(long, value_name = "HOST:PORT")]
    brokers: Option<String>,
}

/// Rows the ceiling loads per `LOAD DATA` statement, to bound this process's memory.
const CEILING_CHUNK: u64 = 500_000;

/// Partitions of the topic made on an existing Kafka, unless `--partitions` says otherwise.
const EXTERNAL_PARTITIONS: i32 = 8;

pub fn ingest(args: IngestArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.messages == 0 || args.workers == 0 {
        return Err(UsageError("--messages and --workers must be at least 1".into()).into());
    }
    if args.partitions.is_some_and(|p| p < 1) {
        return Err(UsageError::new("--partitions", "must be at least 1").into());
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

/// Where the backlog is: the in-process cluster (kept alive here) or an existing Kafka.
enum Backlog {
    Local(LocalCluster),
    External { brokers: String },
}

impl Backlog {
    fn brokers(&self) -> String {
        match self {
            Backlog::Local(cluster) => cluster.bootstrap_servers(),
            Backlog::External { brokers } => brokers.clone(),
        }
    }
}

async fn bench(settings: &Settings, args: &IngestArgs, sources: &Sources) -> anyhow::Result<()> {
    let mut out = Output::new();
    let message_bytes = log_message(0).len() as u64;
    let (backlog, topic, partitions) = match &args.brokers {
        None => {
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
            (Backlog::Local(cluster), topic, partitions)
        }
        Some(brokers) => {
            let partitions = args.partitions.unwrap_or(EXTERNAL_PARTITIONS);
            // A topic of this run's own, so a run never reads an earlier one's backlog.
            let topic = format!("logstamp-bench-{}", std::process::id());
            create_topic(brokers, &topic, partitions).await?;
            let backlog = Backlog::External {
                brokers: brokers.clone(),
            };
            (backlog, topic, partitions)
        }
    };
    let result = measure(
        settings, args, sources, &backlog, &topic, partitions, &mut out,
    )
    .await;
    if let Backlog::External { brokers } = &backlog
        && let Err(e) = delete_topic(brokers, &topic).await
    {
        eprintln!("deleting the topic {topic}: {e:#}");
    }
    result?;
    out.finish()?;
    Ok(())
}

async fn measure(
    settings: &Settings,
    args: &IngestArgs,
    sources: &Sources,
    backlog: &Backlog,
    topic: &str,
    partitions: i32,
    out: &mut Output,
) -> anyhow::Result<()> {
    let brokers = backlog.brokers();
    let message_bytes = log_message(0).len() as u64;
    let started = Instant::now();
    tokio::task::spawn_blocking({
        let (messages, brokers, topic) = (args.messages, brokers.clone(), topic.to_string());
        move || {
            let all = (0..messages).map(|n| Outgoing {
                partition: Some((n % partitions as u64) as i32),
                key: None,
                payload: Some(log_message(n).into_bytes()),
            });
            produce_all(&brokers, &topic, all)
        }
    })
    .await??;
    let produce_seconds = started.elapsed().as_secs_f64();
    out.json(&json!({
        "stage": "produce",
        "brokers": if args.brokers.is_some() { "existing" } else { "in-process" },
        "messages": args.messages,
        "message_bytes": message_bytes,
        "partitions": partitions,
        "seconds": round3(produce_seconds),
    }))?;
    out.flush()?;

    let database = DatabaseProcess::find(settings).await;
    let rows = args.messages as f64;
    let per_row = |seconds: Option<f64>| seconds.map(|s| round3(s * 1e6 / rows));

    let database_before = database.cpu_seconds();
    let started = Instant::now();
    let mut workers = (0..args.workers)
        .map(|_| spawn_worker(settings, sources, &brokers, topic, &[]))
        .collect::<anyhow::Result<Vec<Child>>>()?;
    let ingested = watch(settings, args.messages, &mut workers, started).await;
    // Read before the workers stop: a process's /proc entry goes with it.
    let worker_cpu: Option<f64> = workers.iter().map(|w| cpu_seconds(w.id())).sum();
    let database_cpu = database.cpu_since(database_before);
    let peaks: Vec<Option<u64>> = workers.iter().map(|w| peak_rss_kib(w.id())).collect();
    let summaries = stop_workers(workers)?;
    let (first_row, all_rows) = ingested?;
    let steady_seconds = all_rows - first_row;
    let ingest_rate = rows / steady_seconds;
    let max_peak = peaks.iter().flatten().max().map(|kib| kib / 1024);
    out.json(&json!({
        "stage": "ingest",
        "workers": args.workers,
        "first_row_after_seconds": round3(first_row),
        "all_rows_after_seconds": round3(all_rows),
        "rows_per_second": ingest_rate.round(),
        "rows_per_second_from_start": (rows / all_rows).round(),
        "worker_cpu_seconds": worker_cpu.map(round3),
        "worker_cpu_us_per_row": per_row(worker_cpu),
        "database_cpu_us_per_row": per_row(database_cpu),
        "peak_rss_mib": peaks.iter().map(|p| p.map(|kib| kib / 1024)).collect::<Vec<_>>(),
        "workers_totals": summaries,
    }))?;
    out.flush()?;
    check_stored(settings, args.messages).await?;

    let database_before = database.cpu_seconds();
    let ceiling_rate = ceiling(settings, args.messages).await?;
    let ceiling_database_cpu = database.cpu_since(database_before);
    out.json(&json!({
        "stage": "ceiling",
        "method": "one LOAD DATA LOCAL INFILE stream, no batches or offsets",
        "rows_per_second": ceiling_rate.round(),
        "database_cpu_us_per_row": per_row(ceiling_database_cpu),
    }))?;
    out.flush()?;

    let consumer = tokio::task::spawn_blocking({
        let (settings, brokers, topic) = (settings.clone(), brokers.clone(), topic.to_string());
        let messages = args.messages;
        move || consumer_alone(&settings, &brokers, &topic, partitions, messages)
    })
    .await??;
    out.json(&json!({
        "stage": "consumer",
        "method": "a Kafka consumer alone, with the workers' consumer settings: every message read from the topic's start and its payload copied, as the worker's consumer thread does",
        "rows_per_second": consumer.rate.round(),
        "consumer_cpu_us_per_row": per_row(consumer.own_cpu),
        // The in-process cluster runs in this process: its CPU is in the figure then.
        "broker_cpu_included": args.brokers.is_none(),
    }))?;
    out.flush()?;

    let alone = writer_alone(settings, args.messages, &database).await?;
    out.json(&json!({
        "stage": "writer",
        "method": "the store writer alone (as bench store): the same rows mapped beforehand, in batches of batch.max_rows, store.concurrency at once",
        "insert_method": settings.store.insert_method.to_string(),
        "rows_per_second": alone.rate.round(),
        "writer_cpu_us_per_row": per_row(alone.own_cpu),
        "database_cpu_us_per_row": per_row(alone.database_cpu),
    }))?;

    let ratio = |a: f64, b: f64| (1000.0 * a / b).round() / 1000.0;
    out.json(&json!({
        "summary": "ingest",
        "messages": args.messages,
        "workers": args.workers,
        "partitions": partitions,
        "rows_per_second": ingest_rate.round(),
        "ceiling_rows_per_second": ceiling_rate.round(),
        "writer_rows_per_second": alone.rate.round(),
        "ingest_over_load_data": ratio(ingest_rate, ceiling_rate),
        "ingest_over_writer": ratio(ingest_rate, alone.rate),
        "worker_cpu_seconds_per_million_rows": per_row(worker_cpu),
        "worker_cpu_us_per_row": per_row(worker_cpu),
        "consumer_alone_cpu_us_per_row": per_row(consumer.own_cpu),
        "writer_alone_cpu_us_per_row": per_row(alone.own_cpu),
        "database_cpu_us_per_row": per_row(database_cpu),
        "database_process": database.found_by,
        "max_peak_rss_mib": max_peak,
    }))?;
    Ok(())
}

/// Creates `topic` with `partitions` on an existing Kafka.
pub(super) async fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    let admin = admin(brokers)?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin
        .create_topics([&new], &options)
        .await
        .with_context(|| format!("creating topic {topic} on {brokers}"))?
    {
        if let Err((_, code)) = result {
            bail!("creating topic {topic} on {brokers}: {code}");
        }
    }
    Ok(())
}

pub(super) async fn delete_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin = admin(brokers)?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin.delete_topics(&[topic], &options).await? {
        if let Err((_, code)) = result {
            bail!("{code}");
        }
    }
    Ok(())
}

fn admin(brokers: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .context("creating a Kafka admin client")
}

/// The database server's process, when it runs on this host: its CPU time is read from
/// `/proc` like the workers'.
pub(super) struct DatabaseProcess {
    pid: Option<u32>,
    /// How it was found: `pid_file` (the server's `@@pid_file`, read here) or `process_name`
    /// (the only process named mariadbd or mysqld); `None` if neither worked.
    found_by: Option<&'static str>,
}

impl DatabaseProcess {
    pub(super) async fn find(settings: &Settings) -> DatabaseProcess {
        if let Some(pid) = pid_from_file(&settings.mysql.url).await {
            return DatabaseProcess {
                pid: Some(pid),
                found_by: Some("pid_file"),
            };
        }
        match pid_by_name(&["mariadbd", "mysqld"]) {
            Some(pid) => DatabaseProcess {
                pid: Some(pid),
                found_by: Some("process_name"),
            },
            None => DatabaseProcess {
                pid: None,
                found_by: None,
            },
        }
    }

    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid?)
    }

    /// CPU seconds since a reading of [`Self::cpu_seconds`].
    pub(super) fn cpu_since(&self, before: Option<f64>) -> Option<f64> {
        Some(self.cpu_seconds()? - before?)
    }
}

/// The pid in the server's `@@pid_file` (relative to `@@datadir` unless absolute), if that file
/// is readable here and names a live process.
pub(super) async fn pid_from_file(url: &MysqlUrl) -> Option<u32> {
    let mut conn = mysql_async::Conn::from_url(url.expose()).await.ok()?;
    let files: Option<(String, String)> = conn
        .query_first("SELECT @@pid_file, @@datadir")
        .await
        .ok()?;
    let _ = conn.disconnect().await;
    let (file, datadir) = files?;
    let path = std::path::Path::new(&datadir).join(file);
    let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    std::path::Path::new(&format!("/proc/{pid}"))
        .exists()
        .then_some(pid)
}

/// The one process whose name is one of `names`; `None` if there are none or several.
fn pid_by_name(names: &[&str]) -> Option<u32> {
    let mut found = std::fs::read_dir("/proc").ok()?.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        names.contains(&comm.trim()).then_some(pid)
    });
    let pid = found.next()?;
    found.next().is_none().then_some(pid)
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

/// This process's CPU time since `before` (an earlier [`cpu_seconds`] of it), if both are known.
pub(super) fn own_cpu_since(before: Option<f64>) -> Option<f64> {
    Some(cpu_seconds(std::process::id())? - before?)
}

/// A process's user and system CPU time so far, from Linux's `/proc/PID/stat`.
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
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

/// What a consumer alone did with the backlog.
struct ConsumerAlone {
    /// Messages per second from the first message on.
    rate: f64,
    /// This process's CPU from creating the consumer to the last message, librdkafka's threads
    /// included.
    own_cpu: Option<f64>,
}

/// How long the consumer alone may go without a message before the stage fails.
const CONSUMER_STALL: Duration = Duration::from_secs(30);

/// Every message of `topic` read from its start by a consumer with the workers' settings, its
/// payload copied as the worker's consumer thread copies it and then dropped: the CPU the Kafka
/// client costs per message, which no change to the pipeline after it can remove. Partitions are
/// assigned, not subscribed, so no group is joined and no offset is committed.
fn consumer_alone(
    settings: &Settings,
    brokers: &str,
    topic: &str,
    partitions: i32,
    messages: u64,
) -> anyhow::Result<ConsumerAlone> {
    let mut kafka = settings.kafka.clone();
    kafka.brokers = brokers.to_string();
    kafka.group_id = format!("{topic}-consumer-alone");
    let own_before = cpu_seconds(std::process::id());
    let consumer: BaseConsumer = consumer_config(&kafka)
        .create()
        .context("creating the consumer alone")?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut read = 0u64;
    let mut first_message = None;
    let mut last_message = Instant::now();
    while read < messages {
        match consumer.poll(Duration::from_millis(100)) {
            Some(message) => {
                let copy = message
                    .context("the consumer alone")?
                    .payload()
                    .map(<[u8]>::to_vec);
                // Kept from being optimised away, as the worker keeps its copy.
                std::hint::black_box(copy);
                read += 1;
                last_message = Instant::now();
                first_message.get_or_insert(last_message);
            }
            None if last_message.elapsed() > CONSUMER_STALL => bail!(
                "the consumer alone read {read} of {messages} messages, then nothing for {}s",
                CONSUMER_STALL.as_secs()
            ),
            None => {}
        }
    }
    let own_cpu = own_cpu_since(own_before);
    // From the first message, as the workers' rate is: joining and the first fetch are apart.
    let seconds = first_message.map_or(0.0, |first| first.elapsed().as_secs_f64());
    Ok(ConsumerAlone {
        rate: messages as f64 / seconds,
        own_cpu,
    })
}

/// What the writer alone did with the rows.
struct WriterAlone {
    rate: f64,
    /// This process's CPU while it wrote (the writer's: the rows were mapped beforehand).
    own_cpu: Option<f64>,
    database_cpu: Option<f64>,
}

/// The same rows, mapped and stamped beforehand, written by the store writer as `bench store`
/// does (`batch.max_rows` rows a batch, `store.concurrency` partitions at once, the settings'
/// insert method), after emptying the tables the ceiling filled.
async fn writer_alone(
    settings: &Settings,
    messages: u64,
    database: &DatabaseProcess,
) -> anyhow::Result<WriterAlone> {
    let rows = usize::try_from(messages)?;
    let concurrency = settings.store.concurrency.max(1);
    let (partitions, _) =
        make_batches(settings, rows, settings.batch.max_rows.max(1), concurrency)?;
    let partitions = std::sync::Arc::new(partitions);
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose()).await?;
    for table in [
        settings.store.table.as_str(),
        "ingest_offsets",
        "dead_letters",
    ] {
        conn.query_drop(format!("TRUNCATE TABLE {table}")).await?;
    }
    conn.disconnect().await?;
    let writer = writer(settings)?;
    let (own_before, database_before) = (cpu_seconds(std::process::id()), database.cpu_seconds());
    let started = Instant::now();
    write_all(&writer, &partitions).await?;
    let seconds = started.elapsed().as_secs_f64();
    let own_cpu = own_cpu_since(own_before);
    let database_cpu = database.cpu_since(database_before);
    writer.close().await?;
    check_stored(settings, messages).await?;
    Ok(WriterAlone {
        rate: messages as f64 / seconds,
        own_cpu,
        database_cpu,
    })
}

pub(super) fn round3(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}
