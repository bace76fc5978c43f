//! The loop filter: keeps a change applied here from being captured here and sent back.
//!
//! - `marker`: the applier updates its row in `relay_applied` inside every transaction it
//!   applies (it records the consumed offset there anyway); capture drops every transaction
//!   that touches that table. Works wherever there is a binlog, MySQL 8 included.
//! - `skip_replication`: the applier's session sets `skip_replication=1`, so MariaDB flags its
//!   events (header flag 0x8000); capture's own binlog connection sets it too, which makes the
//!   server leave flagged events out, and capture drops any that still arrive.
//! - `cache`: before applying, the applier records a key for each change; capture looks up the
//!   key of each captured change and drops it (once per recorded count) when found. Keys
//!   expire after `relay.cache_ttl`. The cache lives in the relay process, so a restart
//!   forgets it: changes applied but not yet captured before the restart come back to their
//!   origin once (harmless only while nobody changes those rows in between).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::change::{ChangeKind, Row, RowChange, value_to_json};

/// A change's identity for the cache: the brief's `table:type:pk1=v1&pk2=v2...` (for an
/// update also the changed columns with their new values), written as JSON so that no name or
/// value can be mistaken for a separator, and hashed to bound the memory a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    pub fn of(change: &RowChange) -> CacheKey {
        let pairs = |row: &Row| -> Vec<serde_json::Value> {
            // Rows are maps ordered by column name, so the pairs come sorted.
            row.iter()
                .map(|(name, value)| serde_json::json!([name, value_to_json(value.as_ref())]))
                .collect()
        };
        let mut parts = vec![
            serde_json::json!(change.schema),
            serde_json::json!(change.table),
            serde_json::json!(change.kind.to_string()),
            serde_json::Value::Array(pairs(&change.key)),
        ];
        if change.kind == ChangeKind::Update {
            parts.push(serde_json::Value::Array(pairs(&change.values)));
        }
        let text = serde_json::Value::Array(parts).to_string();
        CacheKey(Sha256::digest(text.as_bytes()).into())
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    count: u32,
    expires: Instant,
}

/// What the cache did, for logs and status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Captured changes dropped because the applier had recorded them.
    pub dropped: u64,
    /// Recorded changes that expired before capture saw them (each may have looped once).
    pub expired: u64,
}

/// Applied changes capture has not seen yet, counted, each expiring `ttl` after it was last
/// recorded.
#[derive(Debug)]
pub struct LoopCache {
    ttl: Duration,
    entries: HashMap<CacheKey, Entry>,
    last_purge: Option<Instant>,
    stats: CacheStats,
}

impl LoopCache {
    pub fn new(ttl: Duration) -> LoopCache {
        LoopCache {
            ttl,
            entries: HashMap::new(),
            last_purge: None,
            stats: CacheStats::default(),
        }
    }

    /// The applier is about to apply a change with this key.
    pub fn record(&mut self, key: CacheKey, now: Instant) {
        self.purge(now);
        let expires = now + self.ttl;
        let entry = self
            .entries
            .entry(key)
            .or_insert(Entry { count: 0, expires });
        entry.count += 1;
        entry.expires = expires;
    }

