//! The name of one Kafka partition, shared by the consumer thread, the seek bookkeeping and the
//! dispatcher.

use std::fmt;
use std::sync::Arc;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Partition `partition` of the topic `logs`, for the unit tests of what keeps partitions.
#[cfg(test)]
pub fn logs(partition: i32) -> PartitionKey {
    PartitionKey {
        topic: "logs".into(),
        partition,
    }
}
