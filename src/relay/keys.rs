//! `relay.keys`: the keys each data centre signs its relay messages with (see
//! [`super::signing`]), given in the settings or read from a file, and never shown.
//!
//! This data centre signs with its one key without `until` (its current key); its keys with
//! `until` are its old ones, still accepted on messages read before then. A remote data
//! centre's keys are what its messages are checked against: any number of current keys (the
//! next one is added everywhere before that data centre signs with it) and old ones until their
//! time. A data centre with no key is not checked: signing is off unless keys are set.

use std::collections::HashSet;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::settings::{Secret, SettingError};

/// The shortest secret: a HMAC-SHA256 key holds at most 64 bytes of entropy; 32 is its output.
pub const MIN_SECRET_BYTES: usize = 32;

/// One key of `relay.keys`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayKey {
    /// The data centre whose messages it signs.
    pub dc: String,
    /// Its name, carried in each signature to say which key made it.
    pub id: String,
    /// The secret itself; or empty, with `secret_file`.
    #[serde(default)]
    pub secret: Secret,
    /// A file holding the secret (surrounding whitespace ignored), read at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// An old key: accepted on messages read before this time (RFC 3339), refused after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl RelayKey {
    /// How the key is named in errors and logs: `dc/id`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.dc, self.id)
    }
}

/// Reads the secret of each key given by `secret_file`; refuses a key given both ways.
pub fn read_secret_files(keys: &mut [RelayKey]) -> Result<(), SettingError> {
    for key in keys {
        let Some(path) = &key.secret_file else {
            continue;
        };
        if !key.secret.is_empty() {
            return Err(SettingError::new(
                "relay.keys",
                format!(
                    "key {} has both secret and secret_file: give one",
                    key.name()
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            SettingError::new(
                "relay.keys",
                format!(
                    "key {}: cannot read secret_file {}: {e}",
                    key.name(),
                    path.display()
                ),
            )
        })?;
        key.secret = Secret::new(&text);
    }
    Ok(())
}

/// Checks `relay.keys` against this data centre (`dc`) and the remote ones (`remotes`).
pub fn validate<'a>(
    keys: &[RelayKey],
    dc: &'a str,
    remotes: impl Iterator<Item = &'a str>,
) -> Result<(), SettingError> {
    let bad = |reason: String| Err(SettingError::new("relay.keys", reason));
    let known: HashSet<&str> = remotes.chain(std::iter::once(dc)).collect();
    let mut seen = HashSet::new();
    for key in keys {
        if !known.contains(key.dc.as_str()) {
            return bad(format!(
                "key {} is for {:?}, which is neither relay.dc nor one of relay.remotes",
                key.name(),
                key.dc
            ));
        }
        let id_ok = !key.id.is_empty()
            && key.id.len() <= 64
            && key
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !id_ok {
            return bad(format!(
                "key id {:?} of {}: use 1 to 64 ASCII letters, digits, ., _ and -",
                key.id, key.dc
            ));
        }
        if !seen.insert((key.dc.as_str(), key.id.as_str())) {
            return bad(format!("key {} is listed twice", key.name()));
        }
        if key.secret.expose().len() < MIN_SECRET_BYTES {
            return bad(format!(
                "key {} needs a secret (or secret_file) of at least {MIN_SECRET_BYTES} bytes, \
                 such as the output of `openssl rand -hex 32`",
                key.name()
            ));
        }
    }
    let current = keys
        .iter()
        .filter(|k| k.dc == dc && k.until.is_none())
        .count();
    let own = keys.iter().any(|k| k.dc == dc);
    if own && current != 1 {
        return bad(format!(
            "{dc} (relay.dc) has {current} keys without until: it signs with exactly one, and \
             keeps its old keys with until"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn key(dc: &str, id: &str, until: Option<&str>) -> RelayKey {
        RelayKey {
            dc: dc.into(),
            id: id.into(),
            secret: Secret::new(SECRET),
            secret_file: None,
            until: until.map(|u| u.parse().unwrap()),
        }
    }

    fn check(keys: &[RelayKey]) -> Result<(), String> {
        validate(keys, "a", ["b"].into_iter()).map_err(|e| e.reason)
    }

    #[test]
    fn rotation_keeps_one_current_key_here_and_any_number_from_remotes() {
        let until = Some("2026-12-01T00:00:00Z");
        assert!(check(&[]).is_ok());
        assert!(check(&[key("a", "k2", None), key("a", "k1", until)]).is_ok());
        // A remote's next key is accepted before it signs with it.
        assert!(check(&[key("b", "k1", None), key("b", "k2", None)]).is_ok());
        // Keys for the remote only: this data centre does not sign.
        assert!(check(&[key("b", "k1", until)]).is_ok());
        let two = check(&[key("a", "k1", None), key("a", "k2", None)]).unwrap_err();
        assert!(two.contains("2 keys without until"), "{two}");
        let none = check(&[key("a", "k1", until)]).unwrap_err();
        assert!(none.contains("0 keys without until"), "{none}");
    }

    #[test]
    fn bad_keys_are_named() {
        let e = check(&[key("c", "k1", None)]).unwrap_err();
        assert!(e.contains("c/k1") && e.contains("neither"), "{e}");
        let e = check(&[key("b", "k:1", None)]).unwrap_err();
        assert!(e.contains("\"k:1\""), "{e}");
        let e = check(&[key("b", "k1", None), key("b", "k1", None)]).unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let mut short = key("b", "k1", None);
        short.secret = Secret::new("  too short \n");
        let e = check(&[short]).unwrap_err();
        assert!(e.contains("b/k1") && e.contains("32 bytes"), "{e}");
    }

    #[test]
    fn until_parses_as_rfc3339() {
        let k: RelayKey = serde_json::from_str(&format!(
            r#"{{"dc":"b","id":"k1","secret":"{SECRET}","until":"2026-12-01T01:00:00+01:00"}}"#
        ))
        .unwrap();
        let until: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        assert_eq!(k.until, Some(until));
        let bad = serde_json::from_str::<RelayKey>(
            r#"{"dc":"b","id":"k1","secret":"x","until":"next tuesday"}"#,
        );
        assert!(bad.is_err());
    }

    #[test]
    fn secrets_are_read_from_files_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k1.key");
        std::fs::write(&path, format!("{SECRET}\n")).unwrap();
        let mut keys = vec![RelayKey {
            secret: Secret::default(),
            secret_file: Some(path.clone()),
            ..key("b", "k1", None)
        }];
        read_secret_files(&mut keys).unwrap();
        assert_eq!(keys[0].secret.expose(), SECRET);
        let shown = [format!("{keys:?}"), serde_json::to_string(&keys).unwrap()];
        for text in shown {
            assert!(!text.contains(SECRET) && text.contains("***"), "{text}");
        }
        // Both ways, or a file that cannot be read, are refused with the key's name.
        let e = read_secret_files(&mut keys).unwrap_err();
        assert!(e.reason.contains("both"), "{}", e.reason);
        let mut missing = vec![RelayKey {
            secret: Secret::default(),
            secret_file: Some(dir.path().join("missing")),
            ..key("b", "k2", None)
        }];
        let e = read_secret_files(&mut missing).unwrap_err();
        assert!(
            e.reason.contains("b/k2") && e.reason.contains("missing"),
            "{}",
            e.reason
        );
    }
}
