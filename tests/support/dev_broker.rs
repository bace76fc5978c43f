//! `logstamp dev-broker` as a child process, killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct DevBroker {
    child: Option<Child>,
    /// The address it printed.
    pub address: String,
}

impl DevBroker {
    /// Starts it with `args`; returns once it printed its address.
    pub fn start(args: &[&str]) -> DevBroker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .env_clear()
            .arg("dev-broker")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let printed: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("first line {line:?} is not JSON: {e}"));
        let address = printed["bootstrap_servers"].as_str().unwrap().to_string();
        DevBroker {
            child: Some(child),
            address,
        }
    }

    /// SIGTERM, then the exit status within 30 s.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("dev-broker did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for DevBroker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
