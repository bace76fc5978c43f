//! Everything logstamp does in MySQL. The submodules here without I/O hold the pure parts
//! (identifiers, partition bounds, DDL text) so they are tested without a server.

pub mod compression;
pub mod event_histogram;
pub mod federate;
pub mod filter_language;
pub mod follow;
pub mod lease;
pub mod line_count_plan;
pub mod line_counts;
pub mod log_table;
pub mod migrate;
pub mod partition_plan;
pub mod partitions;
pub mod query;
pub mod rebuild;
pub mod recompress;
pub mod residual;
pub mod rollup;
pub mod rollup_plan;
pub mod route;
pub mod schema;
pub mod settings;
pub mod shard_plan;
pub mod shards;
pub mod text_filter;
pub mod text_search;
pub mod writer;
pub mod zone_map;
pub mod zone_plan;

pub use partition_plan::{PartitionBound, PartitionPlan, Period, PlanError};
pub use writer::{Batch, Committed, DeadLetter, MappedRow, Row, WriteOutcome, Writer};
