//! Settings: built-in defaults < `--config FILE` < `LOGSTAMP__SECTION__KEY` environment variables
//! < command-line flags, validated into typed structs at start-up.
//!
//! A bad value is one error naming the setting and the layer it came from. Secrets never reach a
//! message: the MySQL URL's password is redacted wherever the URL is shown.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::id::{IdError, Layout};
use crate::mysql::Ident;
use crate::mysql::MysqlSettings;
use crate::store::Period;
use crate::store::schema::ColumnSpec;
use crate::time::{Zone, parse_time};
use crate::transform::MessageFormat;
use crate::transform::rollup::{RollupPlan, RollupSettings, SourceTable};
use crate::transform::route::Condition;

/// The defaults, also shipped as `config/default.toml` for reference.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Environment variables `LOGSTAMP__SECTION__KEY` set `section.key`.
pub const ENV_PREFIX: &str = "LOGSTAMP";
const ENV_SEPARATOR: &str = "__";

/// Settings whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &["kafka.topics", "relay.tables"];

/// Where settings are read from, beyond the built-in defaults.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The `--config` file.
    pub file: Option<PathBuf>,
    /// Environment variables to read; `None` reads the process environment.
    pub env: Option<HashMap<String, String>>,
    /// Command-line flags, as `(key, value)` such as `("id.service_id", "7")`.
    pub overrides: Vec<(String, String)>,
}

impl Sources {
    pub fn with_file(file: Option<PathBuf>) -> Sources {
        Sources {
            file,
            ..Sources::default()
        }
    }

    pub fn set(mut self, key: &str, value: impl ToString) -> Sources {
        self.overrides.push((key.to_string(), value.to_string()));
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("invalid setting {key} (from {origin}): {reason}")]
    Invalid {
        key: String,
        origin: String,
        reason: String,
    },
    #[error("invalid configuration: {0}")]
    Other(String),
}

/// The validated settings of one process.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub mysql: MysqlSettings,
    pub kafka: KafkaSettings,
    pub id: IdSettings,
    pub partitions: PartitionSettings,
    pub store: StoreSettings,
    pub batch: BatchSettings,
    pub ingest: IngestSettings,
    pub telemetry: TelemetrySettings,
    pub relay: RelaySettings,
    /// Summary tables kept in step with the log tables (`[[rollups]]`).
    pub rollups: Vec<RollupSettings>,
    /// The rollups, checked against the tables.
    #[serde(skip)]
    pub rollup_plans: Vec<RollupPlan>,
    /// Rule sets applied, in order, to each message's document before its columns are mapped.
    pub normalize: Vec<NormalizeRule>,
}

/// One `[[normalize]]` rule set: steps applied in order to the documents of some topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NormalizeRule {
    /// Topics the set applies to; empty: every topic.
    #[serde(default)]
    pub topics: Vec<String>,
    pub steps: Vec<NormalizeStep>,
}

/// One step of a rule set. Fields are JSON pointers (RFC 6901) into the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum NormalizeStep {
    /// Moves a value, if present.
    Rename { from: String, to: String },
    /// Copies a value, if present.
    Extract { from: String, to: String },
    /// Removes a value, if present.
    Drop { field: String },
    /// Sets a value where it is missing or null.
    Default {
        field: String,
        value: serde_json::Value,
    },
    /// Lowercases a string.
    Lowercase { field: String },
    /// Replaces a string (or a number's or boolean's text) found in `values`.
    Map {
        field: String,
        values: BTreeMap<String, String>,
    },
    /// Reads a time in the first of `formats` that matches and writes it as RFC 3339 UTC.
    Time {
        field: String,
        formats: Vec<String>,
        /// Zone of times written without an offset.
        #[serde(default = "utc_name")]
        zone: String,
    },
    /// Fails where the value is missing or null.
    Require { field: String },
}

