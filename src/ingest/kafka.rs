//! librdkafka client settings built from logstamp's, and the dead-letter topic's producer.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::IngestError;
use crate::kafka::CreateRedacted;
use crate::kafka::{FULL_PREFETCH_BACKOFF_MS, KafkaSettings};
use crate::store::DeadLetter;

/// How often librdkafka reports statistics to an ingest consumer (consumer lag comes from them).
pub const STATISTICS_INTERVAL_MS: &str = "5000";

/// Defaults for an ingest consumer, before `kafka.properties`: cooperative rebalancing moves
/// only the partitions that change hands (under the classic group protocol; KIP-848's
/// `group.protocol=consumer` is always incremental and refuses the setting, see
/// [`consumer_config`]); transactional producers' aborted messages are never read (librdkafka's
/// default, stated so nobody turns it off by accident: an aborted message stored here would be
/// a row Kafka itself says never happened); a partition neither MySQL nor Kafka has an offset for
/// is read from its start, since a log pipeline should not skip what is already there; the
/// prefetch is kept to 8 MiB per process (librdkafka's default is 64 MiB) to bound memory; a
/// partition whose prefetch is full is fetched again soon, not a second later (see
/// [`FULL_PREFETCH_BACKOFF_MS`]: with a backlog the prefetch is full most of the time, and with
/// the shorter wait 8 MiB sufficed); and statistics are reported for the consumer-lag metric.
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    (ASSIGNMENT_STRATEGY, "cooperative-sticky"),
    ("isolation.level", "read_committed"),
    ("auto.offset.reset", "earliest"),
    ("queued.max.messages.kbytes", "8192"),
    ("fetch.queue.backoff.ms", FULL_PREFETCH_BACKOFF_MS),
    ("statistics.interval.ms", STATISTICS_INTERVAL_MS),
];

const ASSIGNMENT_STRATEGY: &str = "partition.assignment.strategy";

/// The consumer's settings: logstamp's defaults, then `kafka.properties`, then what logstamp
/// needs as it is (offsets are committed by logstamp, after MySQL).
pub fn consumer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut config = kafka.properties.client_config();
    // KIP-848 groups are assigned by the broker; librdkafka refuses a client-side strategy.
    let broker_assigns = config
        .get("group.protocol")
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("consumer"));
    for (name, value) in CONSUMER_DEFAULTS {
        if broker_assigns && *name == ASSIGNMENT_STRATEGY {
            continue;
        }
        if config.get(name).is_none() {
            config.set(*name, *value);
        }
    }
    config
        .set("bootstrap.servers", &kafka.brokers)
        .set("group.id", &kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    if !kafka.instance_id.trim().is_empty() {
        config.set("group.instance.id", kafka.instance_id.trim());
    }
    config
}

/// A producer's settings: the shared `kafka.properties` (security, for one), then idempotent
/// delivery acknowledged by all in-sync replicas.
pub fn producer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut config = kafka.properties.client_config();
    config
        .set("bootstrap.servers", &kafka.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all");
    config
}

/// An error creating a client, without the value of the offending property (it may be a
/// password).
pub fn client_error(error: KafkaError) -> IngestError {
    match error {
        KafkaError::ClientConfig(_, description, name, _) => {
            IngestError::Config(format!("kafka.properties.{name}: {description}"))
        }
        KafkaError::ClientCreation(reason) => {
            IngestError::Config(format!("librdkafka refused the Kafka settings: {reason}"))
        }
        other => IngestError::kafka("creating a Kafka client", other),
    }
}

/// Sends dead letters to `ingest.dead_letter_topic`.
#[derive(Clone)]
pub struct DeadLetterTopic {
    producer: FutureProducer,
    topic: String,
}

/// How long a dead letter waits for room in the producer's queue.
const QUEUE_WAIT: Duration = Duration::from_secs(5);

impl DeadLetterTopic {
    /// The producer of `topic` (`ingest.dead_letter_topic`); none when it is empty.
    pub fn new(kafka: &KafkaSettings, topic: &str) -> Result<Option<DeadLetterTopic>, IngestError> {
        let topic = topic.trim();
        if topic.is_empty() {
            return Ok(None);
        }
        let producer = producer_config(kafka)
            .create_redacted()
            .map_err(client_error)?;
        Ok(Some(DeadLetterTopic {
            producer,
            topic: topic.to_string(),
        }))
    }

