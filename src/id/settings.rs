//! The `[id]` settings: the ID layout and how this process gets its service ID. Deserialized
//! raw, then checked once (`TryFrom`) into [`IdSettings`] with the layout built.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::{IdError, Layout};
use crate::settings::{SettingError, as_text, at_most_a_year, duration_text};
use crate::time::{Zone, parse_time};

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
pub struct RawIdSettings {
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

impl TryFrom<RawIdSettings> for IdSettings {
    type Error = SettingError;

    fn try_from(raw: RawIdSettings) -> Result<IdSettings, SettingError> {
        let layout = Layout::new(raw.service_bits, raw.epoch.0).map_err(|e| match e {
            IdError::EpochOutOfRange(_) => SettingError::new("id.epoch", e),
            _ => SettingError::new("id.service_bits", e),
        })?;
        if let ServiceIdSetting::Fixed(id) = raw.service_id {
            layout
                .check_service_id(id)
                .map_err(|e| SettingError::new("id.service_id", e))?;
        }
        if let AutoRange::Span { last, .. } = raw.auto_range {
            layout
                .check_service_id(last)
                .map_err(|e| SettingError::new("id.auto_range", e))?;
        }
        at_most_a_year("id.lease_ttl", raw.lease_ttl)?;
        at_most_a_year("id.mark_window", raw.mark_window)?;
        if raw.lease_ttl < Duration::from_secs(1) {
            return Err(SettingError::new("id.lease_ttl", "must be at least 1s"));
        }
        // The lease raises the mark when half the window is left; IDs may run up to the
        // borrowing bound ahead of the clock, and the raise needs a moment.
        let min_window = 2 * (u64::from(raw.max_borrow_seconds) + 2);
        if raw.mark_window < Duration::from_secs(min_window) {
            return Err(SettingError::new(
                "id.mark_window",
                format!(
                    "must be at least {min_window}s: twice id.max_borrow_seconds plus 4s, so \
                     the mark stays ahead of IDs borrowed from future seconds"
                ),
            ));
        }
        Ok(IdSettings {
            layout,
            service_id: raw.service_id,
            auto_range: raw.auto_range,
            lease_ttl: raw.lease_ttl,
            mark_window: raw.mark_window,
            max_borrow_seconds: raw.max_borrow_seconds,
        })
    }
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
