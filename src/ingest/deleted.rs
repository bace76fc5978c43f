//! Messages Kafka deleted before any worker read them.
//!
//! A partition is read from the next offset stored in MySQL. When Kafka no longer has that
//! offset (the topic's retention, or a deletion of records, removed it while no worker read the
//! partition), librdkafka goes on from the oldest message Kafka still has
//! (`auto.offset.reset`) and says so only in a warning of its own. Those messages are lost to
//! logstamp, so the worker finds out itself and says so loudly: it looks at the first message
//! of each assignment that started from a stored offset. A later offset is a gap, which
//! compaction and transaction markers also leave; the partition's log start offset tells them
//! apart, since only what lies below it was deleted.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::partition_key::PartitionKey;

/// The offsets assignments started from, until their first message arrives.
#[derive(Default)]
pub struct FirstReads {
    expected: Mutex<HashMap<PartitionKey, i64>>,
    /// How many are awaited: the check of every message costs one atomic load while none is.
    awaited: AtomicUsize,
}

impl FirstReads {
    /// `key` is read from `offset`, stored in MySQL.
    pub fn expect(&self, key: PartitionKey, offset: i64) {
        let mut expected = self.expected();
        expected.insert(key, offset);
        self.awaited.store(expected.len(), Ordering::Relaxed);
    }

    /// `key` was revoked before its first message came.
    pub fn forget(&self, key: &PartitionKey) {
        let mut expected = self.expected();
        expected.remove(key);
        self.awaited.store(expected.len(), Ordering::Relaxed);
    }

    /// A message of `key` at `offset` arrived: the offset its assignment started from, if this
    /// is the assignment's first message and it comes after that offset.
    pub fn gap_before(&self, key: &PartitionKey, offset: i64) -> Option<i64> {
        if self.awaited.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut expected = self.expected();
        let start = expected.remove(key);
        self.awaited.store(expected.len(), Ordering::Relaxed);
        start.filter(|start| offset > *start)
    }

    fn expected(&self) -> MutexGuard<'_, HashMap<PartitionKey, i64>> {
        // Only the consumer thread takes it (the callbacks run inside its `poll`).
        self.expected
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The offsets deleted unread: from where reading was to start up to the partition's log start
/// offset, if that is further on. (Gaps at or past the log start are compaction's or
/// transaction markers', and lose nothing.)
pub fn deleted_unread(start: i64, log_start: i64) -> Option<Range<i64>> {
    (log_start > start).then_some(start..log_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ingest::partition_key::logs as key;

    #[test]
    fn only_an_assignments_first_message_past_its_start_is_a_gap() {
        let reads = FirstReads::default();
        assert_eq!(reads.gap_before(&key(0), 50), None, "nothing awaited");
        reads.expect(key(0), 10);
        reads.expect(key(1), 20);
        assert_eq!(
            reads.gap_before(&key(1), 20),
            None,
            "read from where it was to"
        );
        assert_eq!(reads.gap_before(&key(0), 35), Some(10));
        assert_eq!(
            reads.gap_before(&key(0), 90),
            None,
            "only the first message"
        );
        reads.expect(key(2), 5);
        reads.forget(&key(2));
        assert_eq!(reads.gap_before(&key(2), 9), None, "revoked first");
    }

    #[test]
    fn only_offsets_below_the_log_start_were_deleted() {
        assert_eq!(deleted_unread(100, 250), Some(100..250));
        // A compacted partition or transaction markers: nothing below the start is gone.
        assert_eq!(deleted_unread(100, 100), None);
        assert_eq!(deleted_unread(100, 40), None);
    }
}
