//! `logstamp bench relay --peer debezium`: the relay beside Debezium, the peer users compare it
//! with, relaying the same changes between the same two servers in one run.
//!
//! Each side runs as a data centre pair would: logstamp as two `logstamp relay run` processes
//! (data centre A's captures, B's applies), Debezium as two Kafka Connect standalone workers
//! (one with Debezium's MariaDB source connector on A, one with its JDBC sink connector on B).
//! Processes of their own, so that each one's CPU is read from `/proc` and the capturing one can
//! be killed. Both capture the same table on A; logstamp applies it into B's table of the same
//! name, Debezium into the same table in a database of its own on B.
//!
//! 1. **Throughput.** A backlog is written to A with every process stopped, then each part
//!    drains it alone: logstamp's capture, its applier, Debezium's source, its sink. A part's
//!    time runs from its last poll that saw nothing done (so a JVM's start is not counted) to
//!    the poll that sees the backlog in: capture's `relay_checkpoints.published_changes` and the
//!    Debezium topic's end offset, the applier's `relay_applied.applied_changes` and the
//!    sink's table holding the backlog's last row. The CPU of the part's process and of the
//!    server it works on is read at the same two polls.
//! 2. **Lag.** All four processes running, changes offered at `--rate`; each copy's trigger
//!    stamps a row's arrival, as in the bench without a peer.
//! 3. **A SIGKILL.** Changes offered at `--rate` for `--crash-seconds`; halfway, the capturing
//!    process of each side (logstamp's relay of A, Debezium's source worker) is killed with
//!    SIGKILL and started again. Once the writes end and each copy has as many rows as A (or
//!    `SETTLE_LIMIT` passed), the copies are compared with A by a checksum of every row.

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;

use logstamp::config::Settings;
use logstamp::id::IdGenerator;
use logstamp::mysql::MysqlUrl;
use logstamp::store::migrate;

use super::ingest::{cpu_seconds, create_topic, delete_topic, pid_from_file};
use super::relay::{
    Line, RelayArgs, TABLE, WAIT_LIMIT, create_table, lag, progress_query, server, stamp_trigger,
    with_database, write,
};
use crate::cli::UsageError;
use crate::cli::output::Output;

/// The peer to measure beside the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// Debezium's MariaDB source and JDBC sink connectors on Kafka Connect standalone.
    Debezium,
}

#[derive(Debug, Args)]
pub struct PeerArgs {
    /// Measure the relay beside this peer, both as processes of their own against the Kafka of
    /// --brokers (required with it); --replica is not used then.
    #[arg(long, value_enum)]
    pub(super) peer: Option<Peer>,
    /// Java (17 or later) to run Kafka Connect with.
    #[arg(
        long,
        env = "LOGSTAMP_BENCH_JAVA",
        default_value = "java",
        value_name = "PROGRAM"
    )]
    java: PathBuf,
    /// Apache Kafka's jars, Kafka Connect's among them: `scripts/fetch-jars` puts them in
    /// <target>/kafka-VERSION/lib.
    #[arg(long, env = "LOGSTAMP_BENCH_KAFKA_LIB", value_name = "DIR")]
    kafka_lib: Option<PathBuf>,
    /// Debezium's connectors, a directory holding `plugin/` with their jars:
    /// `scripts/fetch-jars` makes <target>/debezium-VERSION.
    #[arg(long, env = "LOGSTAMP_BENCH_DEBEZIUM", value_name = "DIR")]
    debezium: Option<PathBuf>,
    /// Length of the phase with one SIGKILL of each side's capturing process.
    #[arg(long, default_value_t = 20)]
    crash_seconds: u64,
}

