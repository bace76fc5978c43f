//! Scraping a process's telemetry endpoints over plain HTTP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A GET over plain HTTP: the status code and the body.
pub fn get(address: &str, path: &str) -> (u16, String) {
    get_with(address, path, "")
}

/// A GET with extra header lines (each ending in `\r\n`). HTTP/1.0, so a streamed body is not
/// chunked and is simply read to its end.
pub fn get_with(address: &str, path: &str, headers: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // A server may answer before the request is all sent (a request too large, refused) and
    // close: the write then fails with a broken pipe, and its answer is still there to read.
    let sent = write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {address}\r\n{headers}\r\n"
    );
    if let Err(e) = sent {
        assert!(early_close(&e), "sending GET {path}: {e}");
    }
    let mut response = Vec::new();
    if let Err(e) = stream.read_to_end(&mut response) {
        assert!(early_close(&e), "reading GET {path}: {e}");
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Whether an I/O error is the server having closed the connection (what follows an answer
/// sent before the whole request was read).
fn early_close(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// The value of the sample named exactly `name` (labels included), or `None`.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (sample, value) = line.rsplit_once(' ')?;
        (sample == name).then(|| value.parse().ok())?
    })
}

/// Polls `path` until `done` holds for the response, within `within`.
pub async fn poll(
    address: &str,
    path: &str,
    within: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = Instant::now() + within;
    loop {
        let (a, p) = (address.to_string(), path.to_string());
        let (status, body) = tokio::task::spawn_blocking(move || get(&a, &p))
            .await
            .unwrap();
        if done(status, &body) {
            return (status, body);
        }
        assert!(
            Instant::now() < deadline,
            "{path} not as expected after {within:?}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `/health/ready` until it answers `status`; returns the body.
pub async fn readiness_becomes(address: &str, status: u16) -> String {
    let within = Duration::from_secs(30);
    poll(address, "/health/ready", within, |got, _| got == status)
        .await
        .1
}

/// The address in the last "serving /metrics" line of a process's (text) log, if any.
pub fn served_address(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .find(|l| l.contains("serving /metrics"))
        .and_then(|l| l.split("address=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
}
