//! The writer the workers use: each batch goes to its partition's shard (`store.shards`), where
//! its rows and its offset commit in one local transaction; without shards, everything goes to
//! `mysql.url`'s database as before. Partitions are placed on first use (see
//! [`crate::store::shards`]) and their shard is remembered; a batch whose claim finds a
//! tombstone (the partition was moved) is written again to the shard it moved to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Batch, Row, ServerWriter, WriteOutcome};
use crate::id::Layout;
use crate::mysql::retry::{RetryPolicy, retrying};
use crate::mysql::{self, DbError, MysqlUrl};
use crate::store::rollup_plan::RollupPlan;
use crate::store::settings::{InsertMethod, StoreSettings};
use crate::store::shard_plan::{PartitionKey, moved_offset};
use crate::store::shards::{self, ShardHealth, ShardSet};

/// Writes batches, each to its partition's shard; clones share the connections, and batches of
/// different partitions may be written at once.
#[derive(Clone)]
pub struct Writer {
    inner: Arc<Inner>,
}

struct Inner {
    set: ShardSet,
    /// One per shard, in the order of `set.shards`.
    servers: Vec<ServerWriter>,
    /// The shard of each partition written so far.
    routes: Mutex<HashMap<PartitionKey, usize>>,
    health: Arc<ShardHealth>,
    retry: RetryPolicy,
    /// Bounds placing partitions through the coordination database (`store.write_timeout`).
    write_timeout: std::time::Duration,
}