fn utc_name() -> String {
    "UTC".to_string()
}

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

    fn check(&self) -> Result<(), (String, String)> {
        for name in self.0.keys() {
            if let Some((_, why)) = RESERVED_PROPERTIES.iter().find(|(r, _)| r == name) {
                return Err((
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

/// The ingest worker's own settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub format: MessageFormat,
    /// Larger messages go to the dead letters.
    pub max_message_bytes: usize,
    /// 0 for no limit.
    pub max_records_per_second: u32,
    /// Dead letters are also produced to this topic; empty for none.
    pub dead_letter_topic: String,
    #[serde(with = "duration_text")]
    pub shutdown_timeout: Duration,
    /// Message bytes held between Kafka and MySQL before the consumer pauses.
    pub max_buffered_bytes: usize,
    /// How often `partitions ensure` runs.
    #[serde(with = "duration_text")]
    pub maintenance_interval: Duration,
}

/// The ID settings, with the layout already checked.
#[derive(Debug, Clone, Serialize)]
pub struct IdSettings {
    #[serde(serialize_with = "serialize_layout")]
    pub layout: Layout,
    pub service_id: ServiceIdSetting,
    /// The service IDs `auto` may claim; within the layout.
    #[serde(serialize_with = "as_text::serialize")]
    pub auto_range: AutoRange,
    /// How long a service-ID lease lasts without renewal, judged by the database's clock.
    #[serde(with = "duration_text")]
    pub lease_ttl: Duration,
    /// How far ahead of the IDs issued the lease keeps the persisted high-water mark.
    #[serde(with = "duration_text")]
    pub mark_window: Duration,
    pub max_borrow_seconds: u32,
}

impl IdSettings {
    /// The service IDs `auto` may claim, checked against the layout at start-up.
    pub fn auto_ids(&self) -> std::ops::RangeInclusive<u32> {
        match self.auto_range {
            AutoRange::All => 0..=self.layout.max_service_id(),
            AutoRange::Span { first, last } => first..=last,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdSettings {
    service_bits: u8,
    epoch: Epoch,
    service_id: ServiceIdSetting,
    #[serde(deserialize_with = "as_text::deserialize")]
    auto_range: AutoRange,
    #[serde(with = "duration_text")]
    lease_ttl: Duration,
    #[serde(with = "duration_text")]
    mark_window: Duration,
    max_borrow_seconds: u32,
}

/// `id.service_id`: one configured ID, or `"auto"` to lease the lowest free one in
/// `id.auto_range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceIdSetting {
    Fixed(u32),
    Auto,
}

impl ServiceIdSetting {
    /// The configured ID, `None` for `auto`.
    pub fn fixed(self) -> Option<u32> {
        match self {
            ServiceIdSetting::Fixed(id) => Some(id),
            ServiceIdSetting::Auto => None,
        }
    }
}

impl fmt::Display for ServiceIdSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceIdSetting::Fixed(id) => write!(f, "{id}"),
            ServiceIdSetting::Auto => f.write_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for ServiceIdSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ServiceIdSetting, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(i64),
            Text(String),
        }
        let bad = || D::Error::custom("not a service ID: use a number from 0, or \"auto\"");
        match Given::deserialize(d)? {
            Given::Number(n) => u32::try_from(n)
                .map(ServiceIdSetting::Fixed)
                .map_err(|_| bad()),
            Given::Text(text) if text.trim() == "auto" => Ok(ServiceIdSetting::Auto),
            Given::Text(text) => text
                .trim()
                .parse()
                .map(ServiceIdSetting::Fixed)
                .map_err(|_| bad()),
        }
    }
}

impl Serialize for ServiceIdSetting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ServiceIdSetting::Fixed(id) => s.serialize_u32(*id),
            ServiceIdSetting::Auto => s.serialize_str("auto"),
        }
    }
}

/// `id.auto_range`: `"all"` (every ID of the layout) or `"FIRST-LAST"`, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoRange {
    All,
    Span { first: u32, last: u32 },
}

impl fmt::Display for AutoRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AutoRange::All => f.write_str("all"),
            AutoRange::Span { first, last } => write!(f, "{first}-{last}"),
        }
    }
}

impl std::str::FromStr for AutoRange {
    type Err = String;

