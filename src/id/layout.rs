//! The bit layout of an ID: `seconds (32) | service id (n) | counter (32 - n)`.

use serde::Serialize;

use super::IdError;

/// Service bits used when nothing else is configured: 1,024 services, 4,194,304 IDs per second each.
pub const DEFAULT_SERVICE_BITS: u8 = 10;

/// How an ID's 64 bits are split, and from which instant its seconds count.
///
/// The seconds field is always the top 32 bits, so `id >> 32` is the number of seconds since the
/// layout's epoch (the Unix timestamp with the default epoch) and a time range maps to one
/// contiguous ID range whatever `n` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    service_bits: u8,
    epoch: u64,
}

/// The fields of one ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decoded {
    pub unix_seconds: u64,
    pub service_id: u32,
    pub counter: u32,
}

/// A half-open range of IDs, `start <= id < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdRange {
    pub start: u64,
    pub end: u64,
}

impl IdRange {
    /// The SQL predicate selecting this range on `column`, with the bounds as exact literals.
    pub fn sql_predicate(&self, column: &str) -> String {
        format!("{column} >= {} AND {column} < {}", self.start, self.end)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.start <= id && id < self.end
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            service_bits: DEFAULT_SERVICE_BITS,
            epoch: 0,
        }
    }
}

impl Layout {
    /// A layout with `service_bits` (1..=31) bits of service ID, counting seconds from
    /// `epoch_unix_seconds`.
    pub fn new(service_bits: u8, epoch_unix_seconds: u64) -> Result<Layout, IdError> {
        if !(1..=31).contains(&service_bits) {
            return Err(IdError::ServiceBits(service_bits));
        }
        // Every second of the layout must be a representable Unix time, so decoding never
        // overflows.
        if epoch_unix_seconds
            .checked_add(u64::from(u32::MAX))
            .is_none()
        {
            return Err(IdError::EpochOutOfRange(epoch_unix_seconds));
        }
        Ok(Layout {
            service_bits,
            epoch: epoch_unix_seconds,
        })
    }

    pub fn service_bits(&self) -> u8 {
        self.service_bits
    }

    pub fn counter_bits(&self) -> u8 {
        32 - self.service_bits
    }

    pub fn epoch_unix_seconds(&self) -> u64 {
        self.epoch
    }

    pub fn max_service_id(&self) -> u32 {
        (1u32 << self.service_bits) - 1
    }

    pub fn max_counter(&self) -> u32 {
        (1u32 << self.counter_bits()) - 1
    }

    /// The last Unix second this layout can represent.
    pub fn max_unix_seconds(&self) -> u64 {
        self.epoch + u64::from(u32::MAX)
    }

    /// Seconds since the layout's epoch, if `unix_seconds` is representable.
    pub fn seconds_since_epoch(&self, unix_seconds: u64) -> Result<u32, IdError> {
        unix_seconds
            .checked_sub(self.epoch)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or(IdError::TimeOutOfRange {
                unix_seconds: i128::from(unix_seconds),
                epoch: self.epoch,
            })
    }

    /// The ID with these fields. Each must fit its field: nothing is masked silently.
    pub fn encode(&self, unix_seconds: u64, service_id: u32, counter: u32) -> Result<u64, IdError> {
        let seconds = self.seconds_since_epoch(unix_seconds)?;
        self.check_service_id(service_id)?;
        if counter > self.max_counter() {
            return Err(IdError::CounterOutOfRange {
                counter,
                max: self.max_counter(),
            });
        }
        Ok(self.compose(seconds, service_id, counter))
    }

    /// Packs fields already known to fit.
    pub(crate) fn compose(&self, seconds: u32, service_id: u32, counter: u32) -> u64 {
        (u64::from(seconds) << 32)
            | (u64::from(service_id) << self.counter_bits())
            | u64::from(counter)
    }

    pub fn decode(&self, id: u64) -> Decoded {
        Decoded {
            unix_seconds: self.epoch + (id >> 32),
            service_id: ((id >> self.counter_bits()) as u32) & self.max_service_id(),
            counter: (id as u32) & self.max_counter(),
        }
    }

    /// The first ID of a Unix second, clamped to the layout's range: seconds before the epoch
    /// give 0 (no ID is older), seconds past the last representable one are an error.
    pub fn first_id_at(&self, unix_seconds: i64) -> Result<u64, IdError> {
        let Ok(unix_seconds) = u64::try_from(unix_seconds) else {
            return Ok(0);
        };
        if unix_seconds <= self.epoch {
            return Ok(0);
        }
        let seconds = self.seconds_since_epoch(unix_seconds)?;
        Ok(u64::from(seconds) << 32)
    }

    /// The IDs stamped in the half-open time range `[from, to)` (Unix seconds), by any service.
    ///
    /// IDs carry whole seconds, so callers with sub-second bounds round `from` down and `to` up.
    /// Times before the epoch clamp to ID 0; a time past the layout's last second is an error.
    pub fn id_range(&self, from_unix: i64, to_unix: i64) -> Result<IdRange, IdError> {
        if to_unix < from_unix {
            return Err(IdError::ReversedRange {
                from: from_unix,
                to: to_unix,
            });
        }
        Ok(IdRange {
            start: self.first_id_at(from_unix)?,
            end: self.first_id_at(to_unix)?,
        })
    }

    pub fn check_service_id(&self, service_id: u32) -> Result<(), IdError> {
        if service_id > self.max_service_id() {
            return Err(IdError::ServiceIdOutOfRange {
                service_id,
                max: self.max_service_id(),
                service_bits: self.service_bits,
            });
        }
        Ok(())
    }
}
