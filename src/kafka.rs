//! The `[kafka]` settings every Kafka client of logstamp starts from: brokers, the consumer
//! group, topics, and librdkafka properties passed through (secrets never shown).

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::ClientConfig;
use rdkafka::config::{FromClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaError;

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
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaProperties(pub BTreeMap<String, String>);

impl fmt::Debug for KafkaProperties {
    /// As shown in the settings: secrets as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.shown()).finish()
    }
}

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
    /// Whether a property's value must not be shown: passwords, secrets, private keys, tokens
    /// and the OAUTHBEARER configuration (which may hold a client secret or a token).
    pub fn is_secret(name: &str) -> bool {
        [
            "password",
            "secret",
            "jaas",
            "key.pem",
            "keystore",
            "token",
            "oauthbearer.config",
            "ssl_key",
        ]
        .iter()
        .any(|s| name.contains(s))
    }

    /// Each property with its value as it may be shown.
    fn shown(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(name, value)| {
            let shown = if KafkaProperties::is_secret(name) {
                "***"
            } else {
                value.as_str()
            };
            (name.as_str(), shown)
        })
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
        s.collect_map(self.shown())
    }
}

/// Creating clients whose errors never show a secret (see [`redacted`]): every client logstamp
/// builds from the settings is made through these.
/// How long a consumer waits to fetch a partition again when its prefetch queue is full
/// (librdkafka's `fetch.queue.backoff.ms`, in ms). librdkafka's default, 1 s, paces a reader that
/// drains its queue in less than that to one queue per second: it held an ingest worker to
/// about 89,000 rows/s (120,000 with this) and the relay's applier to about 23,000 changes/s
/// (see docs/benchmarks.md).
pub const FULL_PREFETCH_BACKOFF_MS: &str = "20";

pub trait CreateRedacted {
    fn create_redacted<T: FromClientConfig>(&self) -> Result<T, KafkaError>;
    fn create_redacted_with_context<C, T>(&self, context: C) -> Result<T, KafkaError>
    where
        C: rdkafka::ClientContext,
        T: FromClientConfigAndContext<C>;
}

impl CreateRedacted for ClientConfig {
    fn create_redacted<T: FromClientConfig>(&self) -> Result<T, KafkaError> {
        self.create().map_err(|e| redacted(e, self))
    }

    fn create_redacted_with_context<C, T>(&self, context: C) -> Result<T, KafkaError>
    where
        C: rdkafka::ClientContext,
        T: FromClientConfigAndContext<C>,
    {
        self.create_with_context(context)
            .map_err(|e| redacted(e, self))
    }
}

/// librdkafka's configuration errors quote the value they refuse (rdkafka's
/// `KafkaError::ClientConfig` shows it, and librdkafka's description repeats it), and a refused
/// value may be a password under a misspelt name: the refused value is never shown, nor is the
/// value of any secret property wherever it appears in the message.
pub fn redacted(error: KafkaError, config: &ClientConfig) -> KafkaError {
    // `config_map` shows librdkafka's own sensitive keys sanitized: read each value with `get`.
    let secrets: Vec<&str> = config
        .config_map()
        .into_keys()
        .filter(|name| KafkaProperties::is_secret(name))
        .filter_map(|name| config.get(name))
        .filter(|value| !value.is_empty())
        .collect();
    let hide = |text: &str, also: Option<&str>| {
        let mut shown = text.to_string();
        for secret in secrets
            .iter()
            .copied()
            .chain(also.filter(|v| !v.is_empty()))
        {
            shown = shown.replace(secret, "***");
        }
        shown
    };
    match error {
        KafkaError::ClientConfig(code, description, key, value) => KafkaError::ClientConfig(
            code,
            hide(&description, Some(&value)),
            key,
            "***".to_string(),
        ),
        KafkaError::ClientCreation(message) => KafkaError::ClientCreation(hide(&message, None)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::producer::BaseProducer;

    use super::*;

    fn refused(config: &ClientConfig) -> String {
        match config.create_redacted::<BaseProducer>() {
            Ok(_) => panic!("librdkafka took {config:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_refused_value_is_never_shown_even_under_a_misspelt_name() {
        let mut config = ClientConfig::new();
        config.set("sasl.pasword", "hunter2-secret");
        let message = refused(&config);
        assert!(message.contains("sasl.pasword"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn a_refused_value_quoted_in_the_description_is_hidden() {
        let mut config = ClientConfig::new();
        config.set("sasl.password", "s3cret-value");
        config.set("security.protocol", "s3cret-value");
        let message = refused(&config);
        assert!(message.contains("security.protocol"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }

    #[test]
    fn every_librdkafka_secret_property_is_hidden_in_debug_and_serialized_forms() {
        let names = [
            "sasl.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.token.endpoint.url.secret",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "ssl_key",
            "sasl.jaas.config",
        ];
        let properties = KafkaProperties(
            names
                .iter()
                .map(|n| (n.to_string(), format!("value-of-{n}")))
                .collect(),
        );
        let debug = format!("{properties:?}");
        let json = serde_json::to_string(&properties).unwrap();
        for name in names {
            assert!(KafkaProperties::is_secret(name), "{name}");
        }
        assert!(!debug.contains("value-of"), "{debug}");
        assert!(!json.contains("value-of"), "{json}");
    }
}
