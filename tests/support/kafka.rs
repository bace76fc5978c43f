//! Apache Kafka itself, as processes of their own: one KRaft node (broker and controller in one
//! JVM), or a cluster of three where a test needs leaders to move. Each node has its own ports
//! and log directory under the build's scratch directory, and is killed by PID when the test
//! ends, also when it fails.
//!
//! The broker is the version pinned in `tests/kafka/pom.xml`; `scripts/test` copies its jars
//! into `<target>/kafka-<version>/lib` once (`LOGSTAMP_TEST_KAFKA_LIB` names another directory).
//! A missing broker or Java fails the test loudly.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;

use super::SET_UP;
use super::mariadb::free_port;

/// How long a node may take to start: a JVM and a KRaft quorum, on a loaded two-core machine.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The line a node logs once its broker accepts clients.
const STARTED: &str = "Kafka Server started";

/// The Apache Kafka version of `tests/kafka/pom.xml`.
pub fn version() -> &'static str {
    const POM: &str = include_str!("../kafka/pom.xml");
    POM.split("<kafka.version>")
        .nth(1)
        .and_then(|rest| rest.split("</kafka.version>").next())
        .expect("tests/kafka/pom.xml names <kafka.version>")
}

/// The broker's jars, as `scripts/test` leaves them.
pub fn lib_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("LOGSTAMP_TEST_KAFKA_LIB") {
        return PathBuf::from(dir);
    }
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the build directory")
        .to_path_buf();
    target.join(format!("kafka-{}", version())).join("lib")
}

/// One node of a cluster. Its process sits behind a lock so a test can stop and start nodes
/// of a cluster it shares with running workers.
struct Node {
    id: usize,
    port: u16,
    controller_port: u16,
    child: Mutex<Option<Child>>,
}

/// A running cluster; every node is killed when it is dropped.
pub struct Kafka {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
    classes: Classes,
}

/// Where a node's JVM takes Kafka's classes from.
enum Classes {
    /// The jars, and on exit it writes what it loaded to this archive (see [`class_archive`]).
    MakeArchive(PathBuf),
    /// This archive, made by an earlier node.
    Archive(PathBuf),
    /// The jars alone, when no archive could be made.
    Jars,
}

impl Kafka {
    /// One node, broker and controller.
    pub fn start() -> Kafka {
        Kafka::cluster(1)
    }

