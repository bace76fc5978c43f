//! `logstamp demo`: the whole pipeline on one machine with nothing but MySQL. An in-process
//! Kafka cluster, a producer of realistic log lines, several ingest workers of one consumer
//! group (each under its own leased service ID) and a summary checked with SQL.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use chrono::Utc;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use logstamp::config::{Settings, Sources};
use logstamp::ingest::kafka::{Outgoing, produce_all};
use logstamp::ingest::local_cluster::LocalCluster;
use logstamp::ingest::sample::{log_message, spread};
use logstamp::ingest::settings::WorkerSettings;
use logstamp::ingest::{self, IngestStats};
use logstamp::mysql;
use logstamp::mysql::MysqlUrl;
use logstamp::mysql::bound::Bound;
use logstamp::store::lease::HeldLease;
use logstamp::store::log_table::TableSpec;
use logstamp::store::query::{self, EventQuery, TimeQuery};
use logstamp::store::{migrate, partitions};
use logstamp::time::format_utc;

use super::db::{step, with_database};
use super::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Log records to produce and ingest.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Ingest workers, in one consumer group, each with its own service ID.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Database on mysql.url's server to run in; emptied first, kept afterwards to explore.
    #[arg(long, value_name = "NAME", default_value = "logstamp_demo")]
    database: String,
}

const TOPIC: &str = "logs";
/// The log lines' own times cover this many days before now (their IDs carry ingest time).
const DAYS: i64 = 3;
/// The demo gives up when no record was stored for this long after the last was produced.
const STALL: Duration = Duration::from_secs(120);
/// Workers the demo starts at most; more would only wait for partitions.
const MAX_WORKERS: usize = 64;

pub fn run(args: DemoArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    if args.records == 0 || !(1..=MAX_WORKERS).contains(&args.workers) {
        return Err(UsageError(format!(
            "--records must be at least 1 and --workers from 1 to {MAX_WORKERS}"
        ))
        .into());
    }
    // Workers' routine logs would tear the progress bar; warnings and errors still show.
    let sources = sources.set("telemetry.log_level", "warn");
    let url = with_database(&load_settings(&sources)?.mysql.url, &args.database)
        .map_err(|e| UsageError::new("--database", e))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(demo(sources, url, &args))?;
    Ok(ExitCode::SUCCESS)
}

/// The settings of the demo's workers: the user's, on the demo's database and in-process
/// cluster, each worker leasing a free service ID.
fn demo_settings(sources: Sources, url: &MysqlUrl, brokers: &str) -> anyhow::Result<Settings> {
    let sources = sources
        .set("mysql.url", url.expose())
        .set("kafka.brokers", brokers)
        .set("kafka.topics", TOPIC)
        .set("kafka.group_id", "logstamp-demo")
        // The in-process cluster completes a rebalance only when a session times out: keep
        // it short.
        .set("kafka.properties.session.timeout.ms", 3000)
        .set("kafka.properties.heartbeat.interval.ms", 300)
        .set("id.service_id", "auto")
        // The lines' own times, kept in the zone map so the summary can query by them.
        .set("store.event_time", "event_time");
    Ok(load_settings(&sources)?)
}

async fn demo(sources: Sources, url: MysqlUrl, args: &DemoArgs) -> anyhow::Result<()> {
    let cluster = LocalCluster::start(1)?;
    let settings = demo_settings(sources, &url, &cluster.bootstrap_servers())?;
    let spec = settings.log_table();
    let bound = settings.mysql.bound_on(&url);
    fresh_database(&url, &bound, &spec).await?;

    let message_bytes = log_message(0, Utc::now()).len() as u64;
    let partitions = LocalCluster::partitions_to_hold(args.records, message_bytes);
    cluster.create_topic(TOPIC, partitions)?;

    println!(
        "logstamp demo: {} records, {} workers, topic {TOPIC} of {partitions} partitions, database {}",
        args.records,
        args.workers,
        url.redacted()
    );
    let produced = Arc::new(AtomicU64::new(0));
    let producer = produce(
        &settings.kafka.brokers,
        args.records,
        partitions,
        produced.clone(),
    );
    let (stop, stopped) = watch::channel(false);
    let mut workers = Vec::with_capacity(args.workers);
    let mut service_ids = Vec::with_capacity(args.workers);
    for _ in 0..args.workers {
        let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
            .await
            .context("leasing a service ID")?;
        service_ids.push(lease.service_id());
        let stats = Arc::new(IngestStats::default());
        let task = tokio::spawn(worker(
            settings.worker(),
            lease,
            stats.clone(),
            stopped.clone(),
        ));
        workers.push((task, stats));
    }

    let watched = watch_progress(args.records, &produced, &workers, producer).await;
    let _ = stop.send(true);
    let mut failures = Vec::new();
    for (task, _) in workers {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{e:#}")),
            Err(e) => failures.push(format!("a worker task failed: {e}")),
        }
    }
    let seconds = watched?;
    if let Some(first) = failures.first() {
        bail!("a worker failed: {first}");
    }
    drop(cluster);

    let summary = mysql::with_conn(&url, async |conn| {
        summarize(conn, &spec, args.records, seconds, &service_ids).await
    });
    let duplicates = bound.wait(step, summary).await?;
    try_next(&url, settings.serve.listen);
    if duplicates > 0 {
        bail!("{duplicates} duplicates stored: exactly-once ingest failed");
    }
    Ok(())
}

