//! `logstamp bench snapshot`: the relay's online snapshot of a table (capture on A, the applier
//! on B, in this process) beside `mysqldump | mysql` of the same table, and the source's commit
//! latency with and without a snapshot running.
//!
//! Works in scratch databases on the servers given, dropped at the end; Kafka is an in-process
//! mock cluster unless `--brokers` names a real one (the mock keeps only 5 MiB per partition, so
//! a large table needs a real broker).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rand::Rng;
use rdkafka::mocking::MockCluster;
use serde::Serialize;
use tokio::sync::watch;

use logstamp::config::Settings;
use logstamp::kafka::KafkaSettings;
use logstamp::mysql::{MysqlSettings, MysqlUrl};
use logstamp::relay::settings::{LoopFilterMode, RelaySettings, RemoteDc};
use logstamp::relay::snapshot;
use logstamp::relay::{RelayContext, TablePattern, apply, capture};
use logstamp::store::migrate;

use super::relay::{server, with_database};
use crate::cli::UsageError;
use crate::cli::output::Output;

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Data centre A's server, mysql://user[:password]@host:port; needs log_bin with the
    /// relay's binlog settings.
    #[arg(long, value_name = "URL")]
    source: String,
    /// Data centre B's server.
    #[arg(long, value_name = "URL")]
    target: String,
    /// Rows of the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows per snapshot chunk.
    #[arg(long, default_value_t = snapshot::DEFAULT_CHUNK_ROWS)]
    chunk_rows: u64,
    /// Single-row updates per second on A while commit latency is measured.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Length of the commit latency phase without a snapshot.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Kafka to use instead of an in-process mock cluster.
    #[arg(long, value_name = "HOST:PORT")]
    brokers: Option<String>,
    /// The replica server_id capture registers with on A.
    #[arg(long, default_value_t = 4243)]
    server_id: u32,
}

const TABLE: &str = "snapshot_bench";
const WAIT_LIMIT: Duration = Duration::from_secs(3600);

#[derive(Debug, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Line {
    /// The source's commit latency under the paced updates.
    CommitLatency {
        during_snapshot: bool,
        commits: u64,
        p50_ms: f64,
        p99_ms: f64,
        max_ms: f64,
    },
    /// A copy of the table from A to B.
    Copy {
        path: &'static str,
        rows: u64,
        seconds: f64,
        rows_per_second: f64,
    },
}