impl Writer {
    /// A writer of `store`'s tables and `rollups`, stamping IDs of `layout`: in the shards of
    /// `store.shards`, placed through the coordination database at `url`, or, without shards,
    /// in the database at `url`.
    pub fn new(
        url: &MysqlUrl,
        store: &StoreSettings,
        rollups: &[RollupPlan],
        layout: Layout,
    ) -> Result<Writer, DbError> {
        let set = ShardSet::new(url, store);
        let servers = set
            .shards
            .iter()
            .map(|(_, url)| ServerWriter::new(url, store, rollups, layout))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Writer {
            inner: Arc::new(Inner {
                health: Arc::new(ShardHealth::new(set.names())),
                set,
                servers,
                routes: Mutex::default(),
                retry: store.retry_policy(),
                write_timeout: store.write_timeout,
            }),
        })
    }

    pub fn method(&self) -> InsertMethod {
        self.inner.servers[0].method()
    }

    /// The databases written to.
    pub fn shards(&self) -> &ShardSet {
        &self.inner.set
    }

    /// Which shards answer, kept up to date by the writes.
    pub fn health(&self) -> Arc<ShardHealth> {
        self.inner.health.clone()
    }

    /// The shard of a partition, when it is known and failing now. Cheap while every shard
    /// answers (no key is built, nothing allocated), so the dispatcher may ask before each
    /// write.
    pub fn failing_shard(&self, group: &str, topic: &str, partition: i32) -> Option<usize> {
        let health = &self.inner.health;
        if !self.inner.set.sharded || !health.any_failing() {
            return None;
        }
        let key = PartitionKey {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
        };
        let shard = *self.routes().get(&key)?;
        health.is_failing(shard).then_some(shard)
    }

    /// Writes a batch exactly once to its partition's shard, retrying transient failures for
    /// up to `store.give_up_after`. While its shard fails, the batch waits; the shard is
    /// marked failing in [`Writer::health`] until a write to it succeeds.
    pub async fn write(&self, batch: &Batch) -> Result<WriteOutcome, DbError> {
        let key = PartitionKey {
            group: batch.consumer_group.clone(),
            topic: batch.topic.clone(),
            partition: batch.partition,
        };
        retrying(
            self.inner.retry,
            || {
                format!(
                    "writing the batch of {key} from offset {}",
                    batch.start_offset
                )
            },
            async || {
                let shard = self.route(std::slice::from_ref(&key)).await?[0];
                let server = &self.inner.servers[shard];
                server.check(batch)?;
                let written = server.attempt(batch).await;
                self.observe(shard, &written);
                match written? {
                    WriteOutcome::OffsetMoved {
                        stored: Some(stored),
                    } if moved_offset(stored).is_some() => Err(self.moved(&key, shard)),
                    outcome => Ok(outcome),
                }
            },
        )
        .await
    }

    /// The partitions' stored next offsets, each from its shard (placing partitions new to
    /// the store), in the order asked; `None` for a partition never written. Retried like a
    /// write. With shards, a shard that does not answer gives `None` for its partitions (after
    /// a warning), so the others can start: their start is then Kafka's committed offset, and
    /// the conditional claim of their first batch finds the stored offset once the shard is
    /// back (nothing is written twice).
    pub async fn stored_offsets(
        &self,
        consumer_group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<i64>>, DbError> {
        let keys: Vec<PartitionKey> = partitions
            .iter()
            .map(|(topic, partition)| PartitionKey {
                group: consumer_group.to_string(),
                topic: topic.to_string(),
                partition: *partition,
            })
            .collect();
        retrying(
            self.inner.retry,
            || "reading stored offsets".to_string(),
            async || {
                let shards = self.route(&keys).await?;
                let mut stored = Vec::with_capacity(keys.len());
                for (key, shard) in keys.iter().zip(shards) {
                    let server = &self.inner.servers[shard];
                    let read = server
                        .stored_offset(consumer_group, &key.topic, key.partition)
                        .await;
                    self.observe(shard, &read);
                    let offset = match read {
                        Err(e) if self.inner.set.sharded && e.is_transient() => {
                            tracing::warn!(
                                partition = %key,
                                shard = %self.inner.set.shards[shard].0,
                                "the shard does not answer: starting from Kafka's committed \
                                 offset, checked by the first batch's claim: {e}"
                            );
                            None
                        }
                        read => read?,
                    };
                    if offset.is_some_and(|o| moved_offset(o).is_some()) {
                        return Err(self.moved(key, shard));
                    }
                    stored.push(offset);
                }
                Ok(stored)
            },
        )
        .await
    }

    /// Loads rows with one `LOAD DATA LOCAL INFILE` into the first shard, outside any batch,
    /// offset or transaction: the ceiling the benchmark compares the writer with.
    pub async fn load_unbatched(&self, rows: &[Row]) -> Result<u64, DbError> {
        self.inner.servers[0].load_unbatched(rows).await
    }

    /// Closes the connections once every clone's work is done.
    pub async fn close(self) -> Result<(), DbError> {
        let mut result = Ok(());
        for server in &self.inner.servers {
            if let Err(e) = server.close().await {
                result = Err(e);
            }
        }
        result
    }

    /// The shard of each partition: remembered, read from the coordination database, or
    /// placed there now.
    async fn route(&self, keys: &[PartitionKey]) -> Result<Vec<usize>, DbError> {
        if !self.inner.set.sharded {
            return Ok(vec![0; keys.len()]);
        }
        let known: Vec<Option<usize>> = {
            let routes = self.routes();
            keys.iter().map(|key| routes.get(key).copied()).collect()
        };
        if known.iter().all(Option::is_some) {
            return Ok(known.into_iter().flatten().collect());
        }
        let set = &self.inner.set;
        let placed = mysql::bound::within(
            self.inner.write_timeout,
            || "placing partitions through the coordination database".to_string(),
            async {
                let mut conn = mysql::connect(&set.coordination).await?;
                let placed = shards::assign(&mut conn, &set.names(), keys).await;
                let _ = conn.disconnect().await;
                placed
            },
        )
        .await?;
        let positions = keys
            .iter()
            .zip(placed)
            .map(|(key, name)| set.position(key, &name))
            .collect::<Result<Vec<usize>, DbError>>()?;
        let mut routes = self.routes();
        for (key, shard) in keys.iter().zip(&positions) {
            routes.insert(key.clone(), *shard);
        }
        Ok(positions)
    }

    /// Marks the shard failing after a transient error, answering after anything else.
    fn observe<T>(&self, shard: usize, result: &Result<T, DbError>) {
        let failing = match result {
            Err(e) if e.is_transient() => Some(e.to_string()),
            _ => None,
        };
        self.inner.health.set(shard, failing);
    }

    /// The partition left `shard`: forget it, so the next attempt reads where it went; a
    /// transient error, so that attempt follows.
    fn moved(&self, key: &PartitionKey, shard: usize) -> DbError {
        self.routes().remove(key);
        DbError::Busy(format!(
            "partition {key} was moved off shard {}: writing to where it went (if this \
             lasts, a move was interrupted: run logstamp shards move again)",
            self.inner.set.shards[shard].0
        ))
    }

    fn routes(&self) -> MutexGuard<'_, HashMap<PartitionKey, usize>> {
        // Held briefly and never across an await; the map stays whole if a holder panicked.
        self.inner
            .routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