/// Drops and recreates the demo database, migrated, with the log table. The first contact with
/// MySQL: if it fails, one sentence says so and how to get a server.
async fn fresh_database(url: &MysqlUrl, bound: &Bound, spec: &TableSpec) -> anyhow::Result<()> {
    if let Err(e) = mysql::create_database(url).await {
        let cause = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_else(|| e.to_string());
        bail!(
            "MySQL is not reachable at {} ({cause}); start a MySQL 8 or MariaDB server there (for example `docker run -d -p 3306:3306 -e MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1 mariadb:11`) or point LOGSTAMP__MYSQL__URL at one",
            url.redacted()
        );
    }
    let emptied = mysql::with_conn(url, async |conn| {
        conn.query_drop(format!("DROP DATABASE `{}`", url.database()))
            .await
            .context("emptying the demo database")
    });
    bound.wait(step, emptied).await?;
    mysql::create_database(url).await?;
    let known = migrate::builtin()?;
    let migrated = mysql::with_conn(url, async |conn| {
        migrate::run(conn, &known, spec, Utc::now(), false).await
    });
    bound.wait(step, migrated).await?;
    Ok(())
}

/// Produces `records` log lines timed over the last few days, round-robin over
/// `partition_count` partitions,,
/// on a thread of its own.
fn produce(
    brokers: &str,
    records: u64,
    partition_count: i32,
    produced: Arc<AtomicU64>,
) -> JoinHandle<anyhow::Result<()>> {
    let brokers = brokers.to_string();
    tokio::task::spawn_blocking(move || {
        let start = Utc::now() - chrono::Duration::days(DAYS);
        let span = chrono::Duration::days(DAYS);
        let messages = (0..records).map(|n| {
            produced.fetch_add(1, Ordering::Relaxed);
            Outgoing {
                // Round-robin: librdkafka's sticky partitioning of keyless messages would fill
                // some partitions past what the in-process cluster keeps.
                partition: Some((n % partition_count as u64) as i32),
                key: None,
                payload: Some(log_message(n, spread(start, span, n, records)).into_bytes()),
            }
        });
        produce_all(&brokers, TOPIC, messages).context("producing the demo's log lines")?;
        Ok(())
    })
}

/// One ingest worker until `stopped` turns true; it stops at once if its lease is lost.
async fn worker(
    settings: WorkerSettings,
    lease: HeldLease,
    stats: Arc<IngestStats>,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let run = ingest::run(&settings, lease.generator().clone(), stats, shutdown);
    let result = tokio::select! {
        result = run => result.map_err(anyhow::Error::from),
        reason = lease.lost() => Err(anyhow!("the lease of service ID {} was lost ({reason})", lease.service_id())),
    };
    if let Err(e) = lease.release().await {
        tracing::warn!("releasing a service-ID lease (it expires by itself): {e}");
    }
    result
}