/// How long a copy may take to catch up after the SIGKILL phase's writes before it is
/// compared as it is.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);
/// How long a Connect worker may take to start its connector, on a loaded two-core machine.
const START_LIMIT: Duration = Duration::from_secs(180);
/// The table whose rows tell that Debezium's source streams (see [`Run::positions`]).
const MARKER: &str = "relay_bench_marker";
/// How long a process may take to exit after SIGTERM before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(60);
/// How often a part's progress is read while it is timed.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum PeerLine {
    Throughput {
        peer: &'static str,
        part: &'static str,
        changes: u64,
        seconds: f64,
        changes_per_second: f64,
        /// The part's own process (a relay, a Connect worker).
        process_cpu_seconds_per_million: Option<f64>,
        /// The server it reads from (capture) or writes to (apply).
        mariadb_cpu_seconds_per_million: Option<f64>,
    },
    Crash {
        peer: &'static str,
        killed: &'static str,
        source_rows: u64,
        target_rows: u64,
        identical: bool,
    },
}

/// The databases of one run: the bench table's on A and B (logstamp's copy), Debezium's copy
/// on B, and the relay tables' on A and B.
struct Names {
    data: String,
    debezium: String,
    state: String,
    /// logstamp's topics are this prefix followed by the data centre.
    topic_prefix: String,
    /// Debezium's topic for the bench table.
    debezium_topic: String,
}

impl Names {
    fn new() -> Names {
        let pid = std::process::id();
        let data = format!("logstamp_bench_{pid}");
        let debezium_prefix = format!("logstamp-bench-{pid}-debezium");
        Names {
            debezium: format!("{data}_debezium"),
            state: format!("{data}_relay"),
            topic_prefix: format!("logstamp-bench-{pid}-"),
            debezium_topic: format!("{debezium_prefix}.{data}.{TABLE}"),
            data,
        }
    }

    /// Every topic of the run: logstamp's of A and B, Debezium's.
    fn topics(&self) -> [String; 4] {
        [
            format!("{}a", self.topic_prefix),
            format!("{}b", self.topic_prefix),
            self.debezium_topic.clone(),
            self.marker_topic(),
        ]
    }

    /// Debezium's topic for the marker table (see [`Run::positions`]).
    fn marker_topic(&self) -> String {
        format!("{}.{}.{MARKER}", self.debezium_prefix(), self.data)
    }

    fn debezium_prefix(&self) -> &str {
        self.debezium_topic
            .split('.')
            .next()
            .unwrap_or(&self.debezium_topic)
    }
}

/// What the peer run needs besides the servers, checked before anything starts.
struct Tools {
    java: PathBuf,
    kafka_lib: PathBuf,
    debezium: PathBuf,
    brokers: String,
}

fn tools(args: &RelayArgs) -> anyhow::Result<Tools> {
    let peer = &args.peer;
    let brokers = args.brokers.clone().ok_or_else(|| {
        UsageError::new(
            "--brokers",
            "--peer debezium needs a Kafka broker: Kafka Connect cannot use the in-process mock",
        )
    })?;
    if args.replica.is_some() {
        return Err(UsageError::new("--replica", "is not used with --peer").into());
    }
    let kafka_lib = peer.kafka_lib.clone().ok_or_else(|| {
        UsageError::new(
            "--kafka-lib",
            "Apache Kafka's lib directory is needed (or LOGSTAMP_BENCH_KAFKA_LIB): \
             scripts/fetch-jars puts it in <target>/kafka-VERSION/lib",
        )
    })?;
    if !has_jar(&kafka_lib, "connect-runtime-") {
        return Err(UsageError::new(
            "--kafka-lib",
            format!(
                "no connect-runtime jar in {}: scripts/fetch-jars fetches Apache Kafka",
                kafka_lib.display()
            ),
        )
        .into());
    }
    let debezium = peer.debezium.clone().ok_or_else(|| {
        UsageError::new(
            "--debezium",
            "Debezium's connectors are needed (or LOGSTAMP_BENCH_DEBEZIUM): \
             scripts/fetch-jars puts them in <target>/debezium-VERSION",
        )
    })?;
    for connector in ["debezium-connector-mariadb-", "debezium-connector-jdbc-"] {
        if !has_jar(&debezium.join("plugin"), connector) {
            return Err(UsageError::new(
                "--debezium",
                format!(
                    "no {connector}*.jar in {}: scripts/fetch-jars fetches Debezium",
                    debezium.join("plugin").display()
                ),
            )
            .into());
        }
    }
    Ok(Tools {
        java: peer.java.clone(),
        kafka_lib,
        debezium,
        brokers,
    })
}

