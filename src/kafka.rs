//! The `[kafka]` settings every Kafka client of logstamp starts from: brokers, the consumer
//! group, topics, and librdkafka properties passed through (secrets never shown).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::settings::{SettingError, non_empty};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    pub brokers: String,
    pub group_id: String,
    pub topics: Vec<String>,
    /// `group.instance.id` for static membership; empty for dynamic membership.
    pub instance_id: String,
    /// librdkafka settings passed through as they are.
    pub properties: KafkaProperties,
}

impl KafkaSettings {
    /// Refuses empty brokers, group or topics, and properties logstamp sets itself.
    pub fn validate(&self) -> Result<(), SettingError> {
        non_empty("kafka.brokers", &self.brokers)?;
        non_empty("kafka.group_id", &self.group_id)?;
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(SettingError::new(
                "kafka.topics",
                "needs at least one topic, none empty",
            ));
        }
        self.properties.check()
    }
}

/// librdkafka settings by their own names (`security.protocol`, `sasl.password`, ...). Written
/// as a TOML table or as `LOGSTAMP__KAFKA__PROPERTIES__SASL__PASSWORD` (each `__` a dot), so
/// nested tables are flattened to dotted names. Values that may be secrets are never shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaProperties(pub BTreeMap<String, String>);

/// Properties logstamp sets from its own settings or needs as they are.
const RESERVED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "set kafka.brokers"),
    ("group.id", "set kafka.group_id"),
    ("group.instance.id", "set kafka.instance_id"),
    (
        "enable.auto.commit",
        "offsets are committed by logstamp after each MySQL commit",
    ),
    (
        "enable.auto.offset.store",
        "offsets are committed by logstamp after each MySQL commit",
    ),
];

impl KafkaProperties {
    /// Whether a property's value must not be shown: passwords, secrets, private keys.
    pub fn is_secret(name: &str) -> bool {
        ["password", "secret", "jaas", "key.pem", "keystore", "token"]
            .iter()
            .any(|s| name.contains(s))
    }

    /// A librdkafka client configuration holding these settings, for the caller to add its
    /// own (which win).
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        for (name, value) in &self.0 {
            config.set(name, value);
        }
        config
    }

    fn check(&self) -> Result<(), SettingError> {
        for name in self.0.keys() {
            if let Some((_, why)) = RESERVED_PROPERTIES.iter().find(|(r, _)| r == name) {
                return Err(SettingError::new(
                    format!("kafka.properties.{name}"),
                    format!("cannot be set here: {why}"),
                ));
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for KafkaProperties {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KafkaProperties, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Bool(bool),
            Int(i64),
            Float(f64),
            Text(String),
            Table(BTreeMap<String, Given>),
        }
        fn flatten(prefix: &str, given: Given, out: &mut BTreeMap<String, String>) {
            let value = match given {
                Given::Bool(b) => b.to_string(),
                Given::Int(i) => i.to_string(),
                Given::Float(f) => f.to_string(),
                Given::Text(t) => t,
                Given::Table(table) => {
                    for (key, value) in table {
                        let name = if prefix.is_empty() {
                            key
                        } else {
                            format!("{prefix}.{key}")
                        };
                        flatten(&name, value, out);
                    }
                    return;
                }
            };
            out.insert(prefix.to_string(), value);
        }
        let table = BTreeMap::<String, Given>::deserialize(d)?;
        let mut flat = BTreeMap::new();
        flatten("", Given::Table(table), &mut flat);
        Ok(KafkaProperties(flat))
    }
}

impl Serialize for KafkaProperties {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(name, value)| {
            let shown = if KafkaProperties::is_secret(name) {
                "***"
            } else {
                value.as_str()
            };
            (name, shown)
        }))
    }
}
