//! The `[relay]` settings: this data centre's name, the relayed tables, the loop filter and the
//! remote data centres whose changes are applied here.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{self, RelayKey};
use crate::mysql::MysqlUrl;
use crate::settings::{SettingError, TIB, at_least_one, at_most, at_most_a_year, duration_text};

/// The smallest `relay.max_message_bytes`: a change message of a narrow row is a few hundred
/// bytes.
pub const MIN_MESSAGE_BYTES: usize = 4096;
/// The largest `relay.max_message_bytes`.
pub const MAX_MESSAGE_BYTES: u64 = 999_000_000;
/// `relay.apply_memory_bytes` holds at least this many of the largest messages.
pub const APPLY_MEMORY_MESSAGES: usize = 8;

/// The cross-data-centre relay of this data centre: its capture and the remote appliers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    /// This data centre's name: it names the capture's topic and the rows of the relay tables.
    pub dc: String,
    /// The replica server_id the capture presents to the local server; 0 means unset.
    pub server_id: u32,
    /// Relayed tables, `schema.table` or `schema.*`.
    pub tables: Vec<TablePattern>,
    /// A data centre's topic is this prefix followed by its name.
    pub topic_prefix: String,
    pub loop_filter: LoopFilterMode,
    #[serde(with = "duration_text")]
    pub checkpoint_interval: Duration,
    /// How long capture's producer lets a batch fill before sending it (librdkafka's
    /// `linger.ms`): every change may wait this long on its way.
    #[serde(with = "duration_text")]
    pub publish_linger: Duration,
    /// How long an applier's fetch waits at the broker when there is nothing new (librdkafka's
    /// `fetch.wait.max.ms`). A broker answers as soon as a message arrives, so this bounds the
    /// delay only where one does not.
    #[serde(with = "duration_text")]
    pub fetch_wait: Duration,
    /// Source transactions an applier that is behind may commit together.
    pub apply_batch: usize,
    /// The largest change message capture publishes, in bytes; also the producer's
    /// `message.max.bytes`. A row whose message is larger stops capture (see [`super::capture`]).
    pub max_message_bytes: usize,
    /// What an applier holds of the changes it read ahead and of the SQL it prepared, in bytes;
    /// also caps each statement it sends (with the server's `max_allowed_packet`).
    pub apply_memory_bytes: usize,
    /// How long an applier waits on its database for any one thing (a statement, a round trip
    /// of statements, the commit): past it the database is taken as hung. Also the bound on
    /// each statement of the snapshot and of the relay's commands.
    #[serde(with = "duration_text")]
    pub apply_timeout: Duration,
    /// What an applier does when an UPDATE or DELETE does not find its before image here.
    pub on_conflict: OnConflict,
    /// What an applier does with a message it cannot apply.
    pub on_bad_message: OnBadMessage,
    /// Whether capture copies relayed tables it never copied, at its start (see
    /// [`super::snapshot`]).
    pub snapshot: SnapshotMode,
    /// The data centres whose changes are applied here.
    pub remotes: Vec<RemoteDc>,
    /// The keys messages are signed and checked with (see [`super::keys`]).
    #[serde(default)]
    pub keys: Vec<RelayKey>,
}

impl RelaySettings {
    /// The topic a data centre's capture publishes to: the prefix and its name, and with
    /// shards, the shard's position in `store.shards` after a dot (names take no dots).
    pub fn topic(&self, dc: &str, shard: Option<usize>) -> String {
        match shard {
            None => format!("{}{dc}", self.topic_prefix),
            Some(shard) => format!("{}{dc}.{shard}", self.topic_prefix),
        }
    }
}

