//! The shards of a store with several databases (`store.shards`): the assignment table in the
//! coordination database (`mysql.url`), placing new partitions, and moving one.
//!
//! A partition's offset row lives in its shard. Moving it leaves a tombstone there (see
//! [`shard_plan::tombstone`]) in the same transaction that locks the row, so the old owner's
//! next conditional claim fails, sees the move and finds the new shard: nothing is written
//! twice, and nothing is lost.

use chrono::{DateTime, Utc};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::Serialize;

use super::shard_plan::{self, PartitionKey, ShardName};
use super::writer::OFFSETS_TABLE;
use crate::mysql::lock::{lock_name, with_lock};
use crate::mysql::rows::{first, take};
use crate::mysql::{self, DbError, MysqlUrl};
use crate::store::settings::StoreSettings;

/// Where the assignments are kept, in the coordination database.
pub const ASSIGNMENTS_TABLE: &str = "shard_assignments";

/// How long placing or moving waits for another process doing the same.
const LOCK_WAIT_SECONDS: u32 = 30;

/// The store's databases: the shards of `store.shards`, or, without any, `mysql.url`'s
/// database alone (unsharded: no assignments are kept).
#[derive(Debug, Clone)]
pub struct ShardSet {
    pub coordination: MysqlUrl,
    /// Each shard with its name; one entry, the coordination database, when unsharded.
    pub shards: Vec<(ShardName, MysqlUrl)>,
    pub sharded: bool,
}

impl ShardSet {
    pub fn new(coordination: &MysqlUrl, store: &StoreSettings) -> ShardSet {
        let sharded = !store.shards.is_empty();
        let urls = if sharded {
            store.shards.clone()
        } else {
            vec![coordination.clone()]
        };
        ShardSet {
            coordination: coordination.clone(),
            shards: urls.into_iter().map(|u| (ShardName::of(&u), u)).collect(),
            sharded,
        }
    }

    pub fn names(&self) -> Vec<ShardName> {
        self.shards.iter().map(|(name, _)| name.clone()).collect()
    }

    pub fn index_of(&self, name: &ShardName) -> Option<usize> {
        self.shards.iter().position(|(n, _)| n == name)
    }

