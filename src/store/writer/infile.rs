//! `LOAD DATA LOCAL INFILE` from memory. Each load registers its data under a fresh name and
//! names it in the statement; the connection's handler serves only registered data, once, so a
//! server can never make the client read a file.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use mysql_async::prelude::GlobalHandler;
use mysql_async::{InfileData, LocalInfileError};

/// Data is sent in parts of at most this size, and within the statement budget (below
/// `max_allowed_packet`): the driver sends each part as one protocol packet.
const PART_BYTES: usize = 1 << 20;

#[derive(Debug, Default)]
pub(super) struct InfileServer {
    next: AtomicU64,
    /// Each load's data with its part size.
    pending: Mutex<HashMap<String, (Bytes, usize)>>,
}

/// A registration, withdrawn when dropped (the statement finished, failed or was cancelled).
pub(super) struct Ticket<'a> {
    server: &'a InfileServer,
    name: String,
}

impl Ticket<'_> {
    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.server.take(&self.name);
    }
}

impl InfileServer {
    /// Registers `data`, to be sent in parts of at most `budget` bytes.
    pub(super) fn register(&self, data: Bytes, budget: usize) -> Ticket<'_> {
        let name = format!(
            "logstamp-infile-{}-{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let part = PART_BYTES.min(budget).max(1);
        self.pending_map().insert(name.clone(), (data, part));
        Ticket { server: self, name }
    }

    fn take(&self, name: &str) -> Option<(Bytes, usize)> {
        self.pending_map().remove(name)
    }

    /// The map stays consistent whatever panicked while holding the lock (inserts and removes
    /// are single operations), so a poisoned lock is still usable.
    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Bytes, usize)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The handler the writer's connections use for every `LOAD DATA LOCAL` request.
#[derive(Debug, Clone)]
pub(super) struct InfileHandler(pub(super) Arc<InfileServer>);

type HandlerFuture = Pin<Box<dyn Future<Output = Result<InfileData, LocalInfileError>> + Send>>;

impl GlobalHandler for InfileHandler {
    fn handle(&self, file_name: &[u8]) -> HandlerFuture {
        let name = String::from_utf8_lossy(file_name).into_owned();
        let data = self.0.take(&name);
        Box::pin(async move {
            let (data, part) = data.ok_or(LocalInfileError::PathIsNotInTheWhiteList(name))?;
            let parts: Vec<io::Result<Bytes>> = (0..data.len())
                .step_by(part)
                .map(|at| Ok(data.slice(at..(at + part).min(data.len()))))
                .collect();
            Ok(Box::pin(futures_util::stream::iter(parts)) as InfileData)
        })
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    #[tokio::test]
    async fn serves_registered_data_once_in_parts_and_nothing_else() {
        let server = Arc::new(InfileServer::default());
        let handler = InfileHandler(server.clone());
        let data: Vec<u8> = (0..(2 * PART_BYTES + 10)).map(|i| i as u8).collect();
        let ticket = server.register(Bytes::from(data.clone()), usize::MAX);
        let name = ticket.name().to_string();

        let stream = handler.handle(name.as_bytes()).await.unwrap();
        let parts: Vec<Bytes> = stream.map(|p| p.unwrap()).collect().await;
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.len() <= PART_BYTES));
        assert_eq!(parts.concat(), data);

        // Once only, and never a file.
        assert!(handler.handle(name.as_bytes()).await.is_err());
        assert!(handler.handle(b"/etc/passwd").await.is_err());
    }

    #[tokio::test]
    async fn a_dropped_ticket_withdraws_its_data() {
        let server = Arc::new(InfileServer::default());
        let handler = InfileHandler(server.clone());
        let name = server
            .register(Bytes::from_static(b"x"), usize::MAX)
            .name()
            .to_string();
        assert!(handler.handle(name.as_bytes()).await.is_err());
        assert!(server.pending_map().is_empty());
    }
}