    fn from_str(text: &str) -> Result<AutoRange, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(AutoRange::All);
        }
        let shape = "use \"all\" or \"FIRST-LAST\" such as \"0-63\"";
        let (first, last) = text.split_once('-').ok_or_else(|| shape.to_string())?;
        let number = |t: &str| t.trim().parse::<u32>().map_err(|_| shape.to_string());
        let (first, last) = (number(first)?, number(last)?);
        if first > last {
            return Err(format!("the range {first}-{last} is reversed"));
        }
        Ok(AutoRange::Span { first, last })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSettings {
    #[serde(with = "as_text")]
    pub period: Period,
    #[serde(with = "as_text")]
    pub time_zone: Zone,
    pub ahead: u32,
    pub retention: Retention,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    #[serde(
        serialize_with = "serialize_ident",
        deserialize_with = "as_text::deserialize"
    )]
    pub table: Ident,
    pub concurrency: usize,
    pub insert_method: InsertMethod,
    /// How long a batch failing for a transient reason is retried before the writer gives up.
    #[serde(with = "duration_text")]
    pub give_up_after: Duration,
    pub payload: bool,
    pub columns: Vec<ColumnSpec>,
    /// Fan-out tables: records (or those meeting `when`) also go there, with the same ID.
    #[serde(default)]
    pub tables: Vec<FanoutTable>,
}

/// One `[[store.tables]]`: a table partitioned like the log table, keyed by the record's ID.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FanoutTable {
    #[serde(
        serialize_with = "serialize_ident",
        deserialize_with = "as_text::deserialize"
    )]
    pub name: Ident,
    /// Conditions on the record, all of which must hold; none: every record.
    #[serde(default)]
    pub when: Vec<Condition>,
    /// Keep the whole record in a `payload` column here too.
    #[serde(default)]
    pub payload: bool,
    pub columns: Vec<ColumnSpec>,
}

/// How the writer sends rows to MySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InsertMethod {
    Text,
    Prepared,
    Batch,
    LoadData,
}

impl fmt::Display for InsertMethod {
    /// The setting's own spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertMethod::Text => "text",
            InsertMethod::Prepared => "prepared",
            InsertMethod::Batch => "batch",
            InsertMethod::LoadData => "load_data",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSettings {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub linger_ms: u64,
}

impl BatchSettings {
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }
}

/// The cross-data-centre relay of this data centre: its capture and the remote appliers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    /// This data centre's name: it names the capture's topic and the rows of the relay tables.
    pub dc: String,
    /// The replica server_id the capture presents to the local server; 0 means unset.
    pub server_id: u32,
    /// Relayed tables, `schema.table` or `schema.*`.
    pub tables: Vec<String>,
    /// A data centre's topic is this prefix followed by its name.
    pub topic_prefix: String,
    pub loop_filter: LoopFilterMode,
    #[serde(with = "duration_text")]
    pub cache_ttl: Duration,
    #[serde(with = "duration_text")]
    pub checkpoint_interval: Duration,
    /// Source transactions an applier that is behind may commit together.
    pub apply_batch: usize,
    /// The data centres whose changes are applied here.
    pub remotes: Vec<RemoteDc>,
}

impl RelaySettings {
    /// The topic a data centre's capture publishes to.
    pub fn topic(&self, dc: &str) -> String {
        format!("{}{dc}", self.topic_prefix)
    }
}

/// A remote data centre whose topic this relay applies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteDc {
    pub dc: String,
    /// Kafka holding that data centre's topic; empty means `kafka.brokers`.
    #[serde(default)]
    pub brokers: String,
}

impl RemoteDc {
    /// Where that data centre's topic is read: its own brokers, else `local` (`kafka.brokers`).
    pub fn brokers_or<'a>(&'a self, local: &'a str) -> &'a str {
        if self.brokers.trim().is_empty() {
            local
        } else {
            &self.brokers
        }
    }
}

/// How the relay keeps changes it applied from being captured and sent back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopFilterMode {
    Marker,
    SkipReplication,
    Cache,
}