impl RelaySettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        dc_name("relay.dc", &self.dc)?;
        let mut seen = HashSet::new();
        for remote in &self.remotes {
            dc_name("relay.remotes", &remote.dc)?;
            if remote.dc == self.dc {
                return Err(SettingError::new(
                    "relay.remotes",
                    format!("{:?} is this data centre (relay.dc)", remote.dc),
                ));
            }
            if !seen.insert(remote.dc.as_str()) {
                return Err(SettingError::new(
                    "relay.remotes",
                    format!("{:?} is listed twice", remote.dc),
                ));
            }
        }
        // Kafka topic names: ASCII letters, digits, `.`, `_` and `-`, at most 249 characters.
        let topic_ok = self
            .topic_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            // Room for a data centre's name (64) and a shard's position (`.` and 4 digits).
            && self.topic_prefix.len() <= 249 - 64 - 5;
        if !topic_ok {
            return Err(SettingError::new(
                "relay.topic_prefix",
                "use ASCII letters, digits, ., _ and -, at most 180 characters",
            ));
        }
        at_most_a_year("relay.checkpoint_interval", self.checkpoint_interval)?;
        at_most_a_year("relay.apply_timeout", self.apply_timeout)?;
        if self.apply_timeout < Duration::from_millis(100) {
            return Err(SettingError::new(
                "relay.apply_timeout",
                "must be at least 100ms",
            ));
        }
        // librdkafka's own bounds, in whole milliseconds.
        whole_ms_at_most("relay.publish_linger", self.publish_linger, 900_000)?;
        whole_ms_at_most("relay.fetch_wait", self.fetch_wait, 300_000)?;
        // It sizes a buffer.
        at_most("relay.apply_batch", self.apply_batch, 100_000)?;
        if self.checkpoint_interval.is_zero() {
            return Err(SettingError::new(
                "relay.checkpoint_interval",
                "must be longer than 0",
            ));
        }
        at_least_one("relay.apply_batch", self.apply_batch as u64)?;
        // librdkafka's message.max.bytes is at most 1,000,000,000, framing included.
        at_most(
            "relay.max_message_bytes",
            self.max_message_bytes,
            MAX_MESSAGE_BYTES,
        )?;
        at_most("relay.apply_memory_bytes", self.apply_memory_bytes, TIB)?;
        if self.max_message_bytes < MIN_MESSAGE_BYTES {
            return Err(SettingError::new(
                "relay.max_message_bytes",
                format!("must be at least {MIN_MESSAGE_BYTES}"),
            ));
        }
        // Room for the consumer's fetch queue, a message being read and the statements made of it.
        let least = self.max_message_bytes.saturating_mul(APPLY_MEMORY_MESSAGES);
        if self.apply_memory_bytes < least {
            return Err(SettingError::new(
                "relay.apply_memory_bytes",
                format!(
                    "must be at least {APPLY_MEMORY_MESSAGES} times relay.max_message_bytes \
                     ({least})"
                ),
            ));
        }
        keys::validate(
            &self.keys,
            &self.dc,
            self.remotes.iter().map(|r| r.dc.as_str()),
        )
    }
}

impl RelaySettings {
    /// Refuses a pattern that takes in one of `bookkeeping`, logstamp's own tables in
    /// `database` (offsets, leases, dead letters, the relay's state): relayed, a remote message
    /// could rewrite them.
    pub fn refuse_bookkeeping(
        &self,
        database: &str,
        bookkeeping: &[&str],
    ) -> Result<(), SettingError> {
        for pattern in &self.tables {
            let taken: Vec<&str> = bookkeeping
                .iter()
                .copied()
                .filter(|table| pattern.matches(database, table))
                .collect();
            if !taken.is_empty() {
                return Err(SettingError::new(
                    "relay.tables",
                    format!(
                        "{pattern} takes in logstamp's own tables of {database} ({}), which stay \
                         local to each data centre: name the tables to relay one by one, such as \
                         {database}.logs",
                        taken.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A librdkafka duration setting: whole milliseconds, at most `max_ms`.
fn whole_ms_at_most(key: &str, value: Duration, max_ms: u64) -> Result<(), SettingError> {
    if !value.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(SettingError::new(key, "must be whole milliseconds"));
    }
    if value.as_millis() > u128::from(max_ms) {
        return Err(SettingError::new(
            key,
            format!("must be at most {max_ms} ms"),
        ));
    }
    Ok(())
}

/// Names end up in topic names and in relay tables' keys: keep them to what both take.
fn dc_name(key: &str, name: &str) -> Result<(), SettingError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(SettingError::new(
            key,
            format!(
                "{name:?} is not a data centre name: use 1 to 64 ASCII letters, digits, _ and -"
            ),
        ))
    }
}

/// A remote data centre whose topic this relay applies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteDc {
    pub dc: String,
    /// Kafka holding that data centre's topic; empty means `kafka.brokers`.
    #[serde(default)]
    pub brokers: String,
    /// That data centre's database (its `mysql.url`), for `relay verify`; never shown with its
    /// password.
    #[serde(default)]
    pub url: Option<MysqlUrl>,
    /// With shards: that data centre's `store.shards`, in its order, for `relay verify` of
    /// each shard against the one at the same position there.
    #[serde(default)]
    pub shards: Vec<MysqlUrl>,
}

impl RemoteDc {
    /// That data centre's database to compare with this one's shard `shard` (or with this
    /// data centre's database when unsharded).
    pub fn url_for(&self, shard: Option<usize>) -> Option<&MysqlUrl> {
        match shard {
            None => self.url.as_ref(),
            Some(shard) => self.shards.get(shard),
        }
    }

    /// Where that data centre's topic is read: its own brokers, else `local` (`kafka.brokers`).
    pub fn brokers_or<'a>(&'a self, local: &'a str) -> &'a str {
        if self.brokers.trim().is_empty() {
            local
        } else {
            &self.brokers
        }
    }
}

/// How the relay keeps changes it applied from being captured and sent back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopFilterMode {
    Marker,
    SkipReplication,
    Cache,
}

impl fmt::Display for LoopFilterMode {
    /// The setting's own spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoopFilterMode::Marker => "marker",
            LoopFilterMode::SkipReplication => "skip_replication",
            LoopFilterMode::Cache => "cache",
        })
    }
}

