//! Private MariaDB servers for tests that need a binary log or must stop and start a server:
//! each has its own data directory (a copy of a template made once), port, socket and
//! server_id, and is killed when dropped, also when the test fails. A missing MariaDB
//! installation fails the test loudly.
//!
//! `LOGSTAMP_TEST_MARIADBD` and `LOGSTAMP_TEST_MARIADB_INSTALL_DB` name the server and
//! install programs if they are not on the PATH (or in /usr/sbin, /usr/bin).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::SET_UP;

/// Settings every private server gets: small memory, no fsync per commit (these servers hold
/// test data only), and the binlog the relay needs.
const BASE_ARGS: &[&str] = &[
    "--bind-address=127.0.0.1",
    "--skip-name-resolve",
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--max-connections=200",
    "--log-bin=mariadb-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
];

const READY_WITHIN: Duration = Duration::from_secs(60);

/// A running private server.
pub struct MariaDb {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub port: u16,
    pub server_id: u32,
    args: Vec<String>,
}

impl MariaDb {
    /// Starts a server with `server_id` and the base settings, then `extra` (later settings
    /// win, so `extra` can change a base one), and waits until it accepts connections.
    pub async fn start(server_id: u32, extra: &[&str]) -> MariaDb {
        let template = template();
        let dir = tempfile::Builder::new()
            .prefix("mariadb-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("creating a server directory");
        copy_dir(template, &dir.path().join("data"));
        let port = free_port();
        let mut args: Vec<String> = BASE_ARGS.iter().map(|a| a.to_string()).collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut server = MariaDb {
            child: None,
            dir,
            port,
            server_id,
            args,
        };
        server.launch().await;
        server
    }

    /// `mysql://root@127.0.0.1:PORT/database`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    pub async fn conn(&self) -> mysql_async::Conn {
        mysql_async::Conn::from_url(self.url(""))
            .await
            .unwrap_or_else(|e| panic!("connecting to the server on port {}: {e}", self.port))
    }