impl fmt::Display for LoopFilterMode {
    /// The setting's own spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoopFilterMode::Marker => "marker",
            LoopFilterMode::SkipReplication => "skip_replication",
            LoopFilterMode::Cache => "cache",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    pub log_level: String,
    pub listen: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    mysql: MysqlSettings,
    kafka: KafkaSettings,
    id: RawIdSettings,
    partitions: PartitionSettings,
    store: StoreSettings,
    batch: BatchSettings,
    ingest: IngestSettings,
    telemetry: TelemetrySettings,
    relay: RelaySettings,
    #[serde(default)]
    rollups: Vec<RollupSettings>,
    normalize: Vec<NormalizeRule>,
}

impl Settings {
    /// The built-in defaults alone.
    pub fn defaults() -> Result<Settings, ConfigError> {
        Settings::load(&Sources {
            env: Some(HashMap::new()),
            ..Sources::default()
        })
    }

    pub fn load(sources: &Sources) -> Result<Settings, ConfigError> {
        let layered = Layered::build(sources)?;
        let raw: RawSettings = layered
            .config
            .clone()
            .try_deserialize()
            .map_err(|e| layered.explain(e))?;
        layered.validate(raw)
    }
}

/// The merged layers, kept to tell where a value came from.
struct Layered<'a> {
    config: config::Config,
    sources: &'a Sources,
}

