//! `logstamp bench relay`: changes per second through capture and through apply, and the lag
//! from a commit in data centre A to the row in data centre B at a fixed offered rate; beside
//! them, MariaDB's own replication (a replica of A, set up by the bench) applying the same
//! changes, as the reference.
//!
//! Works in scratch databases on the servers given, dropped at the end; Kafka is an in-process
//! mock cluster unless `--brokers` names a real one.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::mocking::MockCluster;
use serde::Serialize;
use tokio::sync::watch;

use logstamp::config::Settings;
use logstamp::id::IdGenerator;
use logstamp::kafka::KafkaSettings;
use logstamp::mysql::encode::push_sql_string;
use logstamp::mysql::{MysqlSettings, MysqlUrl};
use logstamp::relay::TablePattern;
use logstamp::relay::gtid::GtidState;
use logstamp::relay::resume;
use logstamp::relay::settings::{LoopFilterMode, RelaySettings, RemoteDc};
use logstamp::relay::stage_times::Counts;
use logstamp::relay::{RelayContext, apply, capture};
use logstamp::store::migrate;

use crate::cli::UsageError;
use crate::cli::output::Output;

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Data centre A's server, mysql://user[:password]@host:port; needs log_bin with the
    /// relay's binlog settings.
    #[arg(long, value_name = "URL")]
    pub(super) source: String,
    /// Data centre B's server.
    #[arg(long, value_name = "URL")]
    pub(super) target: String,
    /// A third server, made a native replica of A for the reference (its replication settings
    /// are replaced). Without it, only the relay is measured.
    #[arg(long, value_name = "URL")]
    pub(super) replica: Option<String>,
    /// Changes in the throughput phase.
    #[arg(long, default_value_t = 100_000)]
    pub(super) changes: u64,
    /// Changes (inserted rows) per source transaction.
    #[arg(long, default_value_t = 10)]
    pub(super) txn_size: u64,
    /// Offered changes per second in the lag phase.
    #[arg(long, default_value_t = 5_000)]
    pub(super) rate: u64,
    /// Length of the lag phase.
    #[arg(long, default_value_t = 30)]
    pub(super) seconds: u64,
    /// Kafka to use instead of an in-process mock cluster (the topic logstamp-bench-a must
    /// exist with one partition).
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) brokers: Option<String>,
    /// The replica server_id capture registers with on A.
    #[arg(long, default_value_t = 4242)]
    pub(super) server_id: u32,
    #[command(flatten)]
    pub(super) peer: super::relay_peer::PeerArgs,
}

pub(super) const TABLE: &str = "relay_bench";
pub(super) const WAIT_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(super) enum Line {
    Write {
        changes: u64,
        seconds: f64,
        changes_per_second: f64,
    },
    Throughput {
        path: &'static str,
        changes: u64,
        seconds: f64,
        changes_per_second: f64,
    },
    Lag {
        path: &'static str,
        offered_changes_per_second: u64,
        achieved_changes_per_second: f64,
        changes: u64,
        p50_ms: f64,
        p99_ms: f64,
        max_ms: f64,
    },
    /// Where the relay's lag goes: one stage of its path over the lag phase (see
    /// `logstamp::relay::stage_times`), in steps of 0.1 ms (Kafka's transit in whole ms).
    Stage {
        stage: &'static str,
        samples: u64,
        p50_ms: f64,
        p99_ms: f64,
    },
}

/// The relay's stage times at one moment: capture's publishing, Kafka's transit to the
/// applier, and the applier's work, by stage name.
fn stage_counts(
    capture: &RelayContext,
    applier: &RelayContext,
    source_dc: &str,
) -> Vec<(&'static str, Counts)> {
    let mut stages = vec![("publish", capture.stats.capture.publish_time.counts())];
    if let Some(stats) = applier.stats.applier(source_dc) {
        stages.push(("kafka_transit", stats.kafka_transit.counts()));
        stages.push(("apply", stats.apply_time.counts()));
    }
    stages
}

