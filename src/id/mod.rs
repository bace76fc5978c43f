//! The 64-bit ID: its layout, the lock-free generator, and capacity planning.
//!
//! Pure: no I/O and no async runtime. The only outside input is the [`Clock`], which is injected
//! so every timing rule is tested without sleeping.

mod capacity;
mod clock;
mod generator;
mod layout;
pub mod settings;

pub use capacity::{CapacityInput, CapacityInputError, CapacityPlan, plan_capacity};
pub use clock::{Clock, ManualClock, SystemClock};
pub use generator::{DEFAULT_MAX_BORROW_SECONDS, GeneratorStats, HaltReason, IdBlock, IdGenerator};
pub use layout::{DEFAULT_SERVICE_BITS, Decoded, IdRange, Layout};

/// Why an ID could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("service bits must be between 1 and 31, got {0}")]
    ServiceBits(u8),
    #[error("epoch {0} (Unix seconds) is too late: the layout's 2^32 seconds would not fit")]
    EpochOutOfRange(u64),
    #[error("service ID {service_id} does not fit in {service_bits} service bits (at most {max})")]
    ServiceIdOutOfRange {
        service_id: u32,
        max: u32,
        service_bits: u8,
    },
    #[error("counter {counter} does not fit the layout (at most {max})")]
    CounterOutOfRange { counter: u32, max: u32 },
    #[error(
        "time {unix_seconds} (Unix seconds) is outside the ID range of the epoch {epoch}: \
         IDs cover 2^32 seconds from the epoch"
    )]
    TimeOutOfRange { unix_seconds: i128, epoch: u64 },
    #[error("time range is reversed: from {from} is after to {to}")]
    ReversedRange { from: i64, to: i64 },
    #[error("a block must ask for at least one ID")]
    EmptyBlock,
    #[error(
        "service ID {service_id}: its lease was lost, so no more IDs are issued under it \
         (another process may hold it now)"
    )]
    LeaseLost { service_id: u32 },
    #[error("service ID {service_id}: its lease was released; no more IDs are issued under it")]
    Released { service_id: u32 },
    #[error(
        "service ID {service_id}: the next ID second {unix_seconds} is past the persisted \
         high-water mark {mark}; refused until the lease raises the mark"
    )]
    PastMark {
        service_id: u32,
        unix_seconds: u64,
        mark: u64,
    },
}

impl IdError {
    /// Whether asking again later may succeed: only a mark the lease has not raised yet.
    pub fn is_transient(&self) -> bool {
        matches!(self, IdError::PastMark { .. })
    }
}
