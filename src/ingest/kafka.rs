//! librdkafka client settings built from logstamp's, and the dead-letter topic's producer.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::IngestError;
use crate::config::{KafkaProperties, Settings};
use crate::store::DeadLetter;

/// Defaults for an ingest consumer, before `kafka.properties`: cooperative rebalancing moves
/// only the partitions that change hands; a partition neither MySQL nor Kafka has an offset for
/// is read from its start, since a log pipeline should not skip what is already there; and the
/// prefetch is kept to 16 MiB per process (librdkafka's default is 64 MiB) to bound memory.
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("auto.offset.reset", "earliest"),
    ("queued.max.messages.kbytes", "16384"),
];

/// The consumer's settings: logstamp's defaults, then `kafka.properties`, then what logstamp
/// needs as it is (offsets are committed by logstamp, after MySQL).
pub fn consumer_config(settings: &Settings) -> ClientConfig {
    let kafka = &settings.kafka;
    let mut config = ClientConfig::new();
    for (name, value) in CONSUMER_DEFAULTS {
        config.set(*name, *value);
    }
    apply(&mut config, &kafka.properties);
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
pub fn producer_config(settings: &Settings) -> ClientConfig {
    let mut config = ClientConfig::new();
    apply(&mut config, &settings.kafka.properties);
    config
        .set("bootstrap.servers", &settings.kafka.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all");
    config
}

fn apply(config: &mut ClientConfig, properties: &KafkaProperties) {
    for (name, value) in &properties.0 {
        config.set(name, value);
    }
}

/// An error creating a client, without the value of the offending property (it may be a
/// password).
pub fn client_error(error: KafkaError) -> IngestError {
    match error {
        KafkaError::ClientConfig(_, description, name, _) => {
            IngestError::Config(format!("kafka.properties.{name}: {description}"))
        }
        KafkaError::ClientCreation(reason) => IngestError::Config(format!(
            "librdkafka refused the Kafka settings: {reason}"
        )),
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
    pub fn new(settings: &Settings) -> Result<Option<DeadLetterTopic>, IngestError> {
        let topic = settings.ingest.dead_letter_topic.trim();
        if topic.is_empty() {
            return Ok(None);
        }
        let producer = producer_config(settings).create().map_err(client_error)?;
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