    /// Stops the server cleanly and waits for it to exit.
    pub async fn stop(&mut self) {
        let mut conn = self.conn().await;
        // The server closes the connection as it goes down.
        let _ = conn.query_drop("SHUTDOWN").await;
        drop(conn);
        let deadline = Instant::now() + READY_WITHIN;
        if let Some(child) = &mut self.child {
            while child.try_wait().expect("waiting for the server").is_none() {
                assert!(
                    Instant::now() < deadline,
                    "the server did not stop: {}",
                    self.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.child = None;
    }

    /// Kills the server with SIGKILL, as a crash would: nothing is flushed.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("a running server");
        child.kill().expect("killing the server");
        child.wait().expect("waiting for the server");
    }

    /// Stops the server with SIGSTOP, as a hung server: its connections stay open and
    /// nothing answers. [`MariaDb::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let sent = Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .expect("running kill");
        assert!(sent.success(), "kill -{name} {pid}");
    }

    /// Makes this server a GTID replica of `primary` (`MASTER_USE_GTID=slave_pos`) and starts
    /// replicating.
    pub async fn replicate_from(&self, primary: &MariaDb) {
        let mut conn = self.conn().await;
        for statement in [
            format!(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
                 MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
                primary.port
            ),
            "START SLAVE".to_string(),
        ] {
            conn.query_drop(&statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    /// The server's `@@gtid_binlog_pos`.
    pub async fn gtid_binlog_pos(&self) -> String {
        let mut conn = self.conn().await;
        let pos: Option<String> = conn
            .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
            .await
            .unwrap();
        pos.unwrap_or_default()
    }

    /// Waits until this replica applied everything up to `gtid_pos` (`MASTER_GTID_WAIT`).
    pub async fn wait_replicated(&self, gtid_pos: &str) {
        let mut conn = self.conn().await;
        let reached: Option<i32> = conn
            .exec_first(
                "SELECT MASTER_GTID_WAIT(?, ?)",
                (gtid_pos, READY_WITHIN.as_secs()),
            )
            .await
            .unwrap();
        assert_eq!(
            reached,
            Some(0),
            "the replica on port {} did not reach {gtid_pos}: {}",
            self.port,
            self.log()
        );
    }

    /// Stops replicating and forgets the primary: this server is a primary now.
    pub async fn promote(&self) {
        let mut conn = self.conn().await;
        for statement in ["STOP SLAVE", "RESET SLAVE ALL"] {
            conn.query_drop(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    /// Starts a stopped server again on the same data and port.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        self.launch().await;
    }

    /// The server's error log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    async fn launch(&mut self) {
        let dir = self.dir.path();
        let child = Command::new(program("LOGSTAMP_TEST_MARIADBD", "mariadbd"))
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("s.sock").display()))
            // A server removes every `#sql*` file in its tmpdir when it starts: in the shared
            // /tmp that is the live temporary tables of the other servers, which then fail
            // with error 6 ("Error on delete of '/tmp/#sql-temptable-...'").
            .arg(format!("--tmpdir={}", dir.display()))
            .arg(format!("--pid-file={}", dir.join("server.pid").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--server-id={}", self.server_id))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("these tests need MariaDB's mariadbd: {e}; {SET_UP}"));
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("mariadbd exited ({status}): {}", self.log());
            }
            if let Ok(conn) = mysql_async::Conn::from_url(self.url("")).await {
                let _ = conn.disconnect().await;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd did not accept connections: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // The data is thrown away: no need for a clean shutdown.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port nobody listens on now, picked at random below Linux's ephemeral range (32768 and up
/// by default). The port the kernel would pick for `bind(0)` comes from that range, where it is
/// also the next client connection's source port: a server started a moment later then finds it
/// taken ("Address already in use"), as happened to Kafka nodes while other tests connected.
pub fn free_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let port = rng.random_range(20_000..32_000);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000 after 1000 tries");
}

/// The installed program, from its environment variable, the PATH or the usual places.
fn program(variable: &str, name: &str) -> PathBuf {
    if let Ok(path) = std::env::var(variable) {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("these tests need MariaDB's {name} (or {variable}); {SET_UP}"))
}

/// A freshly installed data directory, copied for each server. It is kept under the build's
/// scratch directory, one per MariaDB version, so later test runs skip the install.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let server = program("LOGSTAMP_TEST_MARIADBD", "mariadbd");
        let version = Command::new(&server)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("these tests need MariaDB's mariadbd: {e}; {SET_UP}"));
        // "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for ...": the word after "Ver".
        let text = String::from_utf8_lossy(&version.stdout).to_string();
        let version: String = text
            .split_whitespace()
            .skip_while(|w| *w != "Ver")
            .nth(1)
            .unwrap_or("unknown")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = scratch.join(format!("mariadb-template-{version}"));
        if dir.is_dir() {
            return dir;
        }
        // Installed aside and renamed into place, so a concurrent test process never copies a
        // half-made template.
        let building = scratch.join(format!("mariadb-template-building-{}", std::process::id()));
        let _ = fs::remove_dir_all(&building);
        let output = Command::new(program(
            "LOGSTAMP_TEST_MARIADB_INSTALL_DB",
            "mariadb-install-db",
        ))
        .arg("--no-defaults")
        .arg("--user=root")
        .arg(format!("--datadir={}", building.display()))
        // Its bootstrap server would clear the shared /tmp too (see `launch`).
        .arg(format!("--tmpdir={}", scratch.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg("--innodb-log-file-size=8M")
        .output()
        .unwrap_or_else(|e| panic!("these tests need MariaDB's mariadb-install-db: {e}; {SET_UP}"));
        assert!(
            output.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        if fs::rename(&building, &dir).is_err() {
            // Another process got there first.
            let _ = fs::remove_dir_all(&building);
        }
        dir
    })
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("creating a data directory");
    for entry in fs::read_dir(from).expect("reading the template") {
        let entry = entry.expect("reading the template");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("reading the template").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copying the template");
        }
    }
}