pub fn run(args: SnapshotArgs, settings: Settings) -> anyhow::Result<()> {
    if args.rows == 0 || args.chunk_rows == 0 || args.rate == 0 || args.seconds == 0 {
        return Err(UsageError(
            "--rows, --chunk-rows, --rate and --seconds must be at least 1".into(),
        )
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(bench(args, settings))
}

async fn bench(args: SnapshotArgs, settings: Settings) -> anyhow::Result<()> {
    let data = format!("logstamp_snapbench_{}", std::process::id());
    let state = format!("{data}_relay");
    let source = with_database(&args.source, &data).map_err(|e| UsageError::new("--source", e))?;
    let target = with_database(&args.target, &data).map_err(|e| UsageError::new("--target", e))?;
    let mut a = server(&source).await.context("connecting to --source")?;
    let mut b = server(&target).await.context("connecting to --target")?;
    let result = bench_in(
        &args, &settings, &data, &state, &source, &target, &mut a, &mut b,
    )
    .await;
    for conn in [&mut a, &mut b] {
        for db in [&data, &state] {
            conn.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
                .await?;
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn bench_in(
    args: &SnapshotArgs,
    settings: &Settings,
    data: &str,
    state: &str,
    source: &MysqlUrl,
    target: &MysqlUrl,
    a: &mut Conn,
    b: &mut Conn,
) -> anyhow::Result<()> {
    let mut out = Output::new();
    let create = format!(
        "CREATE TABLE `{data}`.`{TABLE}` (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
         v INT NOT NULL, note VARCHAR(64) NOT NULL, amount DECIMAL(18,6) NULL, \
         seen DATETIME(6) NOT NULL) ENGINE=InnoDB"
    );
    let known = migrate::builtin()?;
    for conn in [&mut *a, &mut *b] {
        for db in [data, state] {
            conn.query_drop(format!("CREATE DATABASE `{db}`")).await?;
        }
        conn.query_drop(&create).await?;
        conn.query_drop(format!("USE `{state}`")).await?;
        migrate::apply(conn, &known).await?;
        conn.query_drop(format!("USE `{data}`")).await?;
    }
    // MariaDB's sequence engine: the rows exist before capture starts, as a snapshot finds them.
    a.query_drop(format!(
        "INSERT INTO {TABLE} SELECT seq, seq % 1000, CONCAT('row ', seq), seq / 7, \
         '2026-01-01' + INTERVAL seq SECOND FROM seq_1_to_{}",
        args.rows
    ))
    .await
    .context("filling the table (MariaDB's sequence engine)")?;

    let mock = match &args.brokers {
        Some(_) => None,
        None => Some(MockCluster::new(1).context("starting the Kafka mock cluster")?),
    };
    let brokers = match (&args.brokers, &mock) {
        (Some(brokers), _) => brokers.clone(),
        (None, Some(cluster)) => cluster.bootstrap_servers(),
        (None, None) => bail!("no Kafka"),
    };
    let relay = |url: &MysqlUrl, dc: &str, remote: &str| -> anyhow::Result<RelayContext> {
        let mysql =
            MysqlSettings::new(with_database(url.expose(), state).map_err(anyhow::Error::msg)?);
        let kafka = KafkaSettings {
            brokers: brokers.clone(),
            ..settings.kafka.clone()
        };
        let relay = RelaySettings {
            dc: dc.to_string(),
            server_id: args.server_id,
            tables: vec![
                TablePattern::parse(&format!("{data}.{TABLE}")).map_err(anyhow::Error::msg)?,
            ],
            topic_prefix: format!("logstamp-snapbench-{}-", std::process::id()),
            loop_filter: LoopFilterMode::Marker,
            checkpoint_interval: Duration::from_millis(100),
            remotes: vec![RemoteDc {
                dc: remote.into(),
                brokers: brokers.clone(),
                url: None,
                shards: Vec::new(),
            }],
            ..settings.relay.clone()
        };
        Ok(RelayContext::new(mysql, kafka, relay))
    };
    let (context_a, context_b) = (relay(source, "a", "b")?, relay(target, "b", "a")?);
    let (stop, stopped) = watch::channel(false);
    let capture_task = {
        let (context, mut stopped) = (context_a.clone(), stopped.clone());
        tokio::spawn(async move { capture::run_once(&context, &mut stopped).await })
    };
    let apply_task = {
        let (context, mut stopped) = (context_b.clone(), stopped.clone());
        let remote = context.relay.remotes[0].clone();
        tokio::spawn(async move { apply::run_once(&context, &remote, &mut stopped).await })
    };

    // The source's commit latency with the relay running and no snapshot.
    let baseline = updates(
        source.clone(),
        args.rows,
        args.rate,
        Some(args.seconds),
        watch::channel(false).1,
    );
    out.json(&latency(false, baseline.await?))?;
    out.flush()?;

    // The snapshot, under the same updates.
    let (snapshot_done, done_rx) = watch::channel(false);
    let during = tokio::spawn(updates(source.clone(), args.rows, args.rate, None, done_rx));
    let started = Instant::now();
    snapshot::request(&context_a, data, TABLE, args.chunk_rows).await?;
    let deadline = started + WAIT_LIMIT;
    loop {
        let status = snapshot::status(&context_a, Some((data, TABLE))).await?;
        match status.first().map(|s| s.state.as_str()) {
            Some("done") => break,
            Some("failed") => bail!("the snapshot failed: {:?}", status[0].last_error),
            _ if Instant::now() > deadline => bail!("the snapshot took over {WAIT_LIMIT:?}"),
            _ if capture_task.is_finished() || apply_task.is_finished() => {
                bail!("the relay stopped during the snapshot (its log says why)")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let copied = started.elapsed().as_secs_f64();
    let _ = snapshot_done.send(true);
    out.json(&latency(true, during.await??))?;
    // B holds the table once the applier drained what the snapshot and the updates published.
    while checksum(a).await? != checksum(b).await? {
        if Instant::now() > deadline || apply_task.is_finished() {
            bail!("B did not reach A's rows");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    out.json(&Line::Copy {
        path: "relay_snapshot_published",
        rows: args.rows,
        seconds: copied,
        rows_per_second: args.rows as f64 / copied,
    })?;
    out.json(&Line::Copy {
        path: "relay_snapshot_applied",
        rows: args.rows,
        seconds,
        rows_per_second: args.rows as f64 / seconds,
    })?;
    out.flush()?;
    let _ = stop.send(true);
    capture_task.await??;
    apply_task.await??;

    // The dump a snapshot replaces: consistent only with writes stopped, as they are now.
    b.query_drop(format!("TRUNCATE TABLE {TABLE}")).await?;
    let started = Instant::now();
    dump_and_load(source, target, data).await?;
    let seconds = started.elapsed().as_secs_f64();
    if checksum(a).await? != checksum(b).await? {
        bail!("mysqldump | mysql left B different from A");
    }
    out.json(&Line::Copy {
        path: "mysqldump_mysql",
        rows: args.rows,
        seconds,
        rows_per_second: args.rows as f64 / seconds,
    })?;
    out.flush()?;
    drop(mock);
    Ok(())
}

/// Single-row updates of random rows at `rate` per second, each its own transaction, for
/// `seconds` or until `stop`: each commit's latency, in milliseconds.
async fn updates(
    url: MysqlUrl,
    rows: u64,
    rate: u64,
    seconds: Option<u64>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Vec<f64>> {
    let mut conn = Conn::from_url(url.expose()).await?;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let mut latencies = Vec::new();
    while !*stop.borrow() && end.is_none_or(|end| Instant::now() < end) {
        ticks.tick().await;
        let id = rand::rng().random_range(1..=rows);
        let started = Instant::now();
        conn.exec_drop(format!("UPDATE {TABLE} SET v = v + 1 WHERE id = ?"), (id,))
            .await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    conn.disconnect().await?;
    Ok(latencies)
}

fn latency(during_snapshot: bool, mut ms: Vec<f64>) -> Line {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        ms.get(((ms.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Line::CommitLatency {
        during_snapshot,
        commits: ms.len() as u64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// The table's row count and `CHECKSUM TABLE` on the connection's server.
async fn checksum(conn: &mut Conn) -> anyhow::Result<(u64, Option<u64>)> {
    let count: Option<u64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {TABLE}"))
        .await?;
    let sum: Option<(String, Option<u64>)> =
        conn.query_first(format!("CHECKSUM TABLE {TABLE}")).await?;
    Ok((count.unwrap_or(0), sum.and_then(|(_, s)| s)))
}

/// `mysqldump --no-create-info DB TABLE | mysql DB`, from A's server into B's.
async fn dump_and_load(source: &MysqlUrl, target: &MysqlUrl, data: &str) -> anyhow::Result<()> {
    let (source, target, data) = (source.clone(), target.clone(), data.to_string());
    tokio::task::spawn_blocking(move || {
        let mut dump = Command::new("mysqldump")
            .args(client_args(&source)?)
            .args(["--no-create-info", "--skip-triggers", &data, TABLE])
            .stdout(Stdio::piped())
            .spawn()
            .context("running mysqldump (the MariaDB client tools)")?;
        let dumped = dump.stdout.take().context("mysqldump's output")?;
        let loaded = Command::new("mysql")
            .args(client_args(&target)?)
            .arg(&data)
            .stdin(dumped)
            .status()
            .context("running mysql")?;
        let dumped = dump.wait()?;
        if !dumped.success() || !loaded.success() {
            bail!("mysqldump ({dumped}) | mysql ({loaded}) failed");
        }
        Ok(())
    })
    .await?
}

/// The MySQL client tools' connection flags for `url`.
fn client_args(url: &MysqlUrl) -> anyhow::Result<Vec<String>> {
    let parsed = url::Url::parse(url.expose())?;
    let mut args = vec![
        format!("--host={}", parsed.host_str().unwrap_or("127.0.0.1")),
        format!("--port={}", parsed.port().unwrap_or(3306)),
        format!("--user={}", parsed.username()),
    ];
    if let Some(password) = parsed.password() {
        args.push(format!("--password={password}"));
    }
    Ok(args)
}
