//! Where the database is: `[mysql]` settings and a URL whose password is never shown.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

use super::Ident;

/// The `[mysql]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSettings {
    pub url: MysqlUrl,
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
