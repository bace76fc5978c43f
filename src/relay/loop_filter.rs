//! The loop filter: keeps a change applied here from being captured here and sent back.
//!
//! - `marker`: the applier updates its row in `relay_applied` inside every transaction it
//!   applies (it records the consumed offset there anyway); capture drops every transaction
//!   that touches that table. Works wherever there is a binlog, MySQL 8 included.
//! - `skip_replication`: the applier's session sets `skip_replication=1`, so MariaDB flags its
//!   events (header flag 0x8000); capture's own binlog connection sets it too, which makes the
//!   server leave flagged events out, and capture drops any that still arrive.
//! - `cache`: inside every transaction it applies, the applier records the key of each change
//!   it applies in `relay_loop_keys`; the row images in the binlog bring those keys to capture
//!   in the same transaction as the changes, and capture drops each captured change whose key
//!   was recorded there (once per recorded count) and forwards the rest. The record is durable
//!   exactly when the changes are and travels with them, so capture reading a range again
//!   (after a crash, or a lost binlog connection) decides exactly as the first time, and a key
//!   whose apply changed nothing dies with its transaction instead of waiting for a local change.

use std::collections::HashMap;

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

impl CacheKey {
    /// The keys an applier recorded, as stored: 32-byte hashes one after another.
    pub fn split(bytes: &[u8]) -> Result<Vec<CacheKey>, String> {
        let chunks = bytes.chunks_exact(32);
        if !chunks.remainder().is_empty() {
            return Err(format!(
                "{} bytes of recorded keys, not a multiple of 32",
                bytes.len()
            ));
        }
        Ok(chunks
            .map(|chunk| {
                let mut key = [0; 32];
                key.copy_from_slice(chunk);
                CacheKey(key)
            })
            .collect())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The `cache` filter over one transaction as capture reads it, a rows event at a time: each
/// key recorded in the transaction drops one change with that key, whichever of the two comes
/// first. The applier records the keys of what it applies before applying it, so a change of
/// its transaction normally finds its key already counted and is dropped at once; one that
/// finds none (made by a trigger, or applied differently here) is held until the transaction
/// ends, in case its key comes later (a part applied again change by change after a conflict
/// records its keys after its changes). A change of a transaction no applier wrote (no marker
/// before it) goes on at once.
#[derive(Debug, Default)]
pub struct RecordedKeys {
    /// Keys recorded and not yet matched to a change, with their counts.
    unmatched: HashMap<CacheKey, u32>,
    /// Changes of an applier's transaction no key has matched yet, in binlog order; a matched
    /// one leaves a `None`.
    held: Vec<Option<RowChange>>,
    /// Where the held changes of each key are.
    held_at: HashMap<CacheKey, Vec<usize>>,
}

impl RecordedKeys {
    /// Keys the applier recorded: each drops a held change with its key, or waits for one.
    pub fn record(&mut self, keys: Vec<CacheKey>) {
        for key in keys {
            match self.held_at.get_mut(&key).and_then(Vec::pop) {
                Some(at) => self.held[at] = None,
                None => *self.unmatched.entry(key).or_default() += 1,
            }
        }
    }

    /// The changes of a rows event that no recorded key drops and that go on now. In an
    /// applier's transaction (`applied`), those are held instead.
    pub fn pass(&mut self, changes: Vec<RowChange>, applied: bool) -> Vec<RowChange> {
        let mut passed = Vec::new();
        for change in changes {
            let key = CacheKey::of(&change);
            match self.unmatched.get_mut(&key) {
                Some(count) if *count > 0 => *count -= 1,
                _ if applied => {
                    self.held_at.entry(key).or_default().push(self.held.len());
                    self.held.push(Some(change));
                }
                _ => passed.push(change),
            }
        }
        passed
    }

    /// The end of the transaction: the changes held that no key dropped, in binlog order.
    pub fn unrecorded(self) -> Vec<RowChange> {
        self.held.into_iter().flatten().collect()
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
    fn each_recorded_key_drops_one_change() {
        let delete = change(ChangeKind::Delete, 1, &[]);
        let key = CacheKey::of(&delete);
        let local = change(ChangeKind::Delete, 2, &[]);
        let three = vec![delete.clone(), local.clone(), delete.clone(), delete];
        // Two recorded before the changes: the third identical change, and the local one, are
        // forwarded, at the transaction's end in an applier's transaction.
        let mut keys = RecordedKeys::default();
        keys.record(vec![key, key]);
        assert!(keys.pass(three.clone(), true).is_empty());
        let left = keys.unrecorded();
        assert_eq!(left.len(), 2);
        assert_eq!(CacheKey::of(&left[0]), CacheKey::of(&local));
        assert_eq!(CacheKey::of(&left[1]), key);
        // Elsewhere they go on at once.
        let mut keys = RecordedKeys::default();
        keys.record(vec![key, key]);
        assert_eq!(keys.pass(three, false).len(), 2);
        assert!(keys.unrecorded().is_empty());
    }

    #[test]
    fn keys_recorded_after_their_changes_drop_them_too() {
        let delete = change(ChangeKind::Delete, 1, &[]);
        let key = CacheKey::of(&delete);
        let local = change(ChangeKind::Delete, 2, &[]);
        let mut keys = RecordedKeys::default();
        let read = vec![delete.clone(), local.clone(), delete.clone(), delete];
        assert!(keys.pass(read, true).is_empty());
        keys.record(vec![key]);
        keys.record(vec![
            key,
            key,
            CacheKey::of(&change(ChangeKind::Delete, 3, &[])),
        ]);
        // The local change is all that is left; a key left over dies with the transaction.
        let left = keys.unrecorded();
        assert_eq!(left.len(), 1);
        assert_eq!(CacheKey::of(&left[0]), CacheKey::of(&local));
    }

    #[test]
    fn recorded_keys_are_read_back_as_written() {
        let keys = [
            CacheKey::of(&change(ChangeKind::Delete, 1, &[])),
            CacheKey::of(&change(ChangeKind::Delete, 2, &[])),
        ];
        let bytes: Vec<u8> = keys.iter().flat_map(|k| *k.as_bytes()).collect();
        assert_eq!(CacheKey::split(&bytes).unwrap(), keys);
        assert!(CacheKey::split(&bytes[1..]).is_err());
        assert!(CacheKey::split(&[]).unwrap().is_empty());
    }
}