/// Shows produced, stored and records/s until every record is stored (or dead-lettered);
/// returns the seconds that took. Stops early if the producer or a worker fails.
async fn watch_progress(
    records: u64,
    produced: &AtomicU64,
    workers: &[(JoinHandle<anyhow::Result<()>>, Arc<IngestStats>)],
    mut producer: JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let bar = ProgressBar::new(records).with_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} stored · {msg}")
            .context("the progress bar's template")?
            .progress_chars("=> "),
    );
    let mut producing = true;
    let (mut last_done, mut last_change) = (0, Instant::now());
    let mut every = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            joined = &mut producer, if producing => {
                producing = false;
                joined.context("the producer task failed")??;
            }
        }
        let done: u64 = workers
            .iter()
            .map(|(_, stats)| {
                let counts = stats.snapshot();
                counts.stored + counts.dead_lettered
            })
            .sum();
        let seconds = started.elapsed().as_secs_f64();
        bar.set_position(done.min(records));
        bar.set_message(format!(
            "{} produced · {:.0} records/s",
            produced.load(Ordering::Relaxed),
            done as f64 / seconds.max(0.001)
        ));
        if done >= records {
            bar.finish();
            return Ok(seconds);
        }
        if done != last_done {
            (last_done, last_change) = (done, Instant::now());
        } else if !producing && last_change.elapsed() > STALL {
            bar.abandon();
            return Err(anyhow!(
                "no progress for {STALL:?} with {done} of {records} records in; run again with RUST_LOG=logstamp=info to see why"
            ));
        }
        if workers.iter().any(|(task, _)| task.is_finished()) {
            bar.abandon();
            return Err(anyhow!(
                "a worker stopped with {done} of {records} records in"
            ));
        }
    }
}

/// Prints what is in MySQL now, checked with SQL; returns the number of duplicates.
async fn summarize(
    conn: &mut Conn,
    spec: &TableSpec,
    records: u64,
    seconds: f64,
    service_ids: &[u32],
) -> anyhow::Result<u64> {
    let table = &spec.table;
    let (rows, ids): (u64, u64) = conn
        .query_first(format!("SELECT COUNT(*), COUNT(DISTINCT id) FROM {table}"))
        .await?
        .unwrap_or((0, 0));
    // The same message stored twice would have two IDs: count messages by their trace ID too.
    let messages: Option<u64> = if spec.payload {
        conn.query_first(format!(
            "SELECT COUNT(DISTINCT JSON_UNQUOTE(JSON_EXTRACT(payload, '$.trace_id'))) FROM {table}"
        ))
        .await?
    } else {
        None
    };
    let dead_letters: u64 = conn
        .query_first("SELECT COUNT(*) FROM dead_letters")
        .await?
        .unwrap_or(0);
    let duplicates = rows
        .saturating_sub(ids)
        .max(rows.saturating_sub(messages.unwrap_or(rows)));
    println!();
    println!(
        "stored       {rows} records of {records} in {seconds:.1} s ({:.0} records/s), {dead_letters} dead letters",
        rows as f64 / seconds.max(0.001)
    );
    println!(
        "duplicates   {duplicates} ({ids} distinct IDs{})",
        messages
            .map(|m| format!(", {m} distinct messages"))
            .unwrap_or_default()
    );
    let per_service: Vec<(u32, u64)> = conn
        .query(format!(
            "SELECT (id >> {}) & {}, COUNT(*) FROM {table} GROUP BY 1",
            spec.scheme.layout.counter_bits(),
            spec.scheme.layout.max_service_id()
        ))
        .await?;
    let stamped: Vec<String> = service_ids
        .iter()
        .map(|id| {
            let rows = per_service
                .iter()
                .find(|(s, _)| s == id)
                .map_or(0, |(_, n)| *n);
            format!("{id} ({rows} rows)")
        })
        .collect();
    println!("service IDs  {}", stamped.join(", "));

    // IDs carry the time they were stamped, so all rows of this run share today's partitions;
    // each line's own time is in its columns.
    println!("partitions   rows per partition of table {table} (by ID, the time of ingest):");
    let mut empty = 0;
    for partition in partitions::list(conn, spec).await? {
        let name = &partition.name;
        let count: u64 = conn
            .query_first(format!(
                "SELECT COUNT(*) FROM {table} PARTITION (`{}`)",
                name.replace('`', "``")
            ))
            .await?
            .unwrap_or(0);
        if count == 0 {
            empty += 1;
        } else {
            let period = partition.from.unwrap_or_default();
            println!("  {name:<12} {count:>9}  from {period}");
        }
    }
    println!("  and {empty} empty partitions ready for the days ahead");

    let newest: Option<u64> = conn
        .query_first(format!("SELECT MAX(id) FROM {table}"))
        .await?;
    if let Some(newest) = newest {
        sample_query(conn, spec, newest).await?;
        sample_event_query(conn, spec).await?;
    }
    Ok(duplicates)
}

