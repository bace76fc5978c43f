//! Which of the dispatcher's seeks the consumer thread may still carry out, without Kafka.
//!
//! A seek is asked for one assignment of a partition. Once that assignment ends it must never
//! run, even if the partition was assigned again meanwhile (a revocation and an assignment can
//! both be served within one `poll`): the new assignment starts at the offset MySQL holds now,
//! and the old seek would move it back. So every assignment of a partition gets an epoch of its
//! own, and a seek carries the epoch it was asked for.

use std::collections::HashMap;

use super::partition_key::PartitionKey;

/// The epoch of each partition assigned now.
#[derive(Debug, Default)]
pub struct Assignments {
    epochs: HashMap<PartitionKey, u64>,
    /// The last epoch given out: epochs are never reused, so a partition assigned, revoked and
    /// assigned again has another.
    last: u64,
}

impl Assignments {
    /// Records `key` as assigned from now on; its new epoch.
    pub fn assign(&mut self, key: &PartitionKey) -> u64 {
        self.last += 1;
        self.epochs.insert(key.clone(), self.last);
        self.last
    }

    pub fn revoke(&mut self, key: &PartitionKey) {
        self.epochs.remove(key);
    }

    /// Every partition given up at once (after a rebalance error).
    pub fn clear(&mut self) {
        self.epochs.clear();
    }

    /// Whether `key` is assigned now, under the assignment of `epoch`.
    pub fn is_current(&self, key: &PartitionKey, epoch: u64) -> bool {
        self.epochs.get(key) == Some(&epoch)
    }
}

/// A seek asked for by the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seek {
    pub key: PartitionKey,
    pub offset: i64,
    /// The assignment it was asked for.
    pub epoch: u64,
    /// The dispatcher's generation, handed back when the seek is done.
    pub generation: u64,
}

/// Seeks not done yet: librdkafka refuses to seek a partition whose fetcher is not running yet,
/// so a seek is tried again each round until done or stale.
#[derive(Debug, Default)]
pub struct PendingSeeks {
    seeks: Vec<Seek>,
}

impl PendingSeeks {
    pub fn push(&mut self, seek: Seek) {
        self.seeks.push(seek);
    }

    pub fn is_empty(&self) -> bool {
        self.seeks.is_empty()
    }

    /// Drops the seeks whose assignment is over (by `is_current`), then tries the others in
    /// the order asked with `seek`, which says whether it was done; those not done stay.
    pub fn run(
        &mut self,
        is_current: impl Fn(&PartitionKey, u64) -> bool,
        mut seek: impl FnMut(&Seek) -> bool,
    ) {
        self.seeks
            .retain(|s| is_current(&s.key, s.epoch) && !seek(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ingest::partition_key::logs as key;

    fn seek(partition: i32, offset: i64, epoch: u64) -> Seek {
        Seek {
            key: key(partition),
            offset,
            epoch,
            generation: 1,
        }
    }

    /// Runs the pending seeks against `assignments`, each done when `ready`; those done.
    fn run(pending: &mut PendingSeeks, assignments: &Assignments, ready: bool) -> Vec<Seek> {
        let mut done = Vec::new();
        pending.run(
            |key, epoch| assignments.is_current(key, epoch),
            |s| {
                if ready {
                    done.push(s.clone());
                }
                ready
            },
        );
        done
    }

    #[test]
    fn a_seek_for_a_partition_revoked_and_assigned_again_never_runs() {
        let mut assignments = Assignments::default();
        let first = assignments.assign(&key(0));
        let mut pending = PendingSeeks::default();
        pending.push(seek(0, 100, first));
        // Not done yet (the fetcher is starting), then revoked and assigned again, with a later
        // offset from MySQL, before the next round.
        assert!(run(&mut pending, &assignments, false).is_empty());
        assignments.revoke(&key(0));
        let second = assignments.assign(&key(0));
        assert_ne!(first, second);
        assert!(run(&mut pending, &assignments, true).is_empty());
        assert!(pending.is_empty(), "the stale seek is dropped, not kept");
        // A seek asked for the new assignment runs.
        pending.push(seek(0, 250, second));
        assert_eq!(
            run(&mut pending, &assignments, true),
            [seek(0, 250, second)]
        );
    }

    #[test]
    fn a_seek_waits_for_its_partition_and_is_dropped_once_it_is_revoked() {
        let mut assignments = Assignments::default();
        let p0 = assignments.assign(&key(0));
        let p1 = assignments.assign(&key(1));
        let mut pending = PendingSeeks::default();
        pending.push(seek(0, 10, p0));
        pending.push(seek(1, 20, p1));
        assert!(run(&mut pending, &assignments, false).is_empty());
        assert!(!pending.is_empty(), "kept until librdkafka can seek");
        // Another partition coming and going leaves partition 1's assignment as it was.
        assignments.revoke(&key(0));
        assignments.assign(&key(2));
        assert_eq!(run(&mut pending, &assignments, true), [seek(1, 20, p1)]);
        assert!(pending.is_empty());
        // After a rebalance error nothing is assigned: nothing pending runs.
        pending.push(seek(1, 30, p1));
        assignments.clear();
        assert!(run(&mut pending, &assignments, true).is_empty());
        assert!(pending.is_empty());
    }
}
