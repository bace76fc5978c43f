//! What every section of the settings shares, whichever module owns it: the error a bad value
//! makes (naming its key), and the text forms settings are written in. Sections deserialize
//! into their raw form and are checked once into the values their code uses; `config` layers
//! the sources, composes the sections and says which layer set a bad key.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A setting that cannot be used: its dotted key (`store.concurrency`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SettingError {
    pub key: String,
    pub reason: String,
}

impl SettingError {
    pub fn new(key: impl Into<String>, reason: impl fmt::Display) -> SettingError {
        SettingError {
            key: key.into(),
            reason: reason.to_string(),
        }
    }
}

/// Refuses 0 for a count or size whose 0 would stall the work.
pub fn at_least_one(key: &str, value: u64) -> Result<(), SettingError> {
    if value == 0 {
        Err(SettingError::new(key, "must be at least 1"))
    } else {
        Ok(())
    }
}

/// The largest size, count or duration a setting takes: far beyond any sensible value, so that
/// arithmetic on it (sums, `Instant` plus a duration) cannot overflow.
pub const TIB: u64 = 1 << 40;
pub const LONGEST: Duration = Duration::from_secs(365 * 86_400);

/// Refuses a count or size above `max`.
pub fn at_most(key: &str, value: usize, max: u64) -> Result<(), SettingError> {
    if u64::try_from(value).map_or(true, |v| v > max) {
        Err(SettingError::new(key, format!("must be at most {max}")))
    } else {
        Ok(())
    }
}

/// Refuses a duration above [`LONGEST`].
pub fn at_most_a_year(key: &str, value: Duration) -> Result<(), SettingError> {
    if value > LONGEST {
        Err(SettingError::new(key, "must be at most 365 days"))
    } else {
        Ok(())
    }
}

/// Refuses an empty (or blank) value.
pub fn non_empty(key: &str, value: &str) -> Result<(), SettingError> {
    if value.trim().is_empty() {
        Err(SettingError::new(key, "must not be empty"))
    } else {
        Ok(())
    }
}

/// (De)serializes a type through its `FromStr` and `Display`.
pub mod as_text {
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
pub mod duration_text {
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

/// A secret setting (a key, a token), trimmed: never shown by `Debug` or in a settings dump.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: &str) -> Secret {
        Secret(text.trim().to_string())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The secret, if one is set.
    pub fn given(&self) -> Option<&str> {
        (!self.0.is_empty()).then_some(self.0.as_str())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "Secret()"
        } else {
            "Secret(***)"
        })
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { "***" })
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        Ok(Secret::new(&String::deserialize(d)?))
    }
}