    /// A shard given by its position in `store.shards` (from 0) or its name.
    pub fn find(&self, text: &str) -> Result<usize, String> {
        if let Ok(index) = text.parse::<usize>() {
            return if index < self.shards.len() {
                Ok(index)
            } else {
                Err(format!(
                    "there is no shard {index}: store.shards lists {}",
                    self.shards.len()
                ))
            };
        }
        self.index_of(&ShardName(text.to_string())).ok_or_else(|| {
            format!(
                "no shard is named {text}: give its position in store.shards or one of {}",
                self.names()
                    .iter()
                    .map(ShardName::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// The position of the shard an assignment names, or an error saying the shard is no
    /// longer listed.
    pub fn position(&self, key: &PartitionKey, name: &ShardName) -> Result<usize, DbError> {
        self.index_of(name).ok_or_else(|| {
            DbError::config(
                "store.shards",
                format!(
                    "partition {key} of group {} is assigned to shard {name}, which is not \
                     listed: add it back, or move the partition first",
                    key.group
                ),
            )
        })
    }
}

/// Which shards answer, as the writer last found them: a shard whose write failed for a
/// transient reason (it is down or unreachable) is failing until a write to it succeeds. Its
/// partitions' batches wait and retry meanwhile; the other shards' go on.
#[derive(Debug)]
pub struct ShardHealth {
    shards: std::sync::Mutex<Vec<(ShardName, Option<String>)>>,
}

impl ShardHealth {
    pub fn new(names: Vec<ShardName>) -> ShardHealth {
        ShardHealth {
            shards: std::sync::Mutex::new(names.into_iter().map(|n| (n, None)).collect()),
        }
    }

    /// Each shard with why it is failing; `None`: it answers.
    pub fn snapshot(&self) -> Vec<(ShardName, Option<String>)> {
        self.lock().clone()
    }

    /// Whether any shard is failing now.
    pub fn any_failing(&self) -> bool {
        self.lock().iter().any(|(_, why)| why.is_some())
    }

    /// Whether shard number `shard` is failing now.
    pub fn is_failing(&self, shard: usize) -> bool {
        self.lock().get(shard).is_some_and(|(_, why)| why.is_some())
    }

    /// Records what the last write to `shard` found. A change is logged once (not once per
    /// retry): the shard stopped taking writes, or takes them again.
    pub(crate) fn set(&self, shard: usize, failing: Option<String>) {
        let mut shards = self.lock();
        let Some(entry) = shards.get_mut(shard) else {
            return;
        };
        match (&entry.1, &failing) {
            (None, Some(why)) => tracing::error!(
                shard = %entry.0,
                "the database stopped taking writes; its partitions wait: {why}"
            ),
            (Some(_), None) => tracing::info!(shard = %entry.0, "the database takes writes again"),
            _ => {}
        }
        entry.1 = failing;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(ShardName, Option<String>)>> {
        // Held briefly; the list stays whole if a holder panicked.
        self.shards
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One row of the assignment table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assignment {
    pub consumer_group: String,
    pub topic: String,
    pub partition: i32,
    pub shard: String,
    pub assigned_at: String,
}

/// Every assignment, by group, topic and partition.
pub async fn assignments(conn: &mut Conn) -> Result<Vec<Assignment>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SELECT consumer_group, topic, kafka_partition, shard, \
             DATE_FORMAT(assigned_at, '%Y-%m-%dT%H:%i:%s.%fZ') FROM `{ASSIGNMENTS_TABLE}` \
             ORDER BY consumer_group, topic, kafka_partition"
        ))
        .await
        .map_err(DbError::mysql("reading the shard assignments"))?;
    rows.into_iter()
        .map(|mut row| {
            Ok(Assignment {
                consumer_group: take(&mut row, 0, "shard_assignments.consumer_group")?,
                topic: take(&mut row, 1, "shard_assignments.topic")?,
                partition: take(&mut row, 2, "shard_assignments.kafka_partition")?,
                shard: take(&mut row, 3, "shard_assignments.shard")?,
                assigned_at: take(&mut row, 4, "shard_assignments.assigned_at")?,
            })
        })
        .collect()
}

/// The shard of a partition, if it has one.
pub async fn lookup(conn: &mut Conn, key: &PartitionKey) -> Result<Option<ShardName>, DbError> {
    let row: Option<mysql_async::Row> = conn
        .exec_first(
            format!(
                "SELECT shard FROM `{ASSIGNMENTS_TABLE}` \
                 WHERE consumer_group = ? AND topic = ? AND kafka_partition = ?"
            ),
            (&key.group, &key.topic, key.partition),
        )
        .await
        .map_err(DbError::mysql(format!("reading the shard of {key}")))?;
    Ok(first::<String>(row, "shard_assignments.shard")?.map(ShardName))
}

/// The shard of each partition of `keys`, placing those without one on the least-loaded shards
/// (under a named lock, so concurrent workers place with the same counts).
pub async fn assign(
    conn: &mut Conn,
    shards: &[ShardName],
    keys: &[PartitionKey],
) -> Result<Vec<ShardName>, DbError> {
    let found = shards_of(conn, keys).await?;
    if found.iter().all(Option::is_some) {
        return Ok(found.into_iter().flatten().collect());
    }
    let lock = placement_lock(conn).await?;
    with_lock(conn, &lock, LOCK_WAIT_SECONDS, async |conn| {
        // Again under the lock: another worker may have placed some meanwhile.
        let found = shards_of(conn, keys).await?;
        let new: Vec<PartitionKey> = keys
            .iter()
            .zip(&found)
            .filter(|(_, shard)| shard.is_none())
            .map(|(key, _)| key.clone())
            .collect();
        let all = assignments(conn).await?;
        let loads: Vec<ShardName> = all.into_iter().map(|a| ShardName(a.shard)).collect();
        let placed = shard_plan::place(shards, &loads, &new);
        for (key, shard) in &placed {
            conn.exec_drop(
                format!(
                    "INSERT INTO `{ASSIGNMENTS_TABLE}` \
                     (consumer_group, topic, kafka_partition, shard) VALUES (?, ?, ?, ?)"
                ),
                (&key.group, &key.topic, key.partition, &shard.0),
            )
            .await
            .map_err(DbError::mysql(format!("assigning {key} to shard {shard}")))?;
            tracing::info!(partition = %key, %shard, "partition placed on a shard");
        }
        let mut placed = placed.into_iter().map(|(_, shard)| shard);
        found
            .into_iter()
            .map(|shard| {
                shard.or_else(|| placed.next()).ok_or_else(|| {
                    DbError::Invariant("placing partitions: no shard is listed".into())
                })
            })
            .collect()
    })
    .await?
    .ok_or_else(|| busy(&lock))
}

async fn shards_of(
    conn: &mut Conn,
    keys: &[PartitionKey],
) -> Result<Vec<Option<ShardName>>, DbError> {
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        found.push(lookup(conn, key).await?);
    }
    Ok(found)
}

async fn placement_lock(conn: &mut Conn) -> Result<String, DbError> {
    Ok(lock_name(&[
        "shards",
        &mysql::current_database(conn).await?,
    ]))
}

fn busy(lock: &str) -> DbError {
    DbError::Busy(format!(
        "lock {lock} stayed taken by another logstamp placing or moving partitions for \
         {LOCK_WAIT_SECONDS} s; try again"
    ))
}

/// What `shards move` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub topic: String,
    pub partition: i32,
    pub from: String,
    pub to: String,
    /// The offset moved with it; `None`: the partition had none yet.
    pub next_offset: Option<i64>,
}

/// Moves a partition and its offset row to shard `to` while workers may be writing it: fences
/// the old shard's offset row with a tombstone (which waits for a batch in flight to commit
/// and makes the next one fail its claim), writes the offset on the new shard, then points the
/// assignment there. Safe to run again after an interruption at any step: the tombstone keeps
/// the offset. A partition never placed is placed on `to`.
pub async fn move_partition(
    set: &ShardSet,
    key: &PartitionKey,
    to: usize,
    now: DateTime<Utc>,
) -> Result<Moved, DbError> {
    let mut coordination = mysql::connect(&set.coordination).await?;
    let lock = placement_lock(&mut coordination).await?;
    let moved = with_lock(&mut coordination, &lock, LOCK_WAIT_SECONDS, async |conn| {
        let (to_name, to_url) = &set.shards[to];
        let Some(from_name) = lookup(conn, key).await? else {
            assign_to(conn, key, to_name, now).await?;
            return Ok(Moved {
                topic: key.topic.clone(),
                partition: key.partition,
                from: String::new(),
                to: to_name.to_string(),
                next_offset: None,
            });
        };
        let from = set.position(key, &from_name)?;
        if from == to {
            let next_offset = offset_at(&set.shards[to].1, key).await?;
            return Ok(Moved {
                topic: key.topic.clone(),
                partition: key.partition,
                from: from_name.to_string(),
                to: to_name.to_string(),
                next_offset: next_offset.filter(|o| *o >= 0),
            });
        }
        let next_offset = fence(&set.shards[from].1, key).await?;
        put_offset(to_url, key, next_offset).await?;
        assign_to(conn, key, to_name, now).await?;
        Ok(Moved {
            topic: key.topic.clone(),
            partition: key.partition,
            from: from_name.to_string(),
            to: to_name.to_string(),
            next_offset,
        })
    })
    .await;
    let _ = coordination.disconnect().await;
    moved?.ok_or_else(|| busy(&lock))
}

async fn assign_to(
    conn: &mut Conn,
    key: &PartitionKey,
    shard: &ShardName,
    now: DateTime<Utc>,
) -> Result<(), DbError> {
    conn.exec_drop(
        format!(
            "INSERT INTO `{ASSIGNMENTS_TABLE}` \
             (consumer_group, topic, kafka_partition, shard, assigned_at) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE shard = VALUES(shard), assigned_at = VALUES(assigned_at)"
        ),
        (
            &key.group,
            &key.topic,
            key.partition,
            &shard.0,
            now.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        ),
    )
    .await
    .map_err(DbError::mysql(format!("assigning {key} to shard {shard}")))
}

/// Leaves a tombstone in the partition's offset row on its old shard and returns the offset
/// it had (also when an earlier, interrupted move left the tombstone).
async fn fence(url: &MysqlUrl, key: &PartitionKey) -> Result<Option<i64>, DbError> {
    let context = || format!("fencing the offset row of {key} on its old shard");
    let mut conn = mysql::connect(url).await?;
    let fenced = async {
        let mut tx = conn
            .start_transaction(mysql_async::TxOpts::default())
            .await
            .map_err(DbError::mysql(context()))?;
        let params = (&key.group, &key.topic, key.partition);
        // A row exists from here on, so an owner's first batch cannot slip in by inserting one.
        tx.exec_drop(
            format!(
                "INSERT INTO `{OFFSETS_TABLE}` (consumer_group, topic, kafka_partition, \
                 next_offset) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE next_offset = next_offset"
            ),
            (
                &key.group,
                &key.topic,
                key.partition,
                shard_plan::tombstone(None),
            ),
        )
        .await
        .map_err(DbError::mysql(context()))?;
        // Waits for a batch of the old owner that holds the row, then holds it.
        let row: Option<mysql_async::Row> = tx
            .exec_first(
                format!(
                    "SELECT next_offset FROM `{OFFSETS_TABLE}` WHERE consumer_group = ? AND \
                     topic = ? AND kafka_partition = ? FOR UPDATE"
                ),
                params,
            )
            .await
            .map_err(DbError::mysql(context()))?;
        let stored: i64 = first(row, "ingest_offsets.next_offset")?
            .ok_or_else(|| DbError::Invariant(format!("{}: the row is gone", context())))?;
        let offset = match shard_plan::moved_offset(stored) {
            None => Some(stored),
            Some(kept) => kept,
        };
        tx.exec_drop(
            format!(
                "UPDATE `{OFFSETS_TABLE}` SET next_offset = ? WHERE consumer_group = ? AND \
                 topic = ? AND kafka_partition = ?"
            ),
            (
                shard_plan::tombstone(offset),
                &key.group,
                &key.topic,
                key.partition,
            ),
        )
        .await
        .map_err(DbError::mysql(context()))?;
        tx.commit().await.map_err(DbError::mysql(context()))?;
        Ok(offset)
    }
    .await;
    let _ = conn.disconnect().await;
    fenced
}

/// Sets the partition's offset row on its new shard: the offset moved, or none.
async fn put_offset(
    url: &MysqlUrl,
    key: &PartitionKey,
    offset: Option<i64>,
) -> Result<(), DbError> {
    let context = || format!("writing the offset of {key} on its new shard");
    let mut conn = mysql::connect(url).await?;
    let params = (&key.group, &key.topic, key.partition);
    let put = match offset {
        Some(offset) => {
            conn.exec_drop(
                format!(
                    "INSERT INTO `{OFFSETS_TABLE}` (consumer_group, topic, kafka_partition, \
                     next_offset) VALUES (?, ?, ?, ?) \
                     ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset)"
                ),
                (&key.group, &key.topic, key.partition, offset),
            )
            .await
        }
        // A row left from an earlier stay there would say where to start: none may.
        None => {
            conn.exec_drop(
                format!(
                    "DELETE FROM `{OFFSETS_TABLE}` WHERE consumer_group = ? AND topic = ? \
                     AND kafka_partition = ?"
                ),
                params,
            )
            .await
        }
    };
    let _ = conn.disconnect().await;
    put.map_err(DbError::mysql(context()))
}

/// The partition's stored offset on a shard.
async fn offset_at(url: &MysqlUrl, key: &PartitionKey) -> Result<Option<i64>, DbError> {
    let mut conn = mysql::connect(url).await?;
    let row: Result<Option<mysql_async::Row>, _> = conn
        .exec_first(
            format!(
                "SELECT next_offset FROM `{OFFSETS_TABLE}` WHERE consumer_group = ? AND \
                 topic = ? AND kafka_partition = ?"
            ),
            (&key.group, &key.topic, key.partition),
        )
        .await;
    let _ = conn.disconnect().await;
    first(
        row.map_err(DbError::mysql(format!("reading the offset of {key}")))?,
        "ingest_offsets.next_offset",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> MysqlUrl {
        MysqlUrl::try_from(text.to_string()).unwrap()
    }

    fn store(shards: &[&str]) -> StoreSettings {
        serde_json::from_value(serde_json::json!({
            "table": "logs",
            "concurrency": 4,
            "insert_method": "batch",
            "give_up_after": "5m",
            "write_timeout": "30s",
            "commit_window": "6m",
            "payload": true,
            "compression": "zlib",
            "columns": [],
            "shards": shards,
        }))
        .unwrap()
    }

    fn set() -> ShardSet {
        let store = store(&["mysql://u:p@db1/logs", "mysql://u@db2:3307/logs"]);
        ShardSet::new(&url("mysql://u@coord/logs"), &store)
    }

    #[test]
    fn a_shard_is_found_by_position_or_name() {
        let set = set();
        assert!(set.sharded);
        assert_eq!(set.find("1"), Ok(1));
        assert_eq!(set.find("db1:3306/logs"), Ok(0));
        assert!(set.find("2").unwrap_err().contains("lists 2"));
        let unknown = set.find("db3:3306/logs").unwrap_err();
        assert!(
            unknown.contains("db1:3306/logs, db2:3307/logs"),
            "{unknown}"
        );
    }

    #[test]
    fn without_shards_the_coordination_database_is_the_one_shard() {
        let set = ShardSet::new(&url("mysql://u@coord/logs"), &store(&[]));
        assert!(!set.sharded);
        assert_eq!(set.names(), [ShardName("coord:3306/logs".into())]);
    }
}