/// What an applier does with a conflict: an UPDATE or DELETE whose row here is missing or
/// differs from the source's before image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// The change wins: the row at its key is replaced by the after image, or deleted.
    Apply,
    /// Applying from that data centre waits, with nothing after the change applied, until the
    /// row here is made to match.
    Stop,
}

/// What an applier does with a message it cannot apply: one that does not parse, comes from
/// another data centre, changes a table not relayed here, or fails for a definite reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBadMessage {
    /// Applying from that data centre stops, visibly, until the relay starts again.
    Stop,
    /// The message is recorded in `relay_dead_letters` and skipped; a message of a source
    /// transaction takes the rest of that transaction with it, so a transaction is applied whole
    /// or not at all.
    DeadLetter,
}

/// An entry of `relay.tables`: `schema.table`, or `schema.*` for every table of a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TablePattern {
    schema: String,
    /// `None` for every table.
    table: Option<String>,
}

impl TablePattern {
    pub fn parse(text: &str) -> Result<TablePattern, String> {
        let bad = || format!("{text:?} is not schema.table or schema.*");
        let (schema, table) = text.trim().split_once('.').ok_or_else(bad)?;
        if schema.is_empty() || table.is_empty() || table.contains('.') || schema == "*" {
            return Err(bad());
        }
        Ok(TablePattern {
            schema: schema.to_string(),
            table: (table != "*").then(|| table.to_string()),
        })
    }

    pub fn matches(&self, schema: &str, table: &str) -> bool {
        self.schema == schema && self.table.as_deref().is_none_or(|t| t == table)
    }
}

impl fmt::Display for TablePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}",
            self.schema,
            self.table.as_deref().unwrap_or("*")
        )
    }
}

impl TryFrom<String> for TablePattern {
    type Error = String;

    fn try_from(text: String) -> Result<TablePattern, String> {
        TablePattern::parse(&text)
    }
}

impl From<TablePattern> for String {
    fn from(pattern: TablePattern) -> String {
        pattern.to_string()
    }
}

/// Whether relayed tables are copied without being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Only on `relay snapshot`.
    Off,
    /// Also every relayed table this data centre's capture never relayed, when capture starts.
    Initial,
}

impl fmt::Display for SnapshotMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SnapshotMode::Off => "off",
            SnapshotMode::Initial => "initial",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{RemoteDc, TablePattern};

    #[test]
    fn a_remote_url_never_shows_its_password() {
        let remote: RemoteDc = serde_json::from_str(
            r#"{"dc": "b", "url": "mysql://relay:s3cret@db.b:3306/logstamp"}"#,
        )
        .unwrap();
        let url = remote.url.as_ref().unwrap();
        assert_eq!(url.database(), "logstamp");
        assert!(url.expose().contains("s3cret"));
        let shown = [
            format!("{remote:?}"),
            serde_json::to_string(&remote).unwrap(),
        ];
        for text in shown {
            assert!(!text.contains("s3cret") && text.contains("***"), "{text}");
        }
        let without: RemoteDc = serde_json::from_str(r#"{"dc": "b"}"#).unwrap();
        assert!(without.url.is_none());
    }

    #[test]
    fn each_shard_has_a_topic_of_its_own() {
        let relay = crate::config::Settings::defaults().unwrap().relay;
        assert_eq!(relay.topic_prefix, "logstamp-relay-");
        assert_eq!(relay.topic("dc2", None), "logstamp-relay-dc2");
        assert_eq!(relay.topic("dc2", Some(0)), "logstamp-relay-dc2.0");
        assert_eq!(relay.topic("dc2", Some(12)), "logstamp-relay-dc2.12");
    }

    #[test]
    fn a_remote_names_its_shards_for_verify() {
        let remote: RemoteDc = serde_json::from_str(
            r#"{"dc": "b", "url": "mysql://root@b/c", "shards": ["mysql://root@b1/s", "mysql://root@b2/s"]}"#,
        )
        .unwrap();
        assert_eq!(remote.url_for(None).map(|u| u.host()), Some("b"));
        assert_eq!(remote.url_for(Some(1)).map(|u| u.host()), Some("b2"));
        assert!(remote.url_for(Some(2)).is_none());
    }

    #[test]
    fn patterns_name_a_table_or_a_schema() {
        let one = TablePattern::parse("app.orders").unwrap();
        assert!(one.matches("app", "orders"));
        assert!(!one.matches("app", "orders2"));
        assert!(!one.matches("app2", "orders"));
        let all = TablePattern::parse(" app.* ").unwrap();
        assert!(all.matches("app", "anything"));
        assert!(!all.matches("other", "anything"));
        assert_eq!(all.to_string(), "app.*");
        for bad in ["app", ".t", "app.", "a.b.c", "*.t", ""] {
            assert!(TablePattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