/// Whether `dir` holds a jar whose name starts with `prefix`.
fn has_jar(dir: &Path, prefix: &str) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.starts_with(prefix) && name.ends_with(".jar")
        })
    })
}

pub async fn bench(args: RelayArgs, settings: Settings) -> anyhow::Result<()> {
    if args.crash_seconds() == 0 {
        return Err(UsageError::new("--crash-seconds", "must be at least 1").into());
    }
    let tools = tools(&args)?;
    let names = Names::new();
    let flag = |text: &str, name: &str| {
        with_database(text, &names.data).map_err(|e| UsageError::new(name, e))
    };
    let source = flag(&args.source, "--source")?;
    let target = flag(&args.target, "--target")?;
    let mut a = server(&source).await.context("connecting to --source")?;
    let mut b = server(&target).await.context("connecting to --target")?;
    // The processes' settings, offsets and logs.
    let dir = std::env::temp_dir().join(format!("logstamp-bench-relay-{}", std::process::id()));
    fs::create_dir_all(&dir).context("making a directory for the bench's processes")?;
    let result = Run {
        args: &args,
        settings: &settings,
        tools: &tools,
        names: &names,
        dir: &dir,
        source: &source,
        target: &target,
    }
    .run(&mut a, &mut b)
    .await;
    for (conn, dbs) in [
        (&mut a, vec![&names.data, &names.state]),
        (&mut b, vec![&names.data, &names.state, &names.debezium]),
    ] {
        for db in dbs {
            conn.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
                .await?;
        }
    }
    match &result {
        // The processes' logs say why a part failed: keep them.
        Err(_) => eprintln!("the bench's process logs are kept in {}", dir.display()),
        Ok(()) => fs::remove_dir_all(&dir).context("removing the bench's directory")?,
    }
    for topic in names.topics() {
        // Left behind, a topic only takes space: the next run names its own.
        let _ = delete_topic(&tools.brokers, &topic).await;
    }
    result
}

impl RelayArgs {
    fn crash_seconds(&self) -> u64 {
        self.peer.crash_seconds
    }
}

/// One run's settings, for its phases.
struct Run<'a> {
    args: &'a RelayArgs,
    settings: &'a Settings,
    tools: &'a Tools,
    names: &'a Names,
    dir: &'a Path,
    source: &'a MysqlUrl,
    target: &'a MysqlUrl,
}

/// The four processes, each started when its phase needs it.
struct Sides {
    relay_a: Process,
    relay_b: Process,
    connect_source: Process,
    connect_sink: Process,
}