    /// One node shared by every test of this test binary that calls it: a node takes seconds of
    /// CPU to start, and tests that only need topics of their own (named apart) can share it.
    /// A test that stops, kills or pauses a node starts its own. The node is killed when the
    /// test binary exits (statics are never dropped).
    pub fn shared() -> &'static Kafka {
        static SHARED: OnceLock<Kafka> = OnceLock::new();
        extern "C" fn kill_shared() {
            if let Some(kafka) = SHARED.get() {
                kafka.kill_all();
                // Nor is its directory removed by a drop.
                let _ = fs::remove_dir_all(kafka.dir.path());
            }
        }
        SHARED.get_or_init(|| {
            let kafka = Kafka::start();
            // SAFETY: registers a function without arguments, run once as the process exits.
            let registered = unsafe { libc::atexit(kill_shared) };
            assert_eq!(registered, 0, "registering the shared Kafka node's end");
            kafka
        })
    }

    /// `size` nodes, each broker and controller, all voters of one KRaft quorum. Internal
    /// topics are replicated to up to three of them.
    pub fn cluster(size: usize) -> Kafka {
        let lib = lib_dir();
        assert!(
            lib.join(format!("kafka_2.13-{}.jar", version())).is_file(),
            "these tests need Apache Kafka {} in {}; {SET_UP}",
            version(),
            lib.display()
        );
        let classes = match class_archive() {
            Some(archive) => Classes::Archive(archive),
            None => Classes::Jars,
        };
        let kafka = Kafka::unstarted(size, classes);
        let cluster_id = random_cluster_id();
        for index in 0..size {
            kafka.format(index, &cluster_id);
        }
        // A quorum needs a majority of its voters: start them all, then wait for each.
        for index in 0..size {
            kafka.launch(index);
        }
        for index in 0..size {
            kafka.wait_started(index, 0);
        }
        kafka
    }

    /// `size` nodes with their ports and directories, none formatted or started.
    fn unstarted(size: usize, classes: Classes) -> Kafka {
        let dir = tempfile::Builder::new()
            .prefix("kafka-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("creating a cluster directory");
        let nodes: Vec<Node> = (1..=size)
            .map(|id| Node {
                id,
                port: free_port(),
                controller_port: free_port(),
                child: Mutex::new(None),
            })
            .collect();
        let kafka = Kafka {
            nodes,
            dir,
            classes,
        };
        for index in 0..size {
            kafka.write_properties(index);
        }
        kafka
    }

    /// `host:port` of every node, for `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the node whose broker ID is `id`.
    pub fn index_of(&self, id: i32) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id as i32 == id)
            .unwrap_or_else(|| panic!("no node with broker ID {id}"))
    }

    /// Creates `name` with `partitions` partitions, replicated to up to three nodes.
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        self.create_topic_with(name, partitions, &[]).await;
    }

    /// [`Kafka::create_topic`] with topic settings, for example `("cleanup.policy", "compact")`.
    pub async fn create_topic_with(&self, name: &str, partitions: i32, settings: &[(&str, &str)]) {
        let replicas = self.nodes.len().min(3) as i32;
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(replicas));
        for (key, value) in settings {
            topic = topic.set(key, value);
        }
        let results = self
            .admin()
            .create_topics(&[topic], &admin_options())
            .await
            .unwrap_or_else(|e| panic!("creating topic {name}: {e}"));
        for result in results {
            result.unwrap_or_else(|(topic, e)| panic!("creating topic {topic}: {e}"));
        }
    }

    /// Sets `name`'s topic settings to `settings`; those not given go back to the broker's
    /// defaults (AlterConfigs replaces them all).
    pub async fn set_topic_settings(&self, name: &str, settings: &[(&str, &str)]) {
        let mut config = AlterConfig::new(ResourceSpecifier::Topic(name));
        for (key, value) in settings {
            config = config.set(key, value);
        }
        let results = self
            .admin()
            .alter_configs(&[config], &admin_options())
            .await
            .unwrap_or_else(|e| panic!("setting {name}'s settings: {e}"));
        for result in results {
            result.unwrap_or_else(|(resource, e)| panic!("setting {resource:?}'s settings: {e}"));
        }
    }

    /// The broker ID of the leader of `topic`'s `partition`, as the cluster's metadata says.
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let client: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers())
            .create()
            .expect("a metadata client");
        let metadata = client
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("reading {topic}'s metadata: {e}"));
        metadata.topics()[0]
            .partitions()
            .iter()
            .find(|p| p.id() == partition)
            .unwrap_or_else(|| panic!("no partition {partition} of {topic}"))
            .leader()
    }

    /// `(log start, end)` offsets of `topic`'s `partition`.
    pub fn watermarks(&self, topic: &str, partition: i32) -> (i64, i64) {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let client: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers())
            .create()
            .expect("a metadata client");
        client
            .fetch_watermarks(topic, partition, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("reading {topic}/{partition}'s offsets: {e}"))
    }

    /// Each group's type as Apache Kafka's own `kafka-groups.sh --list` prints it ("Classic"
    /// or "Consumer"), by group name.
    pub fn group_types(&self) -> std::collections::BTreeMap<String, String> {
        let output = self
            .java(0)
            .arg("org.apache.kafka.tools.GroupsCommand")
            .args(["--bootstrap-server", &self.bootstrap_servers(), "--list"])
            .output()
            .expect("running kafka-groups");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "kafka-groups: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // GROUP  TYPE  PROTOCOL, after a header line.
        text.lines()
            .skip(1)
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                Some((words.next()?.to_string(), words.next()?.to_string()))
            })
            .collect()
    }

    /// An admin client of this cluster.
    pub fn admin(&self) -> AdminClient<DefaultClientContext> {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers())
            .create()
            .expect("an admin client")
    }

    /// Stops node `index` as an operator would (SIGTERM: a controlled shutdown that hands its
    /// partitions' leadership to the others), waiting until it has exited.
    pub fn stop(&self, index: usize) {
        let mut child = self.child(index).take().expect("a running node");
        signal(child.id(), "TERM");
        let deadline = Instant::now() + READY_WITHIN;
        while child.try_wait().expect("waiting for a node").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("node {index} did not stop: {}", self.log(index));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills node `index` with SIGKILL, as a crash would.
    pub fn kill(&self, index: usize) {
        let mut child = self.child(index).take().expect("a running node");
        child.kill().expect("killing a node");
        child.wait().expect("waiting for a node");
    }

    /// Starts a stopped node again on the same log directory and ports, and waits until its
    /// broker accepts clients again.
    pub fn restart(&self, index: usize) {
        assert!(self.child(index).is_none(), "node {index} is running");
        let from = self.log(index).len();
        self.launch(index);
        self.wait_started(index, from);
    }

    /// SIGSTOP: the node hangs, its connections stay open, nothing answers.
    pub fn pause(&self, index: usize) {
        signal(self.pid(index), "STOP");
    }

    /// SIGCONT after [`Kafka::pause`].
    pub fn resume(&self, index: usize) {
        signal(self.pid(index), "CONT");
    }

    fn pid(&self, index: usize) -> u32 {
        self.child(index).as_ref().expect("a running node").id()
    }

    fn child(&self, index: usize) -> MutexGuard<'_, Option<Child>> {
        // A test that failed while holding the lock left the process as it was.
        self.nodes[index]
            .child
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Node `index`'s log, for failure messages.
    pub fn log(&self, index: usize) -> String {
        fs::read_to_string(self.node_dir(index).join("server.log")).unwrap_or_default()
    }

    fn node_dir(&self, index: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("node-{}", self.nodes[index].id))
    }

    fn write_properties(&self, index: usize) {
        let node = &self.nodes[index];
        let dir = self.node_dir(index);
        fs::create_dir_all(&dir).expect("creating a node directory");
        let voters = self
            .nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
            .collect::<Vec<_>>()
            .join(",");
        let replicas = self.nodes.len().min(3);
        let properties = format!(
            "process.roles=broker,controller\n\
             node.id={id}\n\
             controller.quorum.voters={voters}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={data}\n\
             {TEST_SETTINGS}\
             offsets.topic.replication.factor={replicas}\n\
             transaction.state.log.replication.factor={replicas}\n\
             default.replication.factor={replicas}\n",
            id = node.id,
            port = node.port,
            controller = node.controller_port,
            data = dir.join("data").display(),
        );
        fs::write(dir.join("server.properties"), properties).expect("writing server.properties");
        fs::write(dir.join("log4j2.properties"), LOG4J).expect("writing log4j2.properties");
    }

    /// `kafka-storage format`: a KRaft node's log directory must be formatted with the
    /// cluster's ID before its first start.
    fn format(&self, index: usize, cluster_id: &str) {
        let dir = self.node_dir(index);
        let output = self
            .java(index)
            .arg("kafka.tools.StorageTool")
            // Joined with `=`: an ID may start with '-', which would read as an option.
            .args([
                "format",
                "--ignore-formatted",
                &format!("--cluster-id={cluster_id}"),
            ])
            .arg("--config")
            .arg(dir.join("server.properties"))
            .output()
            .unwrap_or_else(|e| panic!("these tests need Java 17 or later: {e}; {SET_UP}"));
        assert!(
            output.status.success(),
            "formatting node {index}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn launch(&self, index: usize) {
        let dir = self.node_dir(index);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .expect("opening a node's log");
        let mut java = self.java(index);
        if let Classes::MakeArchive(archive) = &self.classes {
            java.arg(format!("-XX:ArchiveClassesAtExit={}", archive.display()));
        }
        let child = java
            .args(JVM_HEAP)
            .arg("kafka.Kafka")
            .arg(dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("opening a node's log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("these tests need Java 17 or later: {e}; {SET_UP}"));
        *self.child(index) = Some(child);
    }

    /// `java` with the broker's class path and logging, for node `index`.
    fn java(&self, index: usize) -> Command {
        let mut command = Command::new(java());
        command
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.node_dir(index).join("log4j2.properties").display()
            ))
            // Only the quick first compiler: a test node's traffic is small, and its start,
            // which the suite pays for every node, then costs about 3.5 s of CPU, not 6.3.
            .arg("-XX:TieredStopAtLevel=1");
        if let Classes::Archive(archive) = &self.classes {
            command.arg(format!("-XX:SharedArchiveFile={}", archive.display()));
        }
        command.arg("-cp").arg(lib_dir().join("*"));
        command
    }

    /// Waits until node `index` logged, past byte `from` of its log, that it accepts clients.
    fn wait_started(&self, index: usize, from: usize) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let log = self.log(index);
            if log.get(from..).is_some_and(|new| new.contains(STARTED)) {
                return;
            }
            let exited = self
                .child(index)
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!("Kafka node {index} exited ({status}): {log}");
            }
            assert!(
                Instant::now() < deadline,
                "Kafka node {index} did not start within {READY_WITHIN:?}: {log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Kafka {
    fn kill_all(&self) {
        for index in 0..self.nodes.len() {
            if let Some(child) = self.child(index).as_mut() {
                // A paused node would not die of SIGTERM; SIGKILL ends it either way.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Settings that keep a test cluster quick and small, each unlike a production default:
/// - a new group's first rebalance does not wait 3 s for more members;
/// - the classic protocol takes the short sessions the tests ask for (the broker's minimum is
///   6 s), and KIP-848 groups use short sessions and heartbeats set here, on the broker, where
///   that protocol keeps them;
/// - the internal topics have a few partitions, not 50 each, created at the first group's join;
/// - retention and compaction are checked every second, for the tests of what they remove;
/// - few threads: a test machine runs several nodes beside the tests.
const TEST_SETTINGS: &str = "group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=6000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=500
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
transaction.state.log.min.isr=1
log.retention.check.interval.ms=1000
log.cleaner.backoff.ms=1000
log.segment.delete.delay.ms=0
file.delete.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.cleaner.threads=1
";

/// Heap for one node: enough for the tests' traffic, small enough for three nodes beside them.
const JVM_HEAP: &[&str] = &["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC"];

/// Warnings only, but the lines that say a broker started, for `wait_started`.
const LOG4J: &str = "status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
";

/// The `java` to run: `$JAVA_HOME/bin/java` when set, else the PATH's.
fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin").join("java"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("java"))
}

/// The classes a started node loaded, as the JVM archives them (AppCDS), beside the jars: a
/// node that maps them from the archive starts on about 2.2 s of CPU instead of 3.5 (6.3 with
/// the default compilers), and formatting its directory on 0.8 s instead of 2. Made once per
/// set of jars, by a node started for it and stopped with SIGTERM (the JVM writes the archive
/// as it exits); a JVM that finds the archive does not match its jars ignores it.
fn class_archive() -> Option<PathBuf> {
    static ARCHIVE: OnceLock<Option<PathBuf>> = OnceLock::new();
    ARCHIVE
        .get_or_init(|| {
            let archive = lib_dir().with_file_name("classes.jsa");
            if !archive.is_file() {
                make_class_archive(&archive);
            }
            archive.is_file().then_some(archive)
        })
        .clone()
}

/// Starts and stops a node that writes `archive`. Written under a name of this process's
/// first, so a test binary of another build reading the same jars never maps half a file.
fn make_class_archive(archive: &Path) {
    let partial = archive.with_extension(format!("jsa.{}", std::process::id()));
    let kafka = Kafka::unstarted(1, Classes::MakeArchive(partial.clone()));
    kafka.format(0, &random_cluster_id());
    kafka.launch(0);
    kafka.wait_started(0, 0);
    kafka.stop(0);
    if let Err(e) = fs::rename(&partial, archive) {
        eprintln!(
            "no class archive for Kafka's nodes ({e}); they start from the jars: {}",
            kafka.log(0)
        );
    }
}

/// A KRaft cluster ID: 16 random bytes in URL-safe base64 without padding, as
/// `kafka-storage random-uuid` prints.
fn random_cluster_id() -> String {
    use base64::Engine;
    let bytes: [u8; 16] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -{name} {pid}");
}

fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)))
}