    /// Produces one dead letter of `source`'s partition; returns whether Kafka acknowledged
    /// it. Keyed by its coordinates, with the reason and coordinates in headers.
    pub async fn send(&self, source_topic: &str, partition: i32, letter: &DeadLetter) -> bool {
        let key = format!("{source_topic}/{partition}/{}", letter.offset);
        let partition_text = partition.to_string();
        let offset_text = letter.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "reason",
                value: Some(letter.reason.as_str()),
            })
            .insert(Header {
                key: "topic",
                value: Some(source_topic),
            })
            .insert(Header {
                key: "partition",
                value: Some(partition_text.as_str()),
            })
            .insert(Header {
                key: "offset",
                value: Some(offset_text.as_str()),
            });
        let record_text = letter.record.map(|r| r.to_string());
        let headers = match &record_text {
            Some(index) => headers.insert(Header {
                key: "record_index",
                value: Some(index.as_str()),
            }),
            None => headers,
        };
        let record = FutureRecord::to(&self.topic)
            .key(&key)
            .payload(&letter.raw)
            .headers(headers);
        match self.producer.send(record, QUEUE_WAIT).await {
            Ok(_) => true,
            Err((e, _)) => {
                tracing::warn!(
                    dead_letter_topic = %self.topic,
                    %key,
                    "producing a dead letter (it is in the dead_letters table): {e}"
                );
                false
            }
        }
    }
}

/// A message to produce.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// `None`: the partitioner chooses (by key).
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    pub payload: Option<Vec<u8>>,
}

/// Counts failed deliveries.
#[derive(Default)]
struct DeliveryCount {
    failed: std::sync::atomic::AtomicU64,
}

impl rdkafka::ClientContext for DeliveryCount {}

impl rdkafka::producer::ProducerContext for DeliveryCount {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result
            && self
                .failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                == 0
        {
            tracing::warn!("a message was not delivered: {e}");
        }
    }
}

/// Produces `messages` to `topic` as fast as the brokers take them and waits until every one is
/// acknowledged: for loading test data, the demo and benchmarks. Returns how many were sent.
pub fn produce_all(
    brokers: &str,
    topic: &str,
    messages: impl IntoIterator<Item = Outgoing>,
) -> Result<u64, IngestError> {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer<DeliveryCount> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .create_with_context(DeliveryCount::default())
        .map_err(client_error)?;
    let mut sent = 0u64;
    for message in messages {
        let mut record = BaseRecord::to(topic);
        if let Some(partition) = message.partition {
            record = record.partition(partition);
        }
        if let Some(key) = &message.key {
            record = record.key(key);
        }
        if let Some(payload) = &message.payload {
            record = record.payload(payload);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    back,
                )) => {
                    // The local queue is full: serve deliveries until it drains a little.
                    producer.poll(Duration::from_millis(10));
                    record = back;
                }
                Err((e, _)) => return Err(IngestError::kafka(format!("producing to {topic}"), e)),
            }
        }
        sent += 1;
        if sent.is_multiple_of(10_000) {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| IngestError::kafka(format!("flushing messages to {topic}"), e))?;
    let failed = producer
        .context()
        .failed
        .load(std::sync::atomic::Ordering::Relaxed);
    if failed > 0 {
        return Err(IngestError::Undelivered {
            topic: topic.to_string(),
            failed,
            sent,
        });
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Sources};

    #[test]
    fn properties_override_the_defaults_but_not_what_logstamp_needs() {
        let sources = Sources {
            env: Some(Default::default()),
            ..Sources::default()
        }
        .set("kafka.properties.auto.offset.reset", "latest")
        .set("kafka.properties.security.protocol", "SASL_SSL")
        .set("kafka.group_id", "fleet")
        .set("kafka.instance_id", "host-7");
        let settings = Settings::load(&sources).unwrap();
        let consumer = consumer_config(&settings.kafka);
        assert_eq!(consumer.get("auto.offset.reset"), Some("latest"));
        assert_eq!(consumer.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(
            consumer.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        assert_eq!(consumer.get("group.id"), Some("fleet"));
        assert_eq!(consumer.get("group.instance.id"), Some("host-7"));
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        let producer = producer_config(&settings.kafka);
        assert_eq!(producer.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(producer.get("acks"), Some("all"));
        assert_eq!(producer.get("auto.offset.reset"), Some("latest"));
    }

    #[test]
    fn a_kip_848_group_gets_no_client_side_assignment_strategy() {
        let sources = Sources {
            env: Some(Default::default()),
            ..Sources::default()
        }
        .set("kafka.properties.group.protocol", "consumer");
        let settings = Settings::load(&sources).unwrap();
        let consumer = consumer_config(&settings.kafka);
        assert_eq!(consumer.get("group.protocol"), Some("consumer"));
        assert_eq!(consumer.get(ASSIGNMENT_STRATEGY), None);
        assert_eq!(consumer.get("isolation.level"), Some("read_committed"));
        // librdkafka accepts the whole configuration: it refuses a consumer with a strategy.
        let created: Result<rdkafka::consumer::BaseConsumer, _> = consumer.create();
        assert!(created.is_ok(), "{:?}", created.err());
    }
}