/// Each stage's figures between two readings of [`stage_counts`].
fn stage_lines(before: &[(&'static str, Counts)], after: &[(&'static str, Counts)]) -> Vec<Line> {
    let ms = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
    after
        .iter()
        .zip(before)
        .map(|((stage, after), (_, before))| {
            let between = after.since(before);
            Line::Stage {
                stage,
                samples: between.total(),
                p50_ms: ms(between.quantile(0.5)),
                p99_ms: ms(between.quantile(0.99)),
            }
        })
        .collect()
}

pub fn run(args: RelayArgs, settings: Settings) -> anyhow::Result<()> {
    if args.changes == 0 || args.txn_size == 0 || args.rate == 0 || args.seconds == 0 {
        return Err(UsageError(
            "--changes, --txn-size, --rate and --seconds must be at least 1".into(),
        )
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if args.peer.peer.is_some() {
        return runtime.block_on(super::relay_peer::bench(args, settings));
    }
    runtime.block_on(bench(args, settings))
}

/// The databases of one run on each server: the bench table's, and the relay tables'.
struct Scratch {
    data: String,
    state: String,
}

async fn bench(args: RelayArgs, settings: Settings) -> anyhow::Result<()> {
    let scratch = Scratch {
        data: format!("logstamp_bench_{}", std::process::id()),
        state: format!("logstamp_bench_{}_relay", std::process::id()),
    };
    let flag = |text: &str, name: &str| {
        with_database(text, &scratch.data).map_err(|e| UsageError::new(name, e))
    };
    let source = flag(&args.source, "--source")?;
    let target = flag(&args.target, "--target")?;
    let replica = args
        .replica
        .as_deref()
        .map(|r| flag(r, "--replica"))
        .transpose()?;
    let mut a = server(&source).await.context("connecting to --source")?;
    let mut b = server(&target).await.context("connecting to --target")?;
    let mut r = match &replica {
        Some(url) => Some(server(url).await.context("connecting to --replica")?),
        None => None,
    };
    let result = bench_in(
        &args,
        &settings,
        &scratch,
        &source,
        &target,
        &mut a,
        &mut b,
        r.as_mut(),
    )
    .await;
    // Dropped on A, the databases go from the replica by replication.
    for conn in [&mut a, &mut b] {
        for db in [&scratch.data, &scratch.state] {
            conn.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
                .await?;
        }
    }
    if let Some(r) = &mut r {
        // After a failure the replica may not be replicating at all: do not wait for it.
        if result.is_ok() {
            wait_replica(&mut a, r, Reached::Applied).await?;
        }
        r.query_drop("STOP SLAVE").await?;
        r.query_drop("RESET SLAVE ALL").await?;
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn bench_in(
    args: &RelayArgs,
    settings: &Settings,
    scratch: &Scratch,
    source: &MysqlUrl,
    target: &MysqlUrl,
    a: &mut Conn,
    b: &mut Conn,
    mut r: Option<&mut Conn>,
) -> anyhow::Result<()> {
    let mut out = Output::new();
    if let Some(r) = r.as_deref_mut() {
        make_replica(a, r, source).await?;
    }
    let create = create_table(&scratch.data);
    let stamp = stamp_trigger(&scratch.data);
    for db in [&scratch.data, &scratch.state] {
        a.query_drop(format!("CREATE DATABASE `{db}`")).await?;
        b.query_drop(format!("CREATE DATABASE `{db}`")).await?;
    }
    a.query_drop(&create).await?;
    b.query_drop(&create).await?;
    b.query_drop(&stamp).await?;
    let known = migrate::builtin()?;
    for conn in [&mut *a, &mut *b] {
        conn.query_drop(format!("USE `{}`", scratch.state)).await?;
        migrate::apply(conn, &known).await?;
        conn.query_drop(format!("USE `{}`", scratch.data)).await?;
    }
    if let Some(r) = r.as_deref_mut() {
        wait_replica(a, r, Reached::Applied).await?;
        // Unlogged: the replica's binlog keeps the source's GTIDs only, so the next run can
        // start it at the source's position.
        r.query_drop("SET SESSION sql_log_bin = 0").await?;
        r.query_drop(&stamp).await?;
        r.query_drop("SET SESSION sql_log_bin = 1").await?;
        r.query_drop(format!("USE `{}`", scratch.data)).await?;
    }

    let mock = match &args.brokers {
        Some(_) => None,
        None => {
            let cluster = MockCluster::new(1).context("starting the Kafka mock cluster")?;
            cluster
                .create_topic("logstamp-bench-a", 1, 1)
                .context("creating the topic")?;
            Some(cluster)
        }
    };
    let brokers = match (&args.brokers, &mock) {
        (Some(brokers), _) => brokers.clone(),
        (None, Some(cluster)) => cluster.bootstrap_servers(),
        (None, None) => bail!("no Kafka"),
    };
    let relay = |url: &MysqlUrl, dc: &str| -> anyhow::Result<RelayContext> {
        let mysql = MysqlSettings::new(
            with_database(url.expose(), &scratch.state).map_err(anyhow::Error::msg)?,
        );
        let kafka = KafkaSettings {
            brokers: brokers.clone(),
            ..settings.kafka.clone()
        };
        let relay = RelaySettings {
            dc: dc.to_string(),
            server_id: args.server_id,
            tables: vec![
                TablePattern::parse(&format!("{}.{TABLE}", scratch.data))
                    .map_err(anyhow::Error::msg)?,
            ],
            topic_prefix: "logstamp-bench-".into(),
            loop_filter: LoopFilterMode::Marker,
            checkpoint_interval: Duration::from_millis(100),
            remotes: vec![RemoteDc {
                dc: "a".into(),
                brokers: brokers.clone(),
                url: None,
                shards: Vec::new(),
            }],
            ..settings.relay.clone()
        };
        Ok(RelayContext::new(mysql, kafka, relay))
    };
    let (context_a, context_b) = (relay(source, "a")?, relay(target, "b")?);
    let (stop, stopped) = watch::channel(false);

    // Throughput: capture reads a backlog into Kafka, then apply drains it; the native
    // replica's SQL thread drains the same changes from its relay log.
    if let Some(r) = r.as_deref_mut() {
        r.query_drop("STOP SLAVE SQL_THREAD").await?;
    }
    // Capture starts where the backlog starts.
    resume::start_anew(&context_a).await?;
    let ids = IdGenerator::new(settings.id.layout, 1)?;
    let started = Instant::now();
    write(a, &ids, args.changes, args.txn_size, None).await?;
    let seconds = started.elapsed().as_secs_f64();
    out.json(&Line::Write {
        changes: args.changes,
        seconds,
        changes_per_second: args.changes as f64 / seconds,
    })?;
    out.flush()?;

    let capture_task = timed_part(&mut out, &stopped, &context_a, None, a, args.changes).await?;
    let remote = context_b.relay.remotes[0].clone();
    let apply_task = timed_part(
        &mut out,
        &stopped,
        &context_b,
        Some(&remote),
        b,
        args.changes,
    )
    .await?;

    if let Some(r) = r.as_deref_mut() {
        wait_replica(a, r, Reached::Received).await?;
        let started = Instant::now();
        r.query_drop("START SLAVE SQL_THREAD").await?;
        wait_replica(a, r, Reached::Applied).await?;
        report(&mut out, "native_replication_apply", args.changes, started)?;
    }

    // Lag: both paths running, changes offered at a steady rate.
    let first: u64 = ids.next_id()?;
    let stages_before = stage_counts(&context_a, &context_b, &remote.dc);
    let total = args.rate * args.seconds;
    let started = Instant::now();
    let pace = Duration::from_secs_f64(args.txn_size as f64 / args.rate as f64);
    write(a, &ids, total, args.txn_size, Some(pace)).await?;
    let achieved = total as f64 / started.elapsed().as_secs_f64();
    let applied = progress(&context_b, Some(&remote));
    wait_for(b, &applied, args.changes + total, &apply_task).await?;
    out.json(&lag(b, TABLE, "relay", first, args.rate, achieved).await?)?;
    let stages_after = stage_counts(&context_a, &context_b, &remote.dc);
    for line in stage_lines(&stages_before, &stages_after) {
        out.json(&line)?;
    }
    if let Some(r) = r {
        wait_replica(a, r, Reached::Applied).await?;
        out.json(&lag(r, TABLE, "native_replication", first, args.rate, achieved).await?)?;
    }
    out.flush()?;

    let _ = stop.send(true);
    capture_task.await??;
    apply_task.await??;
    Ok(())
}

/// The bench table in `database`: ingest-like rows, and `applied` for the target's trigger.
pub(super) fn create_table(database: &str) -> String {
    format!(
        "CREATE TABLE `{database}`.`{TABLE}` (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
         service INT UNSIGNED NOT NULL, payload VARCHAR(200) NOT NULL, \
         created DATETIME(6) NOT NULL, applied DATETIME(6) NULL) ENGINE=InnoDB"
    )
}

/// Where a row arrives, a trigger stamps when: SYSDATE, as a replica's NOW() is the time the
/// event was written at the source.
pub(super) fn stamp_trigger(database: &str) -> String {
    format!(
        "CREATE TRIGGER `{database}`.`{TABLE}_applied` BEFORE INSERT ON `{database}`.`{TABLE}` \
         FOR EACH ROW SET NEW.applied = SYSDATE(6)"
    )
}

fn report(
    out: &mut Output,
    path: &'static str,
    changes: u64,
    started: Instant,
) -> anyhow::Result<()> {
    let seconds = started.elapsed().as_secs_f64();
    out.json(&Line::Throughput {
        path,
        changes,
        seconds,
        changes_per_second: changes as f64 / seconds,
    })?;
    out.flush()?;
    Ok(())
}

type Part = tokio::task::JoinHandle<Result<(), logstamp::relay::RelayError>>;

/// Starts capture (`remote` `None`) or the applier of `remote`, to run until `stopped` is set,
/// and reports how long it took to handle `changes` changes.
async fn timed_part(
    out: &mut Output,
    stopped: &watch::Receiver<bool>,
    context: &RelayContext,
    remote: Option<&RemoteDc>,
    conn: &mut Conn,
    changes: u64,
) -> anyhow::Result<Part> {
    let (context, owned_remote, mut stopped) = (context.clone(), remote.cloned(), stopped.clone());
    let query = progress(&context, remote);
    let task = tokio::spawn(async move {
        match owned_remote {
            None => capture::run_once(&context, &mut stopped).await,
            Some(remote) => apply::run_once(&context, &remote, &mut stopped).await,
        }
    });
    let started = Instant::now();
    wait_for(conn, &query, changes, &task).await?;
    let path = if remote.is_none() {
        "relay_capture"
    } else {
        "relay_apply"
    };
    report(out, path, changes, started)?;
    Ok(task)
}

/// The query for how many changes capture published, or the applier of `remote` applied.
fn progress(context: &RelayContext, remote: Option<&RemoteDc>) -> String {
    progress_query(
        &context.state_database,
        context.dc(),
        remote.map(|r| r.dc.as_str()),
    )
}

/// The query for how many changes the capture of `dc` published (`remote` `None`), or its
/// applier of `remote` applied, from the relay tables in `state_database`.
pub(super) fn progress_query(state_database: &str, dc: &str, remote: Option<&str>) -> String {
    match remote {
        None => format!(
            "SELECT published_changes FROM `{state_database}`.relay_checkpoints WHERE dc = '{dc}'"
        ),
        Some(remote) => format!(
            "SELECT applied_changes FROM `{state_database}`.relay_applied \
             WHERE source_dc = '{remote}'"
        ),
    }
}

/// Inserts `changes` rows, `txn_size` per transaction, one transaction per `pace` if given.
pub(super) async fn write(
    conn: &mut Conn,
    ids: &IdGenerator,
    changes: u64,
    txn_size: u64,
    pace: Option<Duration>,
) -> anyhow::Result<()> {
    let mut ticks = pace.map(|p| {
        let mut t = tokio::time::interval(p);
        // Late transactions are sent at once, so the offered rate holds on average.
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        t
    });
    let mut left = changes;
    while left > 0 {
        if let Some(t) = &mut ticks {
            t.tick().await;
        }
        let n = left.min(txn_size);
        let block = ids.next_block(n as u32)?;
        let rows: Vec<String> = block
            .iter()
            .map(|id| format!("({id}, 1, 'bench row {id} with some text to carry', NOW(6))"))
            .collect();
        conn.query_drop(format!(
            "INSERT INTO {TABLE} (id, service, payload, created) VALUES {}",
            rows.join(", ")
        ))
        .await?;
        left -= u64::from(block.len());
    }
    Ok(())
}

/// Polls `query` (one number) until it reaches `want`, failing early if `task` ended.
async fn wait_for<T>(
    conn: &mut Conn,
    query: &str,
    want: u64,
    task: &tokio::task::JoinHandle<T>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let got: Option<u64> = conn.query_first(query).await?;
        if got.unwrap_or(0) >= want {
            return Ok(());
        }
        if task.is_finished() {
            bail!("the relay stopped before {query} reached {want}");
        }
        if Instant::now() > deadline {
            bail!("{query} stayed at {got:?} of {want} for {WAIT_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Commit-to-visible lag of the rows of `table` from `first` on: the trigger's time minus the
/// source's.
pub(super) async fn lag(
    conn: &mut Conn,
    table: &str,
    path: &'static str,
    first: u64,
    offered: u64,
    achieved: f64,
) -> anyhow::Result<Line> {
    let mut lags: Vec<i64> = conn
        .exec(
            format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, created, applied) FROM {table} WHERE id >= ?"
            ),
            (first,),
        )
        .await?;
    if lags.is_empty() {
        bail!("no rows of the lag phase arrived by {path}");
    }
    lags.sort_unstable();
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    Ok(Line::Lag {
        path,
        offered_changes_per_second: offered,
        achieved_changes_per_second: achieved,
        changes: lags.len() as u64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    })
}

/// Makes `replica` replicate from `source` from its current GTID position, running triggers
/// for row events so its rows get their arrival time.
async fn make_replica(
    source: &mut Conn,
    replica: &mut Conn,
    source_url: &MysqlUrl,
) -> anyhow::Result<()> {
    let at: Option<String> = source
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await?;
    let own: Option<String> = replica
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await?;
    let start = replica_start(
        &at.unwrap_or_default()
            .parse()
            .context("--source's gtid_binlog_pos")?,
        &own.unwrap_or_default()
            .parse()
            .context("--replica's gtid_binlog_pos")?,
    );
    let url = url::Url::parse(source_url.expose()).context("--source")?;
    let host = url.host_str().unwrap_or("127.0.0.1");
    let user = if url.username().is_empty() {
        "root"
    } else {
        url.username()
    };
    replica.query_drop("STOP SLAVE").await?;
    replica.query_drop("RESET SLAVE ALL").await?;
    replica
        .exec_drop("SET GLOBAL gtid_slave_pos = ?", (start.to_string(),))
        .await
        .context("setting gtid_slave_pos on --replica")?;
    // CHANGE MASTER takes no placeholders: literals, escaped.
    let mut change = String::from("CHANGE MASTER TO MASTER_HOST = ");
    push_sql_string(&mut change, host);
    change.push_str(&format!(
        ", MASTER_PORT = {}, MASTER_USER = ",
        url.port().unwrap_or(3306)
    ));
    push_sql_string(&mut change, user);
    change.push_str(", MASTER_PASSWORD = ");
    push_sql_string(&mut change, url.password().unwrap_or(""));
    change.push_str(", MASTER_USE_GTID = slave_pos");
    replica
        .query_drop(change)
        .await
        .context("CHANGE MASTER TO on --replica")?;
    replica
        .query_drop("SET GLOBAL slave_run_triggers_for_rbr = YES")
        .await?;
    replica.query_drop("START SLAVE").await?;
    Ok(())
}

/// Where the replica starts: the source's GTID position, and for each domain that only the
/// replica's own binlog has, the replica's position there. MariaDB refuses a `gtid_slave_pos`
/// that lacks a domain of the server's own binlog (ERROR 1948), and a replica with its own
/// `gtid_domain_id` has one once anything was written there (such as an earlier run's trigger,
/// before triggers were created unlogged).
fn replica_start(source: &GtidState, replica: &GtidState) -> GtidState {
    let mut start = source.clone();
    for gtid in replica.gtids() {
        if source.get(gtid.domain).is_none() {
            start.update(gtid);
        }
    }
    start
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    /// The IO thread has everything in the relay log.
    Received,
    /// The SQL thread has applied everything.
    Applied,
}

/// Waits until the replica has received, or applied, everything the source has written.
async fn wait_replica(
    source: &mut Conn,
    replica: &mut Conn,
    reached: Reached,
) -> anyhow::Result<()> {
    let at: Option<String> = source
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await?;
    let at = at.unwrap_or_default();
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let done = match reached {
            // Waits up to a second itself.
            Reached::Applied => {
                let waited: Option<i64> = replica
                    .exec_first("SELECT MASTER_GTID_WAIT(?, 1)", (at.as_str(),))
                    .await?;
                waited == Some(0)
            }
            Reached::Received => {
                let status: Option<mysql_async::Row> =
                    replica.query_first("SHOW SLAVE STATUS").await?;
                let received = status
                    .and_then(|row| row.get_opt::<String, _>("Gtid_IO_Pos"))
                    .and_then(Result::ok);
                // The replica's position also holds the domains only its binlog has.
                let want: GtidState = at.parse().context("--source's gtid_binlog_pos")?;
                let got = received.and_then(|r| r.parse::<GtidState>().ok());
                let done = got.is_some_and(|g| g.includes(&want));
                if !done {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                done
            }
        };
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the replica has not {reached:?} {at} after {WAIT_LIMIT:?}");
        }
    }
}

/// A connection to the server of `url`, in no database (the scratch ones do not exist yet).
pub(super) async fn server(url: &MysqlUrl) -> anyhow::Result<Conn> {
    let opts = mysql_async::Opts::from_url(url.expose())?;
    Ok(Conn::new(mysql_async::OptsBuilder::from_opts(opts).db_name(None::<String>)).await?)
}

/// The server URL `text` pointed at `database`.
pub(super) fn with_database(text: &str, database: &str) -> Result<MysqlUrl, String> {
    let mut url = url::Url::parse(text).map_err(|e| e.to_string())?;
    url.set_path(&format!("/{database}"));
    MysqlUrl::try_from(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_starts_at_the_source_and_keeps_its_own_domains() {
        let state = |s: &str| s.parse::<GtidState>().unwrap();
        let start = replica_start(&state("0-1-500,1-1-7"), &state("0-1-480,3-3-2"));
        assert_eq!(start, state("0-1-500,1-1-7,3-3-2"));
        assert_eq!(replica_start(&state(""), &state("")), state(""));
        assert_eq!(replica_start(&state("1-11-9"), &state("")), state("1-11-9"));
    }
}