    /// The applier's transaction failed: the change will not reach the binlog.
    pub fn forget(&mut self, key: CacheKey) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.count -= 1;
            if entry.count == 0 {
                self.entries.remove(&key);
            }
        }
    }

    /// Capture saw a change with this key: `true` (and one count fewer) if it was applied here.
    pub fn take(&mut self, key: CacheKey, now: Instant) -> bool {
        match self.entries.get_mut(&key) {
            Some(entry) if entry.expires > now => {
                entry.count -= 1;
                if entry.count == 0 {
                    self.entries.remove(&key);
                }
                self.stats.dropped += 1;
                true
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Drops expired entries, at most a few times per time-to-live.
    fn purge(&mut self, now: Instant) {
        if self
            .last_purge
            .is_some_and(|last| now.duration_since(last) < self.ttl / 8)
        {
            return;
        }
        self.last_purge = Some(now);
        let before: u64 = self.entries.values().map(|e| u64::from(e.count)).sum();
        self.entries.retain(|_, e| e.expires > now);
        let after: u64 = self.entries.values().map(|e| u64::from(e.count)).sum();
        self.stats.expired += before - after;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::relay::change::{Kind, Value};

    fn change(kind: ChangeKind, id: u64, values: &[(&str, Option<Value>)]) -> RowChange {
        RowChange {
            schema: "app".into(),
            table: "t".into(),
            kind,
            columns: BTreeMap::from([("id".into(), Kind::Uint), ("v".into(), Kind::Int)]),
            key: [("id".to_string(), Some(Value::Uint(id)))].into(),
            values: values
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect(),
            before: None,
            contract: None,
        }
    }

    #[test]
    fn keys_name_table_type_key_and_for_updates_the_new_values() {
        let insert = change(ChangeKind::Insert, 1, &[("v", Some(Value::Int(1)))]);
        // An insert's key does not depend on its values; an update's does.
        assert_eq!(
            CacheKey::of(&insert),
            CacheKey::of(&change(
                ChangeKind::Insert,
                1,
                &[("v", Some(Value::Int(2)))]
            ))
        );
        assert_ne!(
            CacheKey::of(&insert),
            CacheKey::of(&change(ChangeKind::Delete, 1, &[]))
        );
        assert_ne!(
            CacheKey::of(&insert),
            CacheKey::of(&change(ChangeKind::Insert, 2, &[]))
        );
        let update = |v| change(ChangeKind::Update, 1, &[("v", v)]);
        assert_ne!(
            CacheKey::of(&update(Some(Value::Int(1)))),
            CacheKey::of(&update(Some(Value::Int(2))))
        );
        assert_ne!(
            CacheKey::of(&update(None)),
            CacheKey::of(&update(Some(Value::Int(0))))
        );
        // A separator inside a value cannot make two different keys equal.
        let text = |s: &str| change(ChangeKind::Update, 1, &[("v", Some(Value::Text(s.into())))]);
        assert_ne!(CacheKey::of(&text("a&v=b")), CacheKey::of(&text("a")));
    }

    #[test]
    fn counts_each_recorded_change_once() {
        let now = Instant::now();
        let key = CacheKey::of(&change(ChangeKind::Delete, 1, &[]));
        let mut cache = LoopCache::new(Duration::from_secs(60));
        assert!(!cache.take(key, now), "a local change is forwarded");
        cache.record(key, now);
        cache.record(key, now);
        assert!(cache.take(key, now));
        assert!(cache.take(key, now));
        assert!(!cache.take(key, now), "a third, local, change is forwarded");
        assert!(cache.is_empty());
        assert_eq!(cache.stats().dropped, 2);
    }

    #[test]
    fn a_rolled_back_apply_is_forgotten() {
        let now = Instant::now();
        let key = CacheKey::of(&change(ChangeKind::Delete, 1, &[]));
        let mut cache = LoopCache::new(Duration::from_secs(60));
        cache.record(key, now);
        cache.forget(key);
        assert!(!cache.take(key, now));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let start = Instant::now();
        let ttl = Duration::from_secs(60);
        let key = CacheKey::of(&change(ChangeKind::Delete, 1, &[]));
        let mut cache = LoopCache::new(ttl);
        cache.record(key, start);
        assert!(!cache.take(key, start + ttl), "expired");
        // Recording again refreshes the time to live; a purge counts what expired unseen.
        let other = CacheKey::of(&change(ChangeKind::Delete, 2, &[]));
        cache.record(other, start + 2 * ttl);
        assert_eq!(cache.stats().expired, 1);
        assert_eq!(cache.len(), 1);
        assert!(cache.take(other, start + 2 * ttl + ttl / 2));
    }
}