impl<'a> Layered<'a> {
    fn build(sources: &'a Sources) -> Result<Layered<'a>, ConfigError> {
        let mut env = config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator(ENV_SEPARATOR)
            .separator(ENV_SEPARATOR)
            .try_parsing(true)
            .ignore_empty(true)
            .list_separator(",");
        for key in LIST_KEYS {
            env = env.with_list_parse_key(key);
        }
        if let Some(vars) = &sources.env {
            env = env.source(Some(vars.clone()));
        }
        let mut builder = config::Config::builder().add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ));
        if let Some(path) = &sources.file {
            if !path.is_file() {
                return Err(ConfigError::File {
                    path: path.display().to_string(),
                    reason: "no such file".into(),
                });
            }
            builder = builder
                .add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml));
        }
        builder = builder.add_source(env);
        for (key, value) in &sources.overrides {
            builder = builder
                .set_override(key.as_str(), value.as_str())
                .map_err(|e| ConfigError::Other(e.to_string()))?;
        }
        let config = builder.build().map_err(|e| match e {
            config::ConfigError::FileParse { uri, cause } => ConfigError::File {
                path: sources
                    .file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .or(uri)
                    .unwrap_or_default(),
                reason: without_source_lines(&cause.to_string()),
            },
            other => ConfigError::Other(one_line(&other.to_string())),
        })?;
        Ok(Layered { config, sources })
    }

    /// Which layer the current value of `key` (a setting, or a section for unknown fields) came
    /// from, checking the layers from the top.
    fn origin(&self, key: &str) -> String {
        let is_key = |k: &str| k == key || k.starts_with(&format!("{key}."));
        if self.sources.overrides.iter().any(|(k, _)| is_key(k)) {
            return "the command line".to_string();
        }
        let var = env_var(key);
        let env_names: Vec<String> = match &self.sources.env {
            Some(vars) => vars.keys().cloned().collect(),
            None => std::env::vars_os()
                .filter_map(|(k, _)| k.into_string().ok())
                .collect(),
        };
        if let Some(name) = env_names.iter().find(|n| {
            n.eq_ignore_ascii_case(&var)
                || n.to_ascii_uppercase()
                    .starts_with(&format!("{var}{ENV_SEPARATOR}"))
        }) {
            return format!("environment variable {name}");
        }
        if let Some(path) = &self.sources.file {
            let in_file = config::Config::builder()
                .add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml))
                .build()
                .is_ok_and(|file| file.get::<config::Value>(key).is_ok());
            if in_file {
                return format!("file {}", path.display());
            }
        }
        "the built-in defaults".to_string()
    }

    fn invalid(&self, key: &str, reason: impl fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_string(),
            origin: self.origin(key),
            reason: without_quoted_strings(&one_line(&reason.to_string())),
        }
    }

    fn explain(&self, error: config::ConfigError) -> ConfigError {
        match error {
            config::ConfigError::At {
                error,
                key: Some(key),
                ..
            } => {
                let key = dotted_key(&key);
                // An unknown field is reported at its section: name the field itself, so the
                // layer that set it is found even when other layers set the same section.
                let key = match unknown_field(&error.to_string()) {
                    Some(field) => format!("{key}.{field}"),
                    None => key,
                };
                self.invalid(&key, error)
            }
            config::ConfigError::Type {
                unexpected,
                expected,
                key: Some(key),
                ..
            } => self.invalid(&key, format!("expected {expected}, got {unexpected}")),
            config::ConfigError::NotFound(key) => self.invalid(&key, "missing"),
            other => match unknown_field(&other.to_string()) {
                // An unknown section.
                Some(field) => self.invalid(&field, other),
                None => ConfigError::Other(without_quoted_strings(&one_line(&other.to_string()))),
            },
        }
    }

    fn validate(&self, raw: RawSettings) -> Result<Settings, ConfigError> {
        let layout = Layout::new(raw.id.service_bits, raw.id.epoch.0).map_err(|e| match e {
            IdError::EpochOutOfRange(_) => self.invalid("id.epoch", e),
            _ => self.invalid("id.service_bits", e),
        })?;
        if let ServiceIdSetting::Fixed(id) = raw.id.service_id {
            layout
                .check_service_id(id)
                .map_err(|e| self.invalid("id.service_id", e))?;
        }
        if let AutoRange::Span { last, .. } = raw.id.auto_range {
            layout
                .check_service_id(last)
                .map_err(|e| self.invalid("id.auto_range", e))?;
        }
        if raw.id.lease_ttl < Duration::from_secs(1) {
            return Err(self.invalid("id.lease_ttl", "must be at least 1s"));
        }
        // The lease raises the mark when half the window is left; IDs may run up to the
        // borrowing bound ahead of the clock, and the raise needs a moment.
        let min_window = 2 * (u64::from(raw.id.max_borrow_seconds) + 2);
        if raw.id.mark_window < Duration::from_secs(min_window) {
            return Err(self.invalid(
                "id.mark_window",
                format!(
                    "must be at least {min_window}s: twice id.max_borrow_seconds plus 4s, so \
                     the mark stays ahead of IDs borrowed from future seconds"
                ),
            ));
        }
        let non_empty = |key: &str, value: &str| {
            if value.trim().is_empty() {
                Err(self.invalid(key, "must not be empty"))
            } else {
                Ok(())
            }
        };
        non_empty("kafka.brokers", &raw.kafka.brokers)?;
        non_empty("kafka.group_id", &raw.kafka.group_id)?;
        if raw.kafka.topics.is_empty() || raw.kafka.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(self.invalid("kafka.topics", "needs at least one topic, none empty"));
        }
        let at_least_one = |key: &str, value: u64| {
            if value == 0 {
                Err(self.invalid(key, "must be at least 1"))
            } else {
                Ok(())
            }
        };
        at_least_one("store.concurrency", raw.store.concurrency as u64)?;
        let mut seen = std::collections::HashSet::new();
        for column in &raw.store.columns {
            column
                .ident()
                .map_err(|e| self.invalid("store.columns", e))?;
            if !seen.insert(column.name.to_ascii_lowercase()) {
                return Err(self.invalid(
                    "store.columns",
                    format!("column {:?} is mapped twice", column.name),
                ));
            }
        }
        at_least_one("batch.max_rows", raw.batch.max_rows as u64)?;
        at_least_one("batch.max_bytes", raw.batch.max_bytes as u64)?;
        raw.kafka
            .properties
            .check()
            .map_err(|(key, reason)| self.invalid(&key, reason))?;
        at_least_one(
            "ingest.max_message_bytes",
            raw.ingest.max_message_bytes as u64,
        )?;
        at_least_one(
            "ingest.max_buffered_bytes",
            raw.ingest.max_buffered_bytes as u64,
        )?;
        at_least_one(
            "ingest.maintenance_interval",
            raw.ingest.maintenance_interval.as_secs(),
        )?;
        self.check_upper_bounds(&raw)?;
        let rollup_plans = self.validate_fanout(&raw.store, &raw.rollups)?;
        tracing_subscriber::EnvFilter::try_new(&raw.telemetry.log_level)
            .map_err(|e| self.invalid("telemetry.log_level", e))?;
        self.validate_relay(&raw.relay)?;
        crate::transform::normalize::check(&raw.normalize).map_err(|e| {
            let key = match e.step {
                Some(step) => format!("normalize[{}].steps[{step}]", e.set),
                None => format!("normalize[{}]", e.set),
            };
            self.invalid(&key, e.reason)
        })?;
        Ok(Settings {
            mysql: raw.mysql,
            kafka: raw.kafka,
            id: IdSettings {
                layout,
                service_id: raw.id.service_id,
                auto_range: raw.id.auto_range,
                lease_ttl: raw.id.lease_ttl,
                mark_window: raw.id.mark_window,
                max_borrow_seconds: raw.id.max_borrow_seconds,
            },
            partitions: raw.partitions,
            store: raw.store,
            batch: raw.batch,
            ingest: raw.ingest,
            telemetry: raw.telemetry,
            relay: raw.relay,
            rollups: raw.rollups,
            rollup_plans,
            normalize: raw.normalize,
        })
    }

    /// Sizes, counts and durations stay far below where the arithmetic done with them (a size
    /// plus one, an instant plus a duration, a buffer of that many entries) could overflow.
    fn check_upper_bounds(&self, raw: &RawSettings) -> Result<(), ConfigError> {
        const TIB: u64 = 1 << 40;
        const YEAR: Duration = Duration::from_secs(365 * 86_400);
        let counts = [
            // Kafka's own largest message (librdkafka's message.max.bytes).
            (
                "ingest.max_message_bytes",
                raw.ingest.max_message_bytes,
                1_000_000_000,
            ),
            (
                "ingest.max_buffered_bytes",
                raw.ingest.max_buffered_bytes,
                TIB,
            ),
            ("batch.max_bytes", raw.batch.max_bytes, TIB),
            ("batch.max_rows", raw.batch.max_rows, 10_000_000),
            ("store.concurrency", raw.store.concurrency, 1_024),
            ("relay.apply_batch", raw.relay.apply_batch, 100_000),
        ];
        for (key, value, max) in counts {
            if u64::try_from(value).map_or(true, |v| v > max) {
                return Err(self.invalid(key, format!("must be at most {max}")));
            }
        }
        let linger = Duration::from_millis(raw.batch.linger_ms);
        let durations = [
            ("batch.linger_ms", linger),
            ("ingest.shutdown_timeout", raw.ingest.shutdown_timeout),
            (
                "ingest.maintenance_interval",
                raw.ingest.maintenance_interval,
            ),
            ("store.give_up_after", raw.store.give_up_after),
            ("id.lease_ttl", raw.id.lease_ttl),
            ("id.mark_window", raw.id.mark_window),
            ("relay.cache_ttl", raw.relay.cache_ttl),
            ("relay.checkpoint_interval", raw.relay.checkpoint_interval),
        ];
        for (key, value) in durations {
            if value > YEAR {
                return Err(self.invalid(key, "must be at most 365 days"));
            }
        }
        Ok(())
    }

    /// Fan-out tables and rollups: valid names, none taken twice, columns and conditions that
    /// make sense; returns the checked rollups.
    fn validate_fanout(
        &self,
        store: &StoreSettings,
        rollups: &[RollupSettings],
    ) -> Result<Vec<RollupPlan>, ConfigError> {
        let mut tables =
            std::collections::HashSet::from([store.table.as_str().to_ascii_lowercase()]);
        for table in &store.tables {
            let key = format!("store.tables.{}", table.name);
            if !tables.insert(table.name.as_str().to_ascii_lowercase()) {
                return Err(self.invalid(
                    "store.tables",
                    format!("table {} appears twice", table.name),
                ));
            }
            if table.columns.is_empty() {
                return Err(self.invalid(&key, "needs at least one column"));
            }
            let mut seen = std::collections::HashSet::new();
            for column in &table.columns {
                column.ident().map_err(|e| self.invalid(&key, e))?;
                if !seen.insert(column.name.to_ascii_lowercase()) {
                    return Err(
                        self.invalid(&key, format!("column {:?} is mapped twice", column.name))
                    );
                }
            }
            for condition in &table.when {
                condition.check().map_err(|e| self.invalid(&key, e))?;
            }
        }
        let mut sources = vec![SourceTable {
            name: &store.table,
            columns: &store.columns,
        }];
        sources.extend(store.tables.iter().map(|t| SourceTable {
            name: &t.name,
            columns: &t.columns,
        }));
        let mut plans: Vec<RollupPlan> = Vec::new();
        for rollup in rollups {
            let plan = RollupPlan::compile(rollup, &sources)
                .map_err(|e| self.invalid(&format!("rollups.{}", rollup.name), e))?;
            if plans
                .iter()
                .any(|p| p.name.as_str().eq_ignore_ascii_case(plan.name.as_str()))
            {
                return Err(self.invalid("rollups", format!("rollup {} appears twice", plan.name)));
            }
            plans.push(plan);
        }
        Ok(plans)
    }

    fn validate_relay(&self, relay: &RelaySettings) -> Result<(), ConfigError> {
        // Names end up in topic names and in relay tables' keys: keep them to what both take.
        let dc_name = |key: &str, name: &str| {
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if valid {
                Ok(())
            } else {
                Err(self.invalid(
                    key,
                    format!("{name:?} is not a data centre name: use 1 to 64 ASCII letters, digits, _ and -"),
                ))
            }
        };
        dc_name("relay.dc", &relay.dc)?;
        let mut seen = std::collections::HashSet::new();
        for remote in &relay.remotes {
            dc_name("relay.remotes", &remote.dc)?;
            if remote.dc == relay.dc {
                return Err(self.invalid(
                    "relay.remotes",
                    format!("{:?} is this data centre (relay.dc)", remote.dc),
                ));
            }
            if !seen.insert(remote.dc.as_str()) {
                return Err(
                    self.invalid("relay.remotes", format!("{:?} is listed twice", remote.dc))
                );
            }
        }
        // Kafka topic names: ASCII letters, digits, `.`, `_` and `-`, at most 249 characters.
        let topic_ok = relay
            .topic_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && relay.topic_prefix.len() <= 249 - 64;
        if !topic_ok {
            return Err(self.invalid(
                "relay.topic_prefix",
                "use ASCII letters, digits, ., _ and -, at most 185 characters",
            ));
        }
        for pattern in &relay.tables {
            crate::relay::TablePattern::parse(pattern)
                .map_err(|e| self.invalid("relay.tables", e))?;
        }
        if relay.cache_ttl.is_zero() {
            return Err(self.invalid("relay.cache_ttl", "must be longer than 0"));
        }
        if relay.checkpoint_interval.is_zero() {
            return Err(self.invalid("relay.checkpoint_interval", "must be longer than 0"));
        }
        if relay.apply_batch == 0 {
            return Err(self.invalid("relay.apply_batch", "must be at least 1"));
        }
        Ok(())
    }
}

