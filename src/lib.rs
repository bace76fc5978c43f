//! logstamp: Kafka log records into MySQL, each stamped with a compact, time-ordered 64-bit ID.
//!
//! Modules follow the data: `id` makes IDs, `transform` maps messages to rows, `store` keeps them
//! in MySQL, `relay` keeps tables in sync between data centres, `serve` answers queries over HTTP
//! and serves the log explorer page; `config`, `telemetry` and `time`
//! serve every command.

pub mod config;
pub mod id;
pub mod ingest;
pub mod kafka;
pub mod mysql;
pub mod relay;
pub mod serve;
pub mod settings;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod transform;
