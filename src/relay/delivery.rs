//! Kafka's acknowledgements of capture's messages, counted as they arrive.
//!
//! Capture only needs to know how far Kafka has acknowledged its messages, in order: a
//! checkpoint may move once every message before it is acknowledged. Counting delivery reports
//! in the producer's context does that with no allocation and no task wake-up per message
//! (a `DeliveryFuture` per message cost both, a large share of capture's CPU).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::ProducerContext;
use tokio::sync::Notify;

/// Numbers the messages sent (from 1) and counts how many of the first ones Kafka acknowledged.
#[derive(Default)]
pub struct Acks {
    sent: AtomicU64,
    state: Mutex<Delivered>,
    changed: Notify,
}

#[derive(Default)]
struct Delivered {
    /// Messages 1..=through are all acknowledged.
    through: u64,
    /// Acknowledged messages after a gap. An idempotent producer writing one partition reports
    /// in order, so this stays empty; it keeps the count right if a report ever comes early.
    early: BTreeSet<u64>,
    failed: Option<KafkaError>,
}

impl Delivered {
    fn acknowledge(&mut self, number: u64) {
        if number == self.through + 1 {
            self.through = number;
            while self.early.remove(&(self.through + 1)) {
                self.through += 1;
            }
        } else {
            self.early.insert(number);
        }
    }
}

impl Acks {
    /// The number of the next message to send (its delivery opaque).
    pub fn next(&self) -> u64 {
        self.sent.load(Ordering::Relaxed) + 1
    }

    /// Records that message `next()` was queued.
    pub fn queued(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// How many messages were queued so far: the number of the latest.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Waits until messages 1..=`through` are all acknowledged, or one of all sent failed.
    ///
    /// One task waits at a time (capture's checkpoint task): `Notify` keeps a wake-up that
    /// comes between the check and the wait, so none is lost.
    pub async fn acknowledged(&self, through: u64) -> Result<(), KafkaError> {
        loop {
            {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(e) = &state.failed {
                    return Err(e.clone());
                }
                if state.through >= through {
                    return Ok(());
                }
            }
            self.changed.notified().await;
        }
    }
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, number: usize) {
        let number = number as u64;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err((e, _)) => {
                state.failed.get_or_insert_with(|| e.clone());
            }
            Ok(_) => state.acknowledge(number),
        }
        drop(state);
        self.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[test]
    fn counts_only_an_unbroken_run_from_the_first() {
        let mut delivered = Delivered::default();
        for number in [1, 2, 4, 5] {
            delivered.acknowledge(number);
        }
        assert_eq!(delivered.through, 2);
        delivered.acknowledge(3);
        assert_eq!(delivered.through, 5);
        assert!(delivered.early.is_empty());
    }

    #[test]
    fn a_wait_ends_once_its_message_and_all_before_it_are_acknowledged() {
        let acks = Acks::default();
        acks.state.lock().unwrap().acknowledge(2);
        acks.changed.notify_one();
        assert!(acks.acknowledged(2).now_or_never().is_none());
        acks.state.lock().unwrap().acknowledge(1);
        acks.changed.notify_one();
        assert!(matches!(acks.acknowledged(2).now_or_never(), Some(Ok(()))));
    }

    #[test]
    fn a_failed_delivery_ends_every_wait() {
        let acks = Acks::default();
        acks.state.lock().unwrap().failed = Some(KafkaError::Canceled);
        assert!(matches!(acks.acknowledged(1).now_or_never(), Some(Err(_))));
    }
}
