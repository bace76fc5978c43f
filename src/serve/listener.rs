//! The server's connections, whose requests hyper could not read answered in JSON too.
//!
//! hyper refuses some requests before any route sees them: a request target over 65,534 bytes
//! (414; `http::Uri` holds no more), a request head over its read buffer (431), a head that is
//! not HTTP/1 (400). It answers those itself, with an empty body, and closes the connection.
//! The README promises that every answer is JSON, so each connection's writes are watched: a
//! response head with a 4xx status and no `content-type` can only be hyper's own (every answer
//! of the API and the page names its type), and it is replaced by the same status with a JSON
//! error naming the limit.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::request::ApiError;

/// The longest request target hyper reads (`hyper::proto::h1::role::MAX_URI_LEN`).
pub const MAX_URL_BYTES: usize = 65_534;
/// The longest request head hyper reads (its default `max_buf_size`, 8 KiB + 400 × 4 KiB).
pub const MAX_HEAD_BYTES: usize = 8_192 + 4_096 * 100;

/// A listener whose connections answer hyper's refusals in JSON.
pub struct JsonListener(pub TcpListener);

impl Listener for JsonListener {
    type Io = Connection;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Connection, Self::Addr) {
        let (stream, address) = Listener::accept(&mut self.0).await;
        let connection = Connection {
            stream,
            replacement: None,
        };
        (connection, address)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection that rewrites hyper's own error answers (see the module).
pub struct Connection {
    stream: TcpStream,
    /// A JSON answer being written in place of hyper's: its bytes, how many went out, and how
    /// many of hyper's bytes it stands for.
    replacement: Option<Replacement>,
}

struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    replaces: usize,
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacement.is_none() {
            this.replacement = refusal(buf);
        }
        let Some(replacement) = this.replacement.as_mut() else {
            return Pin::new(&mut this.stream).poll_write(cx, buf);
        };
        while replacement.written < replacement.bytes.len() {
            let rest = &replacement.bytes[replacement.written..];
            let n = ready!(Pin::new(&mut this.stream).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            replacement.written += n;
        }
        let replaced = replacement.replaces;
        this.replacement = None;
        Poll::Ready(Ok(replaced))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    // Not vectored, so hyper writes each response head at the start of one buffer, where
    // `refusal` looks for it.
}

/// The JSON answer standing for hyper's own refusal at the start of `written`, if it is one.
fn refusal(written: &[u8]) -> Option<Replacement> {
    if !written.starts_with(b"HTTP/1.") {
        return None;
    }
    let head_end = written.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&written[..head_end]).ok()?;
    let status_line = head.lines().next()?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    let status: u16 = parts.next()?.parse().ok()?;
    let typed = head
        .lines()
        .any(|line| line.to_ascii_lowercase().starts_with("content-type:"));
    if !(400..500).contains(&status) || typed {
        return None;
    }
    let message = match status {
        414 => format!(
            "the request's URL is longer than {MAX_URL_BYTES} bytes, the most this server reads; \
             narrow the filter"
        ),
        431 => format!(
            "the request's head is longer than {MAX_HEAD_BYTES} bytes, the most this server reads"
        ),
        _ => "the request is not HTTP/1 this server can read".to_string(),
    };
    let body = ApiError::Unreadable { status, message }.body().to_string();
    let reason = parts.next().unwrap_or_default();
    let bytes = format!(
        "{version} {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    Some(Replacement {
        bytes,
        written: 0,
        replaces: head_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(written: &str) -> Option<serde_json::Value> {
        let replacement = refusal(written.as_bytes())?;
        assert_eq!(replacement.replaces, written.find("\r\n\r\n").unwrap() + 4);
        let text = String::from_utf8(replacement.bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        Some(serde_json::from_str(body).unwrap())
    }

    #[test]
    fn hyper_refusals_become_json_errors_naming_the_limit() {
        let long =
            answer("HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n").unwrap();
        assert_eq!(long["error"]["status"], 414);
        let message = long["error"]["message"].as_str().unwrap();
        assert!(message.contains("65534 bytes"), "{message}");
        let head = answer("HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n").unwrap();
        assert_eq!(head["error"]["status"], 431);
        assert_eq!(
            answer("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").unwrap()["error"]["status"],
            400
        );
    }

    #[test]
    fn the_servers_own_answers_pass_unchanged() {
        // The API's errors and the page name their type; successes and 5xx are never hyper's.
        assert!(
            answer("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\r\n{}")
                .is_none()
        );
        assert!(answer("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(answer("HTTP/1.1 503 Service Unavailable\r\n\r\n").is_none());
        // A body chunk, not a head.
        assert!(answer("{\"rows\":[]}\r\n\r\n").is_none());
        assert!(answer("HTTP/1.1 414 URI Too Long\r\n").is_none());
    }
}