/// The environment variable that sets `key`.
pub fn env_var(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{ENV_SEPARATOR}{}",
        key.to_ascii_uppercase().replace('.', ENV_SEPARATOR)
    )
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A TOML parse error without the excerpt of the file it quotes (`2 | url = "..."`), which may
/// hold the MySQL password: the line and column remain.
fn without_source_lines(text: &str) -> String {
    let is_excerpt = |line: &str| {
        let line = line.trim_start();
        let after_number = line.trim_start_matches(|c: char| c.is_ascii_digit());
        line.starts_with('|') || (after_number.len() < line.len() && after_number.starts_with(" |"))
    };
    let kept: Vec<String> = text
        .lines()
        .filter(|line| !is_excerpt(line))
        .map(one_line)
        .filter(|line| !line.is_empty())
        .collect();
    kept.join(": ")
}

/// A key as the config crate reports it inside arrays (`normalize[0]steps[1]op`) written as a
/// path it can look up again (`normalize[0].steps[1].op`), so the layer that set it is found.
fn dotted_key(key: &str) -> String {
    let mut dotted = String::with_capacity(key.len() + 4);
    let mut after_index = false;
    for c in key.chars() {
        if after_index && c != '[' && c != '.' {
            dotted.push('.');
        }
        after_index = c == ']';
        dotted.push(c);
    }
    dotted
}

