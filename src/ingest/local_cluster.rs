//! An in-process Kafka cluster: librdkafka's mock cluster, which speaks the Kafka protocol on
//! local TCP ports (producers, consumer groups, offset commits). It backs the tests, the demo,
//! `logstamp dev-broker` and the ingest benchmark, so none of them needs a Kafka installation.
//!
//! rdkafka's own `MockCluster` hides its native handle, and the handle is needed to set the
//! group's initial rebalance delay: the mock waits 3 s before the first join of every group
//! otherwise, like a real broker's `group.initial.rebalance.delay.ms`.

use std::ffi::{CStr, CString};

use rdkafka::ClientConfig;
use rdkafka::bindings as rdsys;
use rdkafka::client::{Client, DefaultClientContext};
use rdkafka::types::{RDKafkaRespErr, RDKafkaType};

#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error("starting the in-process Kafka cluster: {0}")]
    Start(String),
    #[error("in-process Kafka cluster: {what}: {code:?}")]
    Operation { what: String, code: RDKafkaRespErr },
}

/// A running in-process cluster; it stops when dropped.
pub struct LocalCluster {
    cluster: *mut rdsys::rd_kafka_mock_cluster_t,
    // The client the cluster was created from; it must outlive the cluster.
    _client: Client<DefaultClientContext>,
}

// librdkafka's mock cluster runs on its own thread; every mock API call hands an operation to
// that thread through a queue (rdkafka_mock.c), so the handle may be used from any thread.
unsafe impl Send for LocalCluster {}
unsafe impl Sync for LocalCluster {}

impl LocalCluster {
    /// Starts `brokers` brokers listening on free local ports, with no delay before a group's
    /// first rebalance.
    pub fn start(brokers: i32) -> Result<LocalCluster, LocalClusterError> {
        let start_error = |e: rdkafka::error::KafkaError| LocalClusterError::Start(e.to_string());
        let config = ClientConfig::new();
        let native = config.create_native_config().map_err(start_error)?;
        let client = Client::new(
            &config,
            native,
            RDKafkaType::RD_KAFKA_PRODUCER,
            DefaultClientContext,
        )
        .map_err(start_error)?;
        // SAFETY: the client's handle is valid for the client's life, which the struct extends
        // past the cluster's (the cluster is destroyed in `drop`, before the client).
        let cluster = unsafe { rdsys::rd_kafka_mock_cluster_new(client.native_ptr(), brokers) };
        if cluster.is_null() {
            return Err(LocalClusterError::Start(format!(
                "librdkafka could not create {brokers} mock brokers"
            )));
        }
        // SAFETY: `cluster` is a live mock cluster.
        unsafe { rdsys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 0) };
        Ok(LocalCluster {
            cluster,
            _client: client,
        })
    }

    /// Partitions a topic needs for this cluster to hold `messages` messages of about
    /// `message_bytes` each: it keeps only the last 5 MB (and 100,000 messages) of each
    /// partition. Budgeting 4 MiB and 64 bytes of overhead a message keeps under both (at most
    /// 65,000 messages a partition). At least 6, so several workers have partitions to share.
    pub fn partitions_to_hold(messages: u64, message_bytes: u64) -> i32 {
        const BYTES_PER_PARTITION: u64 = 4 << 20;
        let needed = messages
            .saturating_mul(message_bytes + 64)
            .div_ceil(BYTES_PER_PARTITION);
        i32::try_from(needed).unwrap_or(i32::MAX).max(6)
    }

    /// `host:port,...` for `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> String {
        // SAFETY: the cluster is live; the returned string is owned by it and copied at once.
        unsafe {
            CStr::from_ptr(rdsys::rd_kafka_mock_cluster_bootstraps(self.cluster))
                .to_string_lossy()
                .into_owned()
        }
    }

    /// Creates a topic (the mock broker does not serve the CreateTopics admin request).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), LocalClusterError> {
        let name = CString::new(topic).map_err(|_| LocalClusterError::Operation {
            what: format!("topic name {topic:?} holds a NUL byte"),
            code: RDKafkaRespErr::RD_KAFKA_RESP_ERR__INVALID_ARG,
        })?;
        // SAFETY: the cluster is live and `name` outlives the call.
        let code = unsafe {
            rdsys::rd_kafka_mock_topic_create(self.cluster, name.as_ptr(), partitions, 1)
        };
        check(code, || format!("creating topic {topic}"))
    }

    /// Makes the cluster's metadata name `host:port` as broker `broker_id`'s address, for
    /// clients that reach it through a forwarder: the broker still listens where it did.
    pub fn advertise(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
    ) -> Result<(), LocalClusterError> {
        let host = CString::new(host).map_err(|_| LocalClusterError::Operation {
            what: format!("host {host:?} holds a NUL byte"),
            code: RDKafkaRespErr::RD_KAFKA_RESP_ERR__INVALID_ARG,
        })?;
        // SAFETY: the cluster is live and `host` outlives the call (the mock copies it).
        unsafe {
            rdsys::rd_kafka_mock_broker_set_host_port(
                self.cluster,
                broker_id,
                host.as_ptr(),
                i32::from(port),
            )
        };
        Ok(())
    }

    /// Limits the versions of request `api_key` the cluster serves (it refuses others).
    pub fn limit_api_versions(
        &self,
        api_key: i16,
        min: i16,
        max: i16,
    ) -> Result<(), LocalClusterError> {
        // SAFETY: the cluster is live.
        let code = unsafe { rdsys::rd_kafka_mock_set_apiversion(self.cluster, api_key, min, max) };
        check(code, || {
            format!("limiting the versions of request {api_key}")
        })
    }

    /// Disconnects a broker (-1: all) and refuses new connections until [`Self::broker_up`].
    pub fn broker_down(&self, broker_id: i32) -> Result<(), LocalClusterError> {
        // SAFETY: the cluster is live.
        let code = unsafe { rdsys::rd_kafka_mock_broker_set_down(self.cluster, broker_id) };
        check(code, || format!("taking broker {broker_id} down"))
    }

    pub fn broker_up(&self, broker_id: i32) -> Result<(), LocalClusterError> {
        // SAFETY: the cluster is live.
        let code = unsafe { rdsys::rd_kafka_mock_broker_set_up(self.cluster, broker_id) };
        check(code, || format!("bringing broker {broker_id} up"))
    }
}

fn check(code: RDKafkaRespErr, what: impl FnOnce() -> String) -> Result<(), LocalClusterError> {
    if code == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(LocalClusterError::Operation { what: what(), code })
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // SAFETY: created in `start`, destroyed once, before the client it belongs to.
        unsafe { rdsys::rd_kafka_mock_cluster_destroy(self.cluster) };
    }
}

#[cfg(test)]
mod tests {
    use super::LocalCluster;

    #[test]
    fn partitions_hold_the_backlog_in_bytes_and_in_count() {
        // 1,000,000 messages of 300 bytes: 364 MB at 4 MiB a partition.
        assert_eq!(LocalCluster::partitions_to_hold(1_000_000, 300), 87);
        // Tiny messages: the overhead keeps them under the count limit.
        assert_eq!(LocalCluster::partitions_to_hold(1_000_000, 1), 16);
        assert_eq!(LocalCluster::partitions_to_hold(10, 300), 6);
    }
}
