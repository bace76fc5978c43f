//! Where the database is: `[mysql]` settings and a URL whose password is never shown.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::Ident;
use super::bound::Bound;
use crate::settings::{SettingError, at_most_a_year, duration_text};

/// The `[mysql]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSettings {
    pub url: MysqlUrl,
    /// How long one step of logstamp's own work on a database may wait on it: a command's
    /// work on one database, a step of a rebuild, a poll of `query --follow`, a worker's
    /// start-up checks and each round of its partition maintenance on one database.
    #[serde(with = "duration_text", default = "default_statement_timeout")]
    pub statement_timeout: Duration,
}

fn default_statement_timeout() -> Duration {
    MysqlSettings::DEFAULT_STATEMENT_TIMEOUT
}

impl MysqlSettings {
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

    /// The settings of `url` with the default bound.
    pub fn new(url: MysqlUrl) -> MysqlSettings {
        MysqlSettings {
            url,
            statement_timeout: MysqlSettings::DEFAULT_STATEMENT_TIMEOUT,
        }
    }

    pub fn validate(&self) -> Result<(), SettingError> {
        at_most_a_year("mysql.statement_timeout", self.statement_timeout)?;
        if self.statement_timeout < Duration::from_millis(1) {
            return Err(SettingError::new(
                "mysql.statement_timeout",
                "must be at least 1ms",
            ));
        }
        Ok(())
    }

    /// The bound of one step on `url` (this database or a shard of it).
    pub fn bound_on(&self, url: &MysqlUrl) -> Bound {
        Bound::new(url, self.statement_timeout)
    }
}

/// A `mysql://user[:password]@host[:port]/database` URL whose password is never shown.
#[derive(Clone)]
pub struct MysqlUrl(url::Url);

impl MysqlUrl {
    /// The URL with its password, for connecting. Never log it.
    pub fn expose(&self) -> &str {
        self.0.as_str()
    }

    /// The database named in the path.
    pub fn database(&self) -> &str {
        self.0.path().trim_start_matches('/')
    }

    /// The host, as written.
    pub fn host(&self) -> &str {
        self.0.host_str().unwrap_or_default()
    }

    /// The port, if the URL gives one.
    pub fn port(&self) -> Option<u16> {
        self.0.port()
    }

    pub fn redacted(&self) -> String {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            // Only fails for URLs that cannot have a password, which a mysql:// URL can.
            let _ = shown.set_password(Some("***"));
        }
        shown.to_string()
    }
}

impl TryFrom<String> for MysqlUrl {
    type Error = String;

    fn try_from(text: String) -> Result<MysqlUrl, String> {
        let shape = "use mysql://user[:password]@host[:port]/database";
        // The parser's message never quotes the input, so no password can leak through it.
        let url = url::Url::parse(text.trim()).map_err(|e| format!("not a URL ({e}): {shape}"))?;
        if url.scheme() != "mysql" {
            return Err(format!(
                "scheme must be mysql, not {:?}: {shape}",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("no host: {shape}"));
        }
        let database = url.path().trim_start_matches('/');
        if database.is_empty() {
            return Err(format!("no database: {shape}"));
        }
        Ident::new(database).map_err(|e| format!("database name: {e}"))?;
        Ok(MysqlUrl(url))
    }
}

impl<'de> Deserialize<'de> for MysqlUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MysqlUrl, D::Error> {
        MysqlUrl::try_from(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for MysqlUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl fmt::Debug for MysqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MysqlUrl({})", self.redacted())
    }
}

impl fmt::Display for MysqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_timeout_of_zero_or_past_a_year_is_refused_naming_the_setting() {
        let url = MysqlUrl::try_from("mysql://u@db:3307/logs".to_string()).expect("valid");
        let mut settings = MysqlSettings::new(url.clone());
        assert!(settings.validate().is_ok());
        assert_eq!(
            settings.statement_timeout,
            MysqlSettings::DEFAULT_STATEMENT_TIMEOUT
        );
        for refused in [Duration::ZERO, Duration::from_secs(366 * 86_400)] {
            settings.statement_timeout = refused;
            let error = settings.validate().expect_err("refused");
            assert_eq!(error.key, "mysql.statement_timeout", "{refused:?}");
        }
        settings.statement_timeout = Duration::from_millis(1);
        assert_eq!(
            settings.bound_on(&url),
            Bound::new(&url, Duration::from_millis(1))
        );
    }
}