/// The field named by serde's "unknown field `name`, expected ..." message.
fn unknown_field(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("unknown field `")?;
    rest.split_once('`').map(|(field, _)| field.to_string())
}

/// Type errors quote the offending value (`string "..."`), which may be the MySQL URL with its
/// password given under the wrong key (`LOGSTAMP__MYSQL=mysql://...`): say only "a string".
fn without_quoted_strings(text: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(QUOTED) {
        shown.push_str(&rest[..at]);
        shown.push_str("a string");
        let quoted = &rest[at + QUOTED.len()..];
        // Skip to the closing quote; the value is Debug-escaped.
        let mut end = quoted.len();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &quoted[end..];
    }
    shown.push_str(rest);
    shown
}

/// The bare name, as it is written in settings (its `Display` is quoted for SQL).
fn serialize_ident<S: Serializer>(ident: &Ident, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(ident.as_str())
}

fn serialize_layout<S: Serializer>(layout: &Layout, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Shown {
        service_bits: u8,
        counter_bits: u8,
        epoch_unix_seconds: u64,
    }
    Shown {
        service_bits: layout.service_bits(),
        counter_bits: layout.counter_bits(),
        epoch_unix_seconds: layout.epoch_unix_seconds(),
    }
    .serialize(s)
}

/// (De)serializes a type through its `FromStr` and `Display`.
mod as_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(d)?;
        text.parse().map_err(de::Error::custom)
    }
}

