//! Where each Kafka partition lives when the store has several databases (`store.shards`):
//! the pure part. A partition's rows, dead letters, rollup increments and offset row are all in
//! one shard, so a batch still commits in one local transaction; the assignment is recorded in
//! the coordination database and sticks, and a new partition goes to the least-loaded shard.

use std::collections::BTreeMap;
use std::fmt;

use crate::mysql::MysqlUrl;

/// A shard's name in the assignment table: `host:port/database` of its URL, which stays the
/// same when the list is reordered or a password changes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardName(pub String);

impl ShardName {
    pub fn of(url: &MysqlUrl) -> ShardName {
        ShardName(format!(
            "{}:{}/{}",
            url.host(),
            url.port().unwrap_or(3306),
            url.database()
        ))
    }
}

impl fmt::Display for ShardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Kafka partition of a consumer group, the unit that is placed on a shard.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Places `new` partitions (not yet assigned) one by one on the shard with the fewest
/// partitions, counting those already `assigned`; ties go to the shard listed first. Counts
/// are over all groups and topics: a shard's load is its share of the fleet's partitions.
/// Assignments to shards no longer listed do not count (they are reported elsewhere).
pub fn place<'a>(
    shards: &[ShardName],
    assigned: impl IntoIterator<Item = &'a ShardName>,
    new: &[PartitionKey],
) -> Vec<(PartitionKey, ShardName)> {
    if shards.is_empty() {
        return Vec::new();
    }
    let mut load: BTreeMap<&ShardName, usize> = shards.iter().map(|s| (s, 0)).collect();
    for shard in assigned {
        if let Some(n) = load.get_mut(shard) {
            *n += 1;
        }
    }
    new.iter()
        .map(|key| {
            // `shards` is not empty, so there is a least; its position breaks ties.
            let least = shards
                .iter()
                .enumerate()
                .min_by_key(|(i, s)| (load[s], *i))
                .map(|(_, s)| s)
                .unwrap_or(&shards[0]);
            if let Some(n) = load.get_mut(least) {
                *n += 1;
            }
            (key.clone(), least.clone())
        })
        .collect()
}

/// The offset row left on a shard a partition moved away from: a negative value (no offset is
/// one) that keeps the offset it had, if any, so an old owner's conditional claim fails and
/// sees that the partition moved, and an interrupted move can be finished from it.
pub fn tombstone(next_offset: Option<i64>) -> i64 {
    match next_offset {
        None => -1,
        Some(offset) => -2 - offset,
    }
}

/// What a stored offset says of a move: `None`, not moved (an offset); `Some(kept)`, a
/// [`tombstone`] and the offset it keeps.
pub fn moved_offset(stored: i64) -> Option<Option<i64>> {
    match stored {
        0.. => None,
        -1 => Some(None),
        _ => Some(Some(-2 - stored)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<ShardName> {
        (0..n)
            .map(|i| ShardName(format!("db{i}:3306/logs")))
            .collect()
    }

    fn keys(topic: &str, n: i32) -> Vec<PartitionKey> {
        (0..n)
            .map(|partition| PartitionKey {
                group: "g".into(),
                topic: topic.into(),
                partition,
            })
            .collect()
    }

    fn counts(placed: &[(PartitionKey, ShardName)], shards: &[ShardName]) -> Vec<usize> {
        shards
            .iter()
            .map(|s| placed.iter().filter(|(_, p)| p == s).count())
            .collect()
    }

    #[test]
    fn new_partitions_spread_evenly_in_list_order() {
        let shards = names(3);
        let placed = place(&shards, [], &keys("logs", 12));
        assert_eq!(counts(&placed, &shards), [4, 4, 4]);
        let first: Vec<&ShardName> = placed.iter().take(3).map(|(_, s)| s).collect();
        assert_eq!(first, [&shards[0], &shards[1], &shards[2]]);
    }

    #[test]
    fn new_partitions_fill_the_least_loaded_shard_first() {
        let shards = names(3);
        // A shard added to a fleet of two loaded ones takes the new partitions until even.
        let assigned = [&shards[0], &shards[0], &shards[1], &shards[1]];
        let placed = place(&shards, assigned, &keys("more", 4));
        assert_eq!(counts(&placed, &shards), [1, 1, 2]);
        let placed = place(&shards, assigned, &keys("more", 5));
        assert_eq!(counts(&placed, &shards), [1, 1, 3]);
    }

    #[test]
    fn assignments_to_unlisted_shards_do_not_count_and_no_shards_place_nothing() {
        let shards = names(2);
        let gone = ShardName("old:3306/logs".into());
        let placed = place(&shards, [&gone, &gone, &shards[0]], &keys("logs", 3));
        assert_eq!(counts(&placed, &shards), [1, 2]);
        assert!(place(&[], [], &keys("logs", 3)).is_empty());
    }

    #[test]
    fn a_tombstone_keeps_the_offset_and_is_never_an_offset() {
        for offset in [0, 1, 41, i64::MAX - 2] {
            let t = tombstone(Some(offset));
            assert!(t < 0);
            assert_eq!(moved_offset(t), Some(Some(offset)));
            assert_eq!(moved_offset(offset), None);
        }
        assert_eq!(moved_offset(tombstone(None)), Some(None));
    }

    #[test]
    fn shard_names_ignore_the_password_and_default_the_port() {
        let url = |s: &str| MysqlUrl::try_from(s.to_string()).unwrap();
        let a = ShardName::of(&url("mysql://u:one@db1/logs"));
        let b = ShardName::of(&url("mysql://u:two@db1:3306/logs"));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "db1:3306/logs");
        assert_ne!(a, ShardName::of(&url("mysql://u@db1:3307/logs")));
    }
}
