//! Everything logstamp does in MySQL. The submodules here without I/O hold the pure parts
//! (identifiers, partition bounds, DDL text) so they are tested without a server.

pub mod db;
pub mod encode;
pub mod error;
pub mod ident;
pub mod lease;
pub mod lock;
pub mod log_table;
pub mod migrate;
pub mod partition_plan;
pub mod partitions;
pub mod query;
pub mod retry;
pub mod rollup;
pub(crate) mod rows;
pub mod schema;
pub mod writer;

pub use error::StoreError;
pub use ident::{Ident, IdentError};
pub use partition_plan::{PartitionBound, PartitionPlan, Period, PlanError};
pub use writer::{Batch, Committed, DeadLetter, Row, WriteOutcome, Writer};