/// A duration written for humans ("5m", "90s", "1h 30m").
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(text.trim())
            .map_err(|e| de::Error::custom(format!("{e}: use a duration like \"5m\" or \"90s\"")))
    }
}

/// The ID epoch: Unix seconds, or a date or RFC 3339 time.
#[derive(Debug, Clone, Copy)]
struct Epoch(u64);

impl<'de> Deserialize<'de> for Epoch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Epoch, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Seconds(u64),
            Signed(i64),
            // Environment values past i64 are read as floats, which would lose seconds.
            Float(f64),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Seconds(s) => Ok(Epoch(s)),
            Given::Signed(s) => Err(D::Error::custom(format!(
                "the epoch cannot be before 1970-01-01 (got {s})"
            ))),
            Given::Float(f) => Err(D::Error::custom(format!(
                "{f} is not usable: use whole Unix seconds below 2^63, a date or an RFC 3339 time"
            ))),
            Given::Text(text) if text.trim().parse::<u64>().is_ok() => {
                text.trim().parse().map(Epoch).map_err(D::Error::custom)
            }
            Given::Text(text) => {
                let t = parse_time(&text, &Zone::UTC).map_err(D::Error::custom)?;
                u64::try_from(t.timestamp())
                    .map(Epoch)
                    .map_err(|_| D::Error::custom("the epoch cannot be before 1970-01-01"))
            }
        }
    }
}

/// How long partitions are kept; `None` keeps them forever (`"off"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention(pub Option<Duration>);

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Retention, D::Error> {
        let text = String::deserialize(d)?;
        if matches!(text.trim(), "off" | "") {
            return Ok(Retention(None));
        }
        humantime::parse_duration(text.trim())
            .map(|d| Retention(Some(d)))
            .map_err(|e| {
                serde::de::Error::custom(format!("{e}: use a duration like \"90days\" or \"off\""))
            })
    }
}

impl Serialize for Retention {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            None => s.serialize_str("off"),
            Some(d) => s.collect_str(&humantime::format_duration(d)),
        }
    }
}
