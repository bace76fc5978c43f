//! The `[serve]` settings: where `logstamp serve` listens, who may ask, which server it reads,
//! and the bounds every request is held to.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::mysql::MysqlUrl;
use crate::settings::{Secret, SettingError, as_text, at_least_one, at_most_a_year, duration_text};

/// Rows one request may ask for at most, whatever `max_rows` says: the page of a person.
const MOST_ROWS: u64 = 100_000;

/// The `[serve]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    #[serde(with = "as_text")]
    pub listen: SocketAddr,
    /// Requests to the API must carry `Authorization: Bearer <token>`; empty: no token asked.
    pub token: Secret,
    /// The server read (a read-only account's URL); empty: `mysql.url`.
    #[serde(
        deserialize_with = "optional_url",
        serialize_with = "optional_url_text"
    )]
    pub mysql_url: Option<MysqlUrl>,
    /// Rows one request returns at most.
    pub max_rows: u64,
    /// The longest time range one request may cover.
    #[serde(with = "duration_text")]
    pub max_range: Duration,
    /// Longest one statement may run before the server stops it.
    #[serde(with = "duration_text")]
    pub statement_timeout: Duration,
    /// How far back live mode reads again on each refresh (see the README's "Live mode").
    #[serde(with = "duration_text")]
    pub live_window: Duration,
}

impl ServeSettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        at_least_one("serve.max_rows", self.max_rows)?;
        if self.max_rows > MOST_ROWS {
            return Err(SettingError::new(
                "serve.max_rows",
                format!("must be at most {MOST_ROWS}"),
            ));
        }
        for (key, value) in [
            ("serve.max_range", self.max_range),
            ("serve.statement_timeout", self.statement_timeout),
            ("serve.live_window", self.live_window),
        ] {
            at_most_a_year(key, value)?;
            if value.is_zero() {
                return Err(SettingError::new(key, "must be longer than 0"));
            }
        }
        if self.statement_timeout < Duration::from_millis(1) {
            return Err(SettingError::new(
                "serve.statement_timeout",
                "must be at least 1ms",
            ));
        }
        Ok(())
    }
}

/// The URL as written (its password redacted), or empty.
fn optional_url_text<S: Serializer>(url: &Option<MysqlUrl>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => url.serialize(s),
        None => s.serialize_str(""),
    }
}

fn optional_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MysqlUrl>, D::Error> {
    let text = String::deserialize(d)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    MysqlUrl::try_from(text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ServeSettings {
        ServeSettings {
            listen: "127.0.0.1:8080".parse().unwrap(),
            token: Secret::new(" secret "),
            mysql_url: None,
            max_rows: 1000,
            max_range: Duration::from_secs(86_400),
            statement_timeout: Duration::from_secs(10),
            live_window: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_token_is_never_shown() {
        let s = settings();
        assert_eq!(s.token.given(), Some("secret"));
        assert!(!format!("{s:?}").contains("secret"));
        assert!(!serde_json::to_string(&s).unwrap().contains("secret"));
        assert_eq!(Secret::new("  ").given(), None);
        let mut s = settings();
        s.mysql_url =
            Some(MysqlUrl::try_from("mysql://ro:pw123@db:3306/logs".to_string()).unwrap());
        let shown = serde_json::to_value(&s).unwrap();
        assert_eq!(shown["mysql_url"], "mysql://ro:***@db:3306/logs");
        assert!(!format!("{s:?}").contains("pw123"));
        s.mysql_url = None;
        assert_eq!(serde_json::to_value(&s).unwrap()["mysql_url"], "");
    }

    #[test]
    fn bounds_are_checked() {
        assert!(settings().validate().is_ok());
        let mut s = settings();
        s.max_rows = 0;
        assert_eq!(s.validate().unwrap_err().key, "serve.max_rows");
        s.max_rows = MOST_ROWS + 1;
        assert_eq!(s.validate().unwrap_err().key, "serve.max_rows");
        let mut s = settings();
        s.statement_timeout = Duration::ZERO;
        assert_eq!(s.validate().unwrap_err().key, "serve.statement_timeout");
        let mut s = settings();
        s.max_range = Duration::from_secs(400 * 86_400);
        assert_eq!(s.validate().unwrap_err().key, "serve.max_range");
    }
}