/// An hour of event time two days back, as `logstamp query --by event` reads it, beside the
/// same hour by ID time (which finds nothing: every ID is from today) and a full scan's count.
async fn sample_event_query(conn: &mut Conn, spec: &TableSpec) -> anyhow::Result<()> {
    let Some(column) = &spec.event_time else {
        return Ok(());
    };
    let two_days_ago = (Utc::now() - chrono::Duration::days(2)).timestamp();
    let from = chrono::DateTime::from_timestamp(two_days_ago - two_days_ago % 3600, 0)
        .ok_or_else(|| anyhow!("two days ago is out of range"))?;
    let to = from + chrono::Duration::hours(1);
    let mut shown = Vec::new();
    let (ranges, found) =
        query::run_by_event(conn, spec, &EventQuery::between(from, to), |record| {
            if shown.len() < 3 {
                shown.push(shown_line(&record));
            }
            std::ops::ControlFlow::Continue(())
        })
        .await?;
    let read = query::explain_by_event(conn, spec, &EventQuery::between(from, to))
        .await?
        .1;
    let scanned: u64 = conn
        .exec_first(
            format!(
                "SELECT COUNT(*) FROM {} WHERE {column} >= ? AND {column} < ?",
                spec.table
            ),
            (
                from.naive_utc().format("%F %T").to_string(),
                to.naive_utc().format("%F %T").to_string(),
            ),
        )
        .await?
        .unwrap_or(0);
    let by_id = TimeQuery::between(&spec.scheme.layout, from, to)?;
    let mut stamped_then = 0u64;
    query::run(conn, spec, &by_id, |_| {
        stamped_then += 1;
        std::ops::ControlFlow::Continue(())
    })
    .await?;
    println!(
        "by event     events of {} to {}: {found} records (a full scan of {column}: {scanned}), \
         ID ranges read: {}, partitions read: {}; by ID time the same hour holds {stamped_then}",
        from.to_rfc3339(),
        to.to_rfc3339(),
        ranges.len(),
        read.join(", ")
    );
    for line in shown {
        println!("{line}");
    }
    Ok(())
}

/// A record as one line of the summary: the ID, then its columns but the payload.
fn shown_line(record: &query::Record) -> String {
    let columns: Vec<String> = record
        .columns
        .iter()
        .filter(|(name, _)| name != "payload")
        .map(|(_, value)| match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let line = format!("  {}  {}", record.id, columns.join("  "));
    line.chars().take(150).collect()
}

/// The last minute of IDs, as `logstamp query` reads it: the partitions MySQL reads and a few
/// rows.
async fn sample_query(conn: &mut Conn, spec: &TableSpec, newest: u64) -> anyhow::Result<()> {
    let to = spec.scheme.layout.decode(newest).unix_seconds + 1;
    let from = to.saturating_sub(60);
    let at = |seconds: u64| {
        i64::try_from(seconds)
            .ok()
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            .ok_or_else(|| anyhow!("ID time {seconds} is out of range"))
    };
    let mut query = TimeQuery::between(&spec.scheme.layout, at(from)?, at(to)?)?;
    query.limit = Some(3);
    let read = query::explain_partitions(conn, spec, &query).await?;
    println!(
        "query        IDs of {} to {}: IDs {} to {}, partitions read: {}",
        format_utc(from),
        format_utc(to),
        query.range.start,
        query.range.end,
        read.join(", ")
    );
    let mut shown = Vec::new();
    query::run(conn, spec, &query, |record| {
        shown.push(shown_line(&record));
        std::ops::ControlFlow::Continue(())
    })
    .await?;
    for line in shown {
        println!("{line}");
    }
    Ok(())
}

/// The commands to explore the demo's data with, and the page to look at it in.
fn try_next(url: &MysqlUrl, listen: std::net::SocketAddr) {
    let env = format!(
        "LOGSTAMP__MYSQL__URL={} LOGSTAMP__STORE__EVENT_TIME=event_time",
        url.redacted()
    );
    let today = Utc::now().date_naive();
    let tomorrow = today + chrono::Days::new(1);
    println!();
    println!("Try next:");
    for command in [
        format!(
            "query --from {today} --to {tomorrow} --where \"level = 'error'\" --limit 10 --format table"
        ),
        format!("query --from {today} --to {tomorrow} --explain"),
        "query --by event --from -2days --to -47h --limit 10 --format table".to_string(),
        "query --by event --from -2days --to -47h --explain".to_string(),
        "query --follow".to_string(),
        "partitions list".to_string(),
        "leases list".to_string(),
    ] {
        println!("  {env} cargo run --release -- {command}");
    }
    println!();
    println!("Look at the logs in a browser (the log explorer; Ctrl-C stops it):");
    println!("  {env} cargo run --release -- serve");
    println!("  then open http://{listen}/?from=now-7d&to=now&time=event");
}