impl Run<'_> {
    async fn run(&self, a: &mut Conn, b: &mut Conn) -> anyhow::Result<()> {
        let names = self.names;
        for db in [&names.data, &names.state] {
            a.query_drop(format!("CREATE DATABASE `{db}`")).await?;
            b.query_drop(format!("CREATE DATABASE `{db}`")).await?;
        }
        b.query_drop(format!("CREATE DATABASE `{}`", names.debezium))
            .await?;
        a.query_drop(create_table(&names.data)).await?;
        a.query_drop(format!(
            "CREATE TABLE `{}`.`{MARKER}` (n BIGINT UNSIGNED PRIMARY KEY) ENGINE=InnoDB",
            names.data
        ))
        .await?;
        for db in [&names.data, &names.debezium] {
            b.query_drop(create_table(db)).await?;
            b.query_drop(stamp_trigger(db)).await?;
        }
        let known = migrate::builtin()?;
        for conn in [&mut *a, &mut *b] {
            conn.query_drop(format!("USE `{}`", names.state)).await?;
            migrate::apply(conn, &known).await?;
            conn.query_drop(format!("USE `{}`", names.data)).await?;
        }
        let servers = (
            pid_from_file(self.source).await,
            pid_from_file(self.target).await,
        );
        let mut sides = Sides {
            relay_a: self.relay("a", self.source, None)?,
            relay_b: self.relay("b", self.target, Some("a"))?,
            connect_source: self.connect("source", &self.source_connector()?)?,
            connect_sink: self.connect("sink", &self.sink_connector()?)?,
        };
        // One partition each, as capture requires (`relay reset` reads the topic's end).
        for topic in &names.topics()[..2] {
            create_topic(&self.tools.brokers, topic, 1).await?;
        }
        let mut out = Output::new();
        let ids = IdGenerator::new(self.settings.id.layout, 1)?;
        let backlog = self.args.changes;
        self.positions(a, &mut sides).await?;

        let started = Instant::now();
        write(a, &ids, self.args.changes, self.args.txn_size, None).await?;
        let seconds = started.elapsed().as_secs_f64();
        out.json(&Line::Write {
            changes: self.args.changes,
            seconds,
            changes_per_second: self.args.changes as f64 / seconds,
        })?;
        out.flush()?;
        self.throughput(a, b, &mut sides, servers, backlog, &ids, &mut out)
            .await?;

        // Lag: every process running, changes offered at a steady rate.
        let first: u64 = ids.next_id()?;
        let total = self.args.rate * self.args.seconds;
        let started = Instant::now();
        write(a, &ids, total, self.args.txn_size, Some(self.pace())).await?;
        let achieved = total as f64 / started.elapsed().as_secs_f64();
        let expected = backlog + total;
        for (db, path) in [(&names.data, "logstamp"), (&names.debezium, "debezium")] {
            self.settled(b, db, expected, &mut sides, WAIT_LIMIT)
                .await
                .with_context(|| format!("{path} did not apply the lag phase's changes"))?;
            let table = format!("`{db}`.`{TABLE}`");
            out.json(&lag(b, &table, path, first, self.args.rate, achieved).await?)?;
        }
        out.flush()?;

        self.crash(a, b, ids, &mut sides, &mut out).await?;
        for process in [
            &mut sides.relay_a,
            &mut sides.relay_b,
            &mut sides.connect_source,
            &mut sides.connect_sink,
        ] {
            process.stop().await?;
        }
        Ok(())
    }

    /// Places both captures before the backlog: logstamp's by `relay reset` (its stream starts
    /// at A's current position), Debezium's by streaming from A's current position
    /// (`snapshot.mode=no_data`, read when its task starts) until a row of the marker table,
    /// written every half second meanwhile, is in its topic, then stopping cleanly, which
    /// records its offset. The marker table is Debezium's only (logstamp does not relay it, and
    /// the sink does not read its topic), so both have the same backlog to capture.
    async fn positions(&self, a: &mut Conn, sides: &mut Sides) -> anyhow::Result<()> {
        self.reset_relay("a").await?;
        let names = self.names;
        let topic = Topic::new(&self.tools.brokers, &names.marker_topic())?;
        sides.connect_source.start()?;
        let deadline = Instant::now() + START_LIMIT;
        for n in 0u64.. {
            if topic.messages().unwrap_or(0) > 0 {
                break;
            }
            sides.connect_source.check_running()?;
            if Instant::now() > deadline {
                bail!("Debezium's source published nothing in {START_LIMIT:?}");
            }
            a.exec_drop(
                format!("INSERT INTO `{}`.`{MARKER}` VALUES (?)", names.data),
                (n,),
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        sides.connect_source.stop().await
    }

    /// Each part alone drains the backlog (`backlog` changes, the first row included).
    #[allow(clippy::too_many_arguments)]
    async fn throughput(
        &self,
        a: &mut Conn,
        b: &mut Conn,
        sides: &mut Sides,
        (server_a, server_b): (Option<u32>, Option<u32>),
        backlog: u64,
        ids: &IdGenerator,
        out: &mut Output,
    ) -> anyhow::Result<()> {
        let names = self.names;
        // Capture is timed by its topic on either side: the relay's checkpoint, recorded every
        // 100 ms, would start the clock late.
        let published = Topic::new(&self.tools.brokers, &format!("{}a", names.topic_prefix))?;
        let applied = progress_query(&names.state, "b", Some("a"));
        let topic = Topic::new(&self.tools.brokers, &names.debezium_topic)?;
        // The sink's progress without counting its table at every poll (which would load the
        // server it is measured on): none, some, or the backlog's last row in.
        let last = ids.next_id()?.saturating_sub(1);
        let sunk = format!(
            "SELECT CASE WHEN MAX(id) IS NULL THEN 0 WHEN MAX(id) >= {last} THEN {backlog} \
             ELSE 1 END FROM `{}`.`{TABLE}`",
            names.debezium
        );
        // Each part: its side, what it does, how its progress is read, its process, and
        // whether it works on A (capture) or B (apply).
        type Pick = fn(&mut Sides) -> &mut Process;
        let parts: [(&'static str, &'static str, Probe, Pick); 4] = [
            ("logstamp", "capture", Probe::Topic(published), |s| {
                &mut s.relay_a
            }),
            ("logstamp", "apply", Probe::Sql(applied), |s| &mut s.relay_b),
            ("debezium", "capture", Probe::Topic(topic), |s| {
                &mut s.connect_source
            }),
            ("debezium", "apply", Probe::Sql(sunk), |s| {
                &mut s.connect_sink
            }),
        ];
        for (peer, part, probe, pick) in parts {
            let (conn, server_pid) = match part {
                "capture" => (&mut *a, server_a),
                _ => (&mut *b, server_b),
            };
            let process = pick(sides);
            process.start()?;
            let window = timed(conn, &probe, backlog, process, server_pid).await?;
            let per_million = |cpu: Option<f64>| cpu.map(|c| c * 1e6 / window.changes as f64);
            out.json(&PeerLine::Throughput {
                peer,
                part,
                changes: window.changes,
                seconds: window.seconds,
                changes_per_second: window.changes as f64 / window.seconds,
                process_cpu_seconds_per_million: per_million(window.process_cpu),
                mariadb_cpu_seconds_per_million: per_million(window.server_cpu),
            })?;
            out.flush()?;
        }
        Ok(())
    }

    /// Changes offered at `--rate` for `--crash-seconds`; halfway, each side's capturing
    /// process is killed with SIGKILL and started again. Then each copy is compared with A.
    async fn crash(
        &self,
        a: &mut Conn,
        b: &mut Conn,
        ids: IdGenerator,
        sides: &mut Sides,
        out: &mut Output,
    ) -> anyhow::Result<()> {
        let mut writer = server(self.source).await?;
        writer
            .query_drop(format!("USE `{}`", self.names.data))
            .await?;
        let total = self.args.rate * self.args.crash_seconds();
        let (txn_size, pace) = (self.args.txn_size, self.pace());
        let writing = tokio::spawn(async move {
            write(&mut writer, &ids, total, txn_size, Some(pace)).await?;
            writer.disconnect().await?;
            anyhow::Ok(())
        });
        tokio::time::sleep(Duration::from_secs_f64(
            self.args.crash_seconds() as f64 / 2.0,
        ))
        .await;
        for process in [&mut sides.relay_a, &mut sides.connect_source] {
            process.kill()?;
            process.start()?;
        }
        writing.await.context("the writer of the SIGKILL phase")??;
        let source_sum = checksum(a, &self.names.data).await?;
        for (db, peer, killed) in [
            (&self.names.data, "logstamp", "relay of A (capture)"),
            (
                &self.names.debezium,
                "debezium",
                "Connect worker of the source",
            ),
        ] {
            // A copy that never catches up is reported as it is, not as a failed run.
            let _ = self.settled(b, db, source_sum.0, sides, SETTLE_LIMIT).await;
            let target_sum = checksum(b, db).await?;
            out.json(&PeerLine::Crash {
                peer,
                killed,
                source_rows: source_sum.0,
                target_rows: target_sum.0,
                identical: source_sum == target_sum,
            })?;
        }
        out.flush()?;
        Ok(())
    }

    /// Waits until B's copy in `database` holds `rows` rows, while every process runs.
    async fn settled(
        &self,
        b: &mut Conn,
        database: &str,
        rows: u64,
        sides: &mut Sides,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let got: Option<u64> = b
                .query_first(format!("SELECT COUNT(*) FROM `{database}`.`{TABLE}`"))
                .await?;
            if got.unwrap_or(0) >= rows {
                return Ok(());
            }
            for process in [
                &mut sides.relay_a,
                &mut sides.relay_b,
                &mut sides.connect_source,
                &mut sides.connect_sink,
            ] {
                process.check_running()?;
            }
            if Instant::now() > deadline {
                bail!("`{database}` has {got:?} of {rows} rows after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `logstamp relay reset` with the settings of [`Run::relay`] for `dc`.
    async fn reset_relay(&self, dc: &str) -> anyhow::Result<()> {
        let program = std::env::current_exe().context("finding this program")?;
        let mut child = Command::new(program)
            .arg("--config")
            .arg(self.relay_config(dc))
            .args(["relay", "reset"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running `relay reset`")?;
        let deadline = Instant::now() + STOP_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`relay reset` of {dc} took over {STOP_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if !status.success() {
            let mut text = String::new();
            if let Some(mut err) = child.stderr.take() {
                std::io::Read::read_to_string(&mut err, &mut text)?;
            }
            bail!("`relay reset` of {dc} failed ({status}): {text}");
        }
        Ok(())
    }

    fn relay_config(&self, dc: &str) -> PathBuf {
        self.dir.join(format!("relay-{dc}.toml"))
    }

    fn pace(&self) -> Duration {
        Duration::from_secs_f64(self.args.txn_size as f64 / self.args.rate as f64)
    }

    /// A `logstamp relay run` of this binary for data centre `dc` on `server`, applying the
    /// changes of `remote` if given, with the settings of the bench without a peer (a
    /// checkpoint every 100 ms, the marker loop filter) and the rest at their defaults.
    fn relay(&self, dc: &str, server: &MysqlUrl, remote: Option<&str>) -> anyhow::Result<Process> {
        let names = self.names;
        let url = with_database(server.expose(), &names.state).map_err(anyhow::Error::msg)?;
        let mut text = String::new();
        text.push_str(&format!(
            "[mysql]\nurl = {}\n[kafka]\nbrokers = {}\n[relay]\ndc = \"{dc}\"\n\
             server_id = {}\ntables = [\"{}.{TABLE}\"]\ntopic_prefix = \"{}\"\n\
             loop_filter = \"marker\"\ncheckpoint_interval = \"100ms\"\n\
             [telemetry]\nlisten = \"127.0.0.1:0\"\n",
            toml_string(url.expose()),
            toml_string(&self.tools.brokers),
            self.args.server_id + u32::from(remote.is_some()),
            names.data,
            names.topic_prefix,
        ));
        if let Some(remote) = remote {
            text.push_str(&format!("[[relay.remotes]]\ndc = \"{remote}\"\n"));
        }
        let config = self.relay_config(dc);
        fs::write(&config, text).context("writing a relay's settings")?;
        let program = std::env::current_exe().context("finding this program")?;
        Ok(Process::new(
            &format!("logstamp relay of {dc}"),
            program,
            vec![
                "--config".into(),
                config.into(),
                "relay".into(),
                "run".into(),
            ],
            self.dir.join(format!("relay-{dc}.log")),
        ))
    }

    /// A Kafka Connect standalone worker running the connector of `connector` (properties),
    /// started as Kafka's `connect-standalone.sh` starts one (its heap and GC settings), with
    /// Log4j's default configuration: errors only, on the worker's log.
    fn connect(&self, name: &str, connector: &str) -> anyhow::Result<Process> {
        let port = free_port()?;
        let worker = format!(
            "bootstrap.servers={}\n\
             key.converter=org.apache.kafka.connect.json.JsonConverter\n\
             value.converter=org.apache.kafka.connect.json.JsonConverter\n\
             offset.storage.file.filename={}\n\
             plugin.path={}\n\
             listeners=http://127.0.0.1:{port}\n",
            property(&self.tools.brokers),
            property(&self.dir.join(format!("{name}.offsets")).to_string_lossy()),
            property(&self.tools.debezium.to_string_lossy()),
        );
        let worker_file = self.dir.join(format!("{name}-worker.properties"));
        let connector_file = self.dir.join(format!("{name}.properties"));
        fs::write(&worker_file, worker).context("writing a Connect worker's properties")?;
        fs::write(&connector_file, connector).context("writing a connector's properties")?;
        let mut args: Vec<OsString> = CONNECT_JVM.iter().map(OsString::from).collect();
        args.push("-cp".into());
        args.push(self.tools.kafka_lib.join("*").into());
        args.push("org.apache.kafka.connect.cli.ConnectStandalone".into());
        args.push(worker_file.into());
        args.push(connector_file.into());
        Ok(Process::new(
            &format!("Kafka Connect ({name})"),
            self.tools.java.clone(),
            args,
            self.dir.join(format!("connect-{name}.log")),
        ))
    }

    /// Debezium's MariaDB connector on A, reading the bench table from A's current position
    /// on, its schema history in a file (standalone, as its offsets), everything else at its
    /// defaults.
    fn source_connector(&self) -> anyhow::Result<String> {
        let login = Login::of(self.source, "--source")?;
        let names = self.names;
        Ok(format!(
            "name=logstamp-bench-source\n\
             connector.class=io.debezium.connector.mariadb.MariaDbConnector\n\
             tasks.max=1\n\
             database.hostname={}\n\
             database.port={}\n\
             database.user={}\n\
             database.password={}\n\
             database.server.id={}\n\
             topic.prefix={}\n\
             database.include.list={}\n\
             table.include.list={}.{TABLE},{}.{MARKER}\n\
             snapshot.mode=no_data\n\
             include.schema.changes=false\n\
             schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory\n\
             schema.history.internal.file.filename={}\n\
             topic.creation.default.partitions=1\n\
             topic.creation.default.replication.factor=-1\n",
            property(&login.host),
            login.port,
            property(&login.user),
            property(&login.password),
            self.args.server_id + 2,
            names.debezium_prefix(),
            names.data,
            names.data,
            names.data,
            property(&self.dir.join("history.dat").to_string_lossy()),
        ))
    }

    /// Debezium's JDBC sink on B, upserting by the record's key into Debezium's copy of the
    /// table (made beforehand, as the relay needs it made), deletes applied.
    fn sink_connector(&self) -> anyhow::Result<String> {
        let login = Login::of(self.target, "--target")?;
        Ok(format!(
            "name=logstamp-bench-sink\n\
             connector.class=io.debezium.connector.jdbc.JdbcSinkConnector\n\
             tasks.max=1\n\
             topics={}\n\
             connection.url=jdbc:mariadb://{}:{}/{}\n\
             connection.username={}\n\
             connection.password={}\n\
             insert.mode=upsert\n\
             primary.key.mode=record_key\n\
             delete.enabled=true\n\
             schema.evolution=none\n\
             collection.name.format={TABLE}\n",
            property(&self.names.debezium_topic),
            property(&login.host),
            login.port,
            self.names.debezium,
            property(&login.user),
            property(&login.password),
        ))
    }
}

/// As Kafka's `kafka-run-class.sh` starts a worker of `connect-standalone.sh`, with warnings
/// in its log (without a log4j configuration only errors are printed, and a connector that
/// stalled retrying left an empty log).
const CONNECT_JVM: &[&str] = &[
    "-Dlog4j2.level=WARN",
    "-Xms256M",
    "-Xmx2G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];

/// A server's host, port, user and password (decoded), for a connector's properties.
struct Login {
    host: String,
    port: u16,
    user: String,
    password: String,
}

impl Login {
    fn of(url: &MysqlUrl, flag: &str) -> anyhow::Result<Login> {
        let opts = mysql_async::Opts::from_url(url.expose()).context(flag.to_string())?;
        Ok(Login {
            host: opts.ip_or_hostname().to_string(),
            port: opts.tcp_port(),
            user: opts.user().unwrap_or("root").to_string(),
            password: opts.pass().unwrap_or("").to_string(),
        })
    }
}

/// `value` as a Java properties value: backslashes and line ends escaped.
fn property(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// `value` as a TOML basic string.
fn toml_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port for Connect")?;
    Ok(listener.local_addr()?.port())
}

/// How far a part has got.
enum Probe {
    /// One number from the part's server.
    Sql(String),
    /// Messages in a topic.
    Topic(Topic),
}

/// A one-partition topic's message count, from its end offset.
struct Topic {
    consumer: BaseConsumer,
    name: String,
}

impl Topic {
    fn new(brokers: &str, name: &str) -> anyhow::Result<Topic> {
        let consumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .context("creating a Kafka consumer to watch Debezium's topic")?;
        Ok(Topic {
            consumer,
            name: name.to_string(),
        })
    }

    /// `None` while the topic does not exist (or Kafka does not answer in time).
    fn messages(&self) -> Option<u64> {
        let (low, high) = self
            .consumer
            .fetch_watermarks(&self.name, 0, Duration::from_secs(5))
            .ok()?;
        u64::try_from(high - low).ok()
    }
}

/// A timed part: what it did between its two polls, and the CPU spent meanwhile.
struct Window {
    changes: u64,
    seconds: f64,
    process_cpu: Option<f64>,
    server_cpu: Option<f64>,
}

/// Polls `probe` until it reaches `want`; the window starts at the last poll that saw it where
/// it started.
async fn timed(
    conn: &mut Conn,
    probe: &Probe,
    want: u64,
    process: &mut Process,
    server: Option<u32>,
) -> anyhow::Result<Window> {
    let read = async |conn: &mut Conn| -> anyhow::Result<u64> {
        Ok(match probe {
            Probe::Sql(query) => conn.query_first::<Option<u64>, _>(query).await?.flatten(),
            Probe::Topic(topic) => topic.messages(),
        }
        .unwrap_or(0))
    };
    let cpu = |process: &Process| {
        (
            process.pid().and_then(cpu_seconds),
            server.and_then(cpu_seconds),
        )
    };
    let base = read(conn).await?;
    let mut before = (Instant::now(), cpu(process));
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let got = read(conn).await?;
        let at = Instant::now();
        let now = cpu(process);
        if got >= want {
            let since = |now: Option<f64>, then: Option<f64>| Some(now? - then?);
            return Ok(Window {
                changes: want - base,
                seconds: (at - before.0).as_secs_f64(),
                process_cpu: since(now.0, before.1.0),
                server_cpu: since(now.1, before.1.1),
            });
        }
        if got <= base {
            before = (at, now);
        }
        process.check_running()?;
        if at > deadline {
            bail!("{} reached {got} of {want} in {WAIT_LIMIT:?}", process.name);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Rows of the bench table in `database` and a checksum of every column A wrote (not the
/// arrival time, which only copies have).
async fn checksum(conn: &mut Conn, database: &str) -> anyhow::Result<(u64, u64)> {
    let sum: Option<(u64, u64)> = conn
        .query_first(format!(
            "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS('|', id, service, payload, \
             created))), 0) FROM `{database}`.`{TABLE}`"
        ))
        .await?;
    sum.context("no checksum")
}

/// A child process the bench starts, stops, kills and starts again; killed when dropped.
struct Process {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    fn new(name: &str, program: PathBuf, args: Vec<OsString>, log: PathBuf) -> Process {
        Process {
            name: name.to_string(),
            program,
            args,
            log,
            child: None,
        }
    }

    fn command(&self) -> anyhow::Result<Command> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let mut command = Command::new(&self.program);
        // SAFETY: prctl(2) only, between fork and exec: the child is killed if the bench dies
        // without its Drop (a signal), rather than running on.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        command
            .args(&self.args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        Ok(command)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let child = self
            .command()?
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// An error naming the process and the end of its log if it has exited.
    fn check_running(&mut self) -> anyhow::Result<()> {
        let Some(child) = &mut self.child else {
            return Ok(());
        };
        if let Some(status) = child.try_wait()? {
            self.child = None;
            bail!("{} exited ({status}): {}", self.name, self.log_tail());
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGKILL, as a crash would: nothing is flushed.
    fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .with_context(|| format!("killing {}", self.name))?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, then waits for it to exit (killed after `STOP_LIMIT`).
    async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = libc::pid_t::try_from(child.id()).context("a process id")?;
        // SAFETY: kill(2) with the pid of our own child and a valid signal number.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_LIMIT;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{} did not stop within {STOP_LIMIT:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
