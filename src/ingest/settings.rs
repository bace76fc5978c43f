//! The `[ingest]` and `[batch]` settings of a worker.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kafka::KafkaSettings;
use crate::mysql::MysqlSettings;
use crate::settings::{SettingError, TIB, at_least_one, at_most, at_most_a_year, duration_text};
use crate::store::log_table::TableSpec;
use crate::store::rollup_plan::RollupPlan;
use crate::store::settings::StoreSettings;
use crate::transform::{MessageFormat, Normalizer};

/// Everything one worker reads: its own sections and those of the parts it drives, composed
/// once the settings are loaded.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub mysql: MysqlSettings,
    pub kafka: KafkaSettings,
    pub store: StoreSettings,
    /// The log table, then the fan-out tables, as `store` and `[partitions]` say.
    pub tables: Vec<TableSpec>,
    pub rollups: Vec<RollupPlan>,
    pub normalize: Normalizer,
    pub batch: BatchSettings,
    pub ingest: IngestSettings,
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
    /// Message bytes held between Kafka and MySQL before the consumer stops taking messages.
    pub max_buffered_bytes: usize,
    /// How often `partitions ensure` runs.
    #[serde(with = "duration_text")]
    pub maintenance_interval: Duration,
}

impl IngestSettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        at_least_one("ingest.max_message_bytes", self.max_message_bytes as u64)?;
        // Kafka's own largest message (librdkafka's message.max.bytes).
        at_most(
            "ingest.max_message_bytes",
            self.max_message_bytes,
            1_000_000_000,
        )?;
        at_least_one("ingest.max_buffered_bytes", self.max_buffered_bytes as u64)?;
        at_most("ingest.max_buffered_bytes", self.max_buffered_bytes, TIB)?;
        at_most_a_year("ingest.shutdown_timeout", self.shutdown_timeout)?;
        at_least_one(
            "ingest.maintenance_interval",
            self.maintenance_interval.as_secs(),
        )?;
        at_most_a_year("ingest.maintenance_interval", self.maintenance_interval)
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

impl BatchSettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        at_least_one("batch.max_rows", self.max_rows as u64)?;
        at_most("batch.max_rows", self.max_rows, 10_000_000)?;
        at_least_one("batch.max_bytes", self.max_bytes as u64)?;
        at_most("batch.max_bytes", self.max_bytes, TIB)?;
        at_most_a_year("batch.linger_ms", self.linger())
    }
}
