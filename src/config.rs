//! Settings: built-in defaults < `--config FILE` < `LOGSTAMP__SECTION__KEY` environment variables
//! < command-line flags, validated into typed structs at start-up.
//!
//! Each section's types and checks belong to the module that uses them (`mysql`, `kafka`,
//! `id::settings`, `store::settings`, `ingest::settings`, `telemetry`, `relay::settings`,
//! `transform::settings`, `serve::settings`); this module only layers the sources, composes
//! the sections, runs the checks that span sections (rollups against the tables they read)
//! and says which layer set a bad key. A bad value is one error naming the setting and the layer it came from. Secrets
//! never reach a message: the MySQL URL's password is redacted wherever the URL is shown.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::id::settings::{IdSettings, RawIdSettings};
use crate::ingest::settings::{BatchSettings, IngestSettings, WorkerSettings};
use crate::kafka::KafkaSettings;
use crate::mysql::MysqlSettings;
use crate::relay::settings::RelaySettings;
use crate::serve::{Catalog, ServeSettings};
use crate::settings::SettingError;
use crate::store::log_table::TableSpec;
use crate::store::migrate::bookkeeping_tables;
use crate::store::partition_plan::PartitionScheme;
use crate::store::rollup_plan::{RollupPlan, RollupSettings, SourceTable};
use crate::store::settings::{PartitionSettings, StoreSettings};
use crate::telemetry::TelemetrySettings;
use crate::transform::Normalizer;
use crate::transform::settings::NormalizeRule;

/// The defaults, also shipped as `config/default.toml` for reference.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Environment variables `LOGSTAMP__SECTION__KEY` set `section.key`.
pub const ENV_PREFIX: &str = "LOGSTAMP";
const ENV_SEPARATOR: &str = "__";

/// Settings whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &["kafka.topics", "relay.tables", "store.shards"];

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
    pub serve: ServeSettings,
    /// Summary tables kept in step with the log tables (`[[rollups]]`).
    pub rollups: Vec<RollupSettings>,
    /// The rollups, checked against the tables.
    #[serde(skip)]
    pub rollup_plans: Vec<RollupPlan>,
    /// Rule sets applied, in order, to each message's document before its columns are mapped.
    pub normalize: Normalizer,
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
    serve: ServeSettings,
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

/// What spans sections: the store's tables take their partitioning from `[partitions]` and
/// their ID layout from `[id]`.
impl Settings {
    pub fn partition_scheme(&self) -> PartitionScheme {
        self.partitions.scheme(self.id.layout)
    }

    /// The log table.
    pub fn log_table(&self) -> TableSpec {
        TableSpec::log_table(&self.store, self.partition_scheme())
    }

    /// The fan-out tables (`[[store.tables]]`).
    pub fn fanout_tables(&self) -> Vec<TableSpec> {
        TableSpec::fanout(&self.store, &self.partition_scheme())
    }

    /// The log table, then the fan-out tables.
    pub fn tables(&self) -> Vec<TableSpec> {
        TableSpec::all(&self.store, self.partition_scheme())
    }

    /// What `logstamp serve` reads.
    pub fn serve_catalog(&self) -> Catalog {
        Catalog {
            tables: self.tables(),
            rollups: self.rollup_plans.clone(),
            layout: self.id.layout,
            ids_ahead: self.id.mark_window,
        }
    }

    /// What an ingest worker reads.
    pub fn worker(&self) -> WorkerSettings {
        WorkerSettings {
            mysql: self.mysql.clone(),
            kafka: self.kafka.clone(),
            store: self.store.clone(),
            tables: self.tables(),
            rollups: self.rollup_plans.clone(),
            normalize: self.normalize.clone(),
            batch: self.batch.clone(),
            ingest: self.ingest.clone(),
        }
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
            // A list given as one value is comma-separated, as in the environment.
            builder = if LIST_KEYS.contains(&key.as_str()) {
                let items: Vec<&str> = value.split(',').map(str::trim).collect();
                builder.set_override(key.as_str(), items)
            } else {
                builder.set_override(key.as_str(), value.as_str())
            }
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
        // A list's element (`relay.tables[1]`) is set by the variable of the whole list.
        let var = env_var(key.split('[').next().unwrap_or(key));
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

    /// Checks each section, then what spans sections; a bad key is reported with its layer.
    fn validate(&self, raw: RawSettings) -> Result<Settings, ConfigError> {
        let invalid = |e: SettingError| self.invalid(&e.key, e.reason);
        let id = IdSettings::try_from(raw.id).map_err(invalid)?;
        raw.mysql.validate().map_err(invalid)?;
        raw.kafka.validate().map_err(invalid)?;
        raw.store.validate().map_err(invalid)?;
        raw.batch.validate().map_err(invalid)?;
        raw.ingest.validate().map_err(invalid)?;
        raw.telemetry.validate().map_err(invalid)?;
        let mut relay = raw.relay;
        crate::relay::keys::read_secret_files(&mut relay.keys).map_err(invalid)?;
        relay.validate().map_err(invalid)?;
        raw.serve.validate().map_err(invalid)?;
        // With shards, each shard's database holds bookkeeping too (offsets, the relay's state).
        let databases = std::iter::once(&raw.mysql.url).chain(&raw.store.shards);
        for url in databases {
            relay
                .refuse_bookkeeping(url.database(), &bookkeeping_tables())
                .map_err(invalid)?;
        }
        let rollup_plans = compile_rollups(&raw.store, &raw.rollups).map_err(invalid)?;
        let normalize =
            Normalizer::compile(raw.normalize).map_err(|e| self.invalid(&e.key(), e.reason))?;
        Ok(Settings {
            mysql: raw.mysql,
            kafka: raw.kafka,
            id,
            partitions: raw.partitions,
            store: raw.store,
            batch: raw.batch,
            ingest: raw.ingest,
            telemetry: raw.telemetry,
            relay,
            serve: raw.serve,
            rollups: raw.rollups,
            rollup_plans,
            normalize,
        })
    }
}

/// The rollups, each checked against the table it reads (the log table or a fan-out table);
/// no name taken twice.
fn compile_rollups(
    store: &StoreSettings,
    rollups: &[RollupSettings],
) -> Result<Vec<RollupPlan>, SettingError> {
    let mut sources = vec![SourceTable {
        name: &store.table,
        columns: &store.columns,
        event_time: &store.event_time,
    }];
    sources.extend(store.tables.iter().map(|t| SourceTable {
        name: &t.name,
        columns: &t.columns,
        event_time: &t.event_time,
    }));
    let mut plans: Vec<RollupPlan> = Vec::new();
    for rollup in rollups {
        let plan = RollupPlan::compile(rollup, &sources)
            .map_err(|e| SettingError::new(format!("rollups.{}", rollup.name), e))?;
        if plans
            .iter()
            .any(|p| p.name.as_str().eq_ignore_ascii_case(plan.name.as_str()))
        {
            return Err(SettingError::new(
                "rollups",
                format!("rollup {} appears twice", plan.name),
            ));
        }
        plans.push(plan);
    }
    Ok(plans)
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
