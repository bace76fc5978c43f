//! Signed relay messages: capture signs every message it publishes (changes, snapshot chunks,
//! its resume message) with its data centre's current key (see [`super::keys`]), and an applier
//! that has keys for the source refuses a message whose signature is missing, made with a key it
//! does not know or no longer accepts, or wrong.
//!
//! The signature is the Kafka header `logstamp-signature`, `KEY_ID:HEX`, where HEX is the
//! HMAC-SHA256, under the key's secret, of these fields one after the other, each written as its
//! length (8 bytes, big-endian) and its bytes, an absent one as the length 2^64-1 alone:
//!
//! 1. the text `logstamp-relay-v1`;
//! 2. the data centre the key belongs to;
//! 3. the topic;
//! 4. the message's Kafka key (capture sets none: absent);
//! 5. the number of the message's other headers named `logstamp-...` (8 bytes, big-endian; 0
//!    today), then each one's name and value, in order;
//! 6. the message's value.
//!
//! So a message copied to another topic, or with its value, key or `logstamp-` headers changed,
//! is refused. Not covered: the partition (the relay reads partition 0 only), the offset (not
//! known before the message is written), the timestamp and headers of other names (the relay
//! reads neither). A genuine message copied again into its own topic verifies; see the README
//! for what the applier does with it.

use std::fmt;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use rdkafka::message::{Headers, Message};
use sha2::Sha256;

use super::keys::RelayKey;
use crate::settings::Secret;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "logstamp-signature";
/// Headers named so are covered by the signature.
const COVERED_PREFIX: &str = "logstamp-";
/// The first field signed: the version of this scheme.
const DOMAIN: &[u8] = b"logstamp-relay-v1";
const HEX: &[u8; 16] = b"0123456789abcdef";

type HmacSha256 = Hmac<Sha256>;

/// What a signature covers of one message.
#[derive(Debug, Clone, Default)]
pub struct Covered<'m> {
    pub topic: &'m str,
    pub key: Option<&'m [u8]>,
    /// Headers named `logstamp-...` other than the signature, in order.
    pub headers: Vec<(&'m str, Option<&'m [u8]>)>,
    pub value: &'m [u8],
}

impl<'m> Covered<'m> {
    /// A message as capture publishes it: no key, no other header.
    pub fn value(topic: &'m str, value: &'m [u8]) -> Covered<'m> {
        Covered {
            topic,
            value,
            ..Covered::default()
        }
    }

    /// What a message read from Kafka has to be checked, and the signature headers it carries.
    pub fn of<M: Message>(message: &'m M) -> (Covered<'m>, Vec<&'m [u8]>) {
        let mut covered = Covered {
            topic: message.topic(),
            key: message.key(),
            headers: Vec::new(),
            value: message.payload().unwrap_or_default(),
        };
        let mut signatures = Vec::new();
        if let Some(headers) = message.headers() {
            for header in headers.iter() {
                if header.key == SIGNATURE_HEADER {
                    signatures.push(header.value.unwrap_or_default());
                } else if header.key.starts_with(COVERED_PREFIX) {
                    covered.headers.push((header.key, header.value));
                }
            }
        }
        (covered, signatures)
    }

    /// The HMAC of these fields, from `keyed` (the key of data centre `dc`).
    fn mac(&self, dc: &str, keyed: &HmacSha256) -> HmacSha256 {
        let mut mac = keyed.clone();
        field(&mut mac, Some(DOMAIN));
        field(&mut mac, Some(dc.as_bytes()));
        field(&mut mac, Some(self.topic.as_bytes()));
        field(&mut mac, self.key);
        mac.update(&(self.headers.len() as u64).to_be_bytes());
        for (name, value) in &self.headers {
            field(&mut mac, Some(name.as_bytes()));
            field(&mut mac, *value);
        }
        field(&mut mac, Some(self.value));
        mac
    }
}

/// One field: its length and its bytes, or the length 2^64-1 alone when absent.
fn field(mac: &mut HmacSha256, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        }
        None => mac.update(&u64::MAX.to_be_bytes()),
    }
}

/// The HMAC state keyed with `secret`; `None` for a key HMAC refuses (it takes every length).
fn keyed(secret: &Secret) -> Option<HmacSha256> {
    HmacSha256::new_from_slice(secret.expose().as_bytes()).ok()
}

/// A key ready to use: its name and its keyed HMAC state, never shown.
#[derive(Clone)]
struct Keyed {
    id: String,
    name: String,
    until: Option<DateTime<Utc>>,
    mac: HmacSha256,
}

impl fmt::Debug for Keyed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keyed({}, ***)", self.name)
    }
}

impl Keyed {
    fn of(key: &RelayKey) -> Option<Keyed> {
        Some(Keyed {
            id: key.id.clone(),
            name: key.name(),
            until: key.until,
            mac: keyed(&key.secret)?,
        })
    }
}

/// Signs this data centre's messages with its current key.
#[derive(Debug, Clone)]
pub struct Signer {
    dc: String,
    key: Keyed,
}

impl Signer {
    /// The signer of data centre `dc`: its key without `until`; `None` when it has none
    /// (signing is off).
    pub fn of(keys: &[RelayKey], dc: &str) -> Option<Signer> {
        let key = keys.iter().find(|k| k.dc == dc && k.until.is_none())?;
        Some(Signer {
            dc: dc.to_string(),
            key: Keyed::of(key)?,
        })
    }

    /// The value of the signature header of `covered`.
    pub fn sign(&self, covered: &Covered<'_>) -> String {
        let mac = covered.mac(&self.dc, &self.key.mac).finalize().into_bytes();
        let mut text = String::with_capacity(self.key.id.len() + 1 + 2 * mac.len());
        text.push_str(&self.key.id);
        text.push(':');
        for byte in mac {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        text
    }
}

/// Why a message's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the message is not signed (no {SIGNATURE_HEADER} header)")]
    Unsigned,
    #[error("the message carries {0} {SIGNATURE_HEADER} headers")]
    Several(usize),
    #[error("its {SIGNATURE_HEADER} header is not KEY_ID:HEX")]
    Malformed,
    #[error("it is signed with key {0:?}, which is not one of the keys of its data centre")]
    UnknownKey(String),
    #[error("it is signed with key {key}, accepted until {until} only")]
    Retired { key: String, until: DateTime<Utc> },
    #[error("its signature by key {0} is wrong: the message was changed or not signed with it")]
    Wrong(String),
}

/// Checks the messages of one data centre against its keys.
#[derive(Debug, Clone)]
pub struct Verifier {
    dc: String,
    keys: Vec<Keyed>,
}

impl Verifier {
    /// The verifier of data centre `dc`'s messages; `None` when no key of it is known, and so
    /// its messages are not checked.
    pub fn of(keys: &[RelayKey], dc: &str) -> Option<Verifier> {
        let keys: Vec<Keyed> = keys
            .iter()
            .filter(|k| k.dc == dc)
            .filter_map(Keyed::of)
            .collect();
        (!keys.is_empty()).then(|| Verifier {
            dc: dc.to_string(),
            keys,
        })
    }

    /// The same keys, each accepted whatever its `until`: for capture reading its own topic's
    /// end, written before a rotation as well as after.
    pub fn any_time(mut self) -> Verifier {
        for key in &mut self.keys {
            key.until = None;
        }
        self
    }

    /// Whether `signatures` (the message's signature headers) sign `covered` with a key
    /// accepted at `now`.
    pub fn check(
        &self,
        covered: &Covered<'_>,
        signatures: &[&[u8]],
        now: DateTime<Utc>,
    ) -> Result<(), Refusal> {
        let signature = match signatures {
            [] => return Err(Refusal::Unsigned),
            [one] => *one,
            several => return Err(Refusal::Several(several.len())),
        };
        let text = std::str::from_utf8(signature).map_err(|_| Refusal::Malformed)?;
        let (id, hex) = text.split_once(':').ok_or(Refusal::Malformed)?;
        let mac = from_hex(hex).ok_or(Refusal::Malformed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| Refusal::UnknownKey(id.chars().take(64).collect()))?;
        if let Some(until) = key.until.filter(|until| now >= *until) {
            return Err(Refusal::Retired {
                key: key.name.clone(),
                until,
            });
        }
        // Compared in constant time.
        covered
            .mac(&self.dc, &key.mac)
            .verify_slice(&mac)
            .map_err(|_| Refusal::Wrong(key.name.clone()))
    }
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The data centre a message says it comes from (its `dc`, or a resume message's), for the log
/// of a refused one; at most 64 characters of it.
pub fn claimed_dc(value: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Claim {
        dc: Option<String>,
        resume: Option<Box<Claim>>,
    }
    let claim: Claim = serde_json::from_slice(value).ok()?;
    let dc = claim.dc.or_else(|| claim.resume.and_then(|r| r.dc))?;
    Some(dc.chars().take(64).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1-secret-k1-secret-k1-secret-k1-secret";
    const K2: &str = "k2-secret-k2-secret-k2-secret-k2-secret";

    fn key(dc: &str, id: &str, secret: &str, until: Option<&str>) -> RelayKey {
        RelayKey {
            dc: dc.into(),
            id: id.into(),
            secret: Secret::new(secret),
            secret_file: None,
            until: until.map(|u| u.parse().unwrap()),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    /// Data centre b after a rotation: signs with k2, k1 accepted until 1 December.
    fn rotated() -> Vec<RelayKey> {
        vec![
            key("b", "k2", K2, None),
            key("b", "k1", K1, Some("2026-12-01T00:00:00Z")),
        ]
    }

    #[test]
    fn the_signature_is_the_documented_hmac() {
        // HMAC-SHA256 of the fields as the module documentation writes them, computed apart
        // from `Covered::mac`.
        let mut fields = Vec::new();
        for text in [&b"logstamp-relay-v1"[..], b"b", b"logstamp-relay-b"] {
            fields.extend_from_slice(&(text.len() as u64).to_be_bytes());
            fields.extend_from_slice(text);
        }
        fields.extend_from_slice(&u64::MAX.to_be_bytes());
        fields.extend_from_slice(&0u64.to_be_bytes());
        fields.extend_from_slice(&5u64.to_be_bytes());
        fields.extend_from_slice(b"{\"a\"}");
        let mut mac = HmacSha256::new_from_slice(K2.as_bytes()).unwrap();
        mac.update(&fields);
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let signer = Signer::of(&rotated(), "b").unwrap();
        let covered = Covered::value("logstamp-relay-b", b"{\"a\"}");
        assert_eq!(signer.sign(&covered), format!("k2:{hex}"));
    }

    #[test]
    fn a_signed_message_verifies_and_any_change_to_what_is_covered_is_refused() {
        let keys = rotated();
        let signer = Signer::of(&keys, "b").unwrap();
        let verifier = Verifier::of(&keys, "b").unwrap();
        let now = at("2026-11-27T12:00:00Z");
        let covered = Covered::value("logstamp-relay-b", b"{\"dc\":\"b\"}");
        let signature = signer.sign(&covered);
        let check = |c: &Covered<'_>| verifier.check(c, &[signature.as_bytes()], now);
        assert_eq!(check(&covered), Ok(()));
        let wrong = Err(Refusal::Wrong("b/k2".into()));
        let other_topic = Covered::value("logstamp-relay-c", covered.value);
        assert_eq!(check(&other_topic), wrong);
        let other_value = Covered::value(covered.topic, b"{\"dc\":\"c\"}");
        assert_eq!(check(&other_value), wrong);
        let keyed = Covered {
            key: Some(b""),
            ..covered.clone()
        };
        assert_eq!(check(&keyed), wrong);
        let with_header = Covered {
            headers: vec![("logstamp-run", Some(b"7"))],
            ..covered.clone()
        };
        assert_eq!(check(&with_header), wrong);
        // The same key of another data centre's name does not verify either.
        let as_c = Verifier::of(&[key("c", "k2", K2, None)], "c").unwrap();
        assert_eq!(
            as_c.check(&covered, &[signature.as_bytes()], now),
            Err(Refusal::Wrong("c/k2".into()))
        );
    }

    #[test]
    fn missing_unknown_malformed_and_retired_signatures_are_refused() {
        let keys = rotated();
        let verifier = Verifier::of(&keys, "b").unwrap();
        let covered = Covered::value("logstamp-relay-b", b"{}");
        let before = at("2026-11-30T23:00:00Z");
        let after = at("2026-12-01T00:00:01Z");
        assert_eq!(
            verifier.check(&covered, &[], before),
            Err(Refusal::Unsigned)
        );
        let old = Signer::of(&[key("b", "k1", K1, None)], "b").unwrap();
        let by_k1 = old.sign(&covered);
        // The old key: accepted during its grace, refused after.
        assert_eq!(
            verifier.check(&covered, &[by_k1.as_bytes()], before),
            Ok(())
        );
        assert_eq!(
            verifier.check(&covered, &[by_k1.as_bytes()], after),
            Err(Refusal::Retired {
                key: "b/k1".into(),
                until: at("2026-12-01T00:00:00Z")
            })
        );
        let stranger = Signer::of(&[key("b", "k9", K1, None)], "b").unwrap();
        assert_eq!(
            verifier.check(&covered, &[stranger.sign(&covered).as_bytes()], before),
            Err(Refusal::UnknownKey("k9".into()))
        );
        // Right id, wrong secret.
        let forger = Signer::of(&[key("b", "k2", K1, None)], "b").unwrap();
        assert_eq!(
            verifier.check(&covered, &[forger.sign(&covered).as_bytes()], before),
            Err(Refusal::Wrong("b/k2".into()))
        );
        for bad in [&b"k2"[..], b"k2:zz", b"k2:abc", b"\xff:00"] {
            assert_eq!(
                verifier.check(&covered, &[bad], before),
                Err(Refusal::Malformed),
                "{bad:?}"
            );
        }
        let genuine = Signer::of(&keys, "b").unwrap().sign(&covered);
        assert_eq!(
            verifier.check(&covered, &[genuine.as_bytes(), genuine.as_bytes()], before),
            Err(Refusal::Several(2))
        );
    }

    #[test]
    fn without_keys_nothing_signs_or_is_checked() {
        let keys = vec![key("b", "k1", K1, None)];
        assert!(Signer::of(&keys, "a").is_none());
        assert!(Verifier::of(&keys, "a").is_none());
        // Only old keys: nothing signs.
        assert!(Signer::of(&[key("b", "k1", K1, Some("2026-12-01T00:00:00Z"))], "b").is_none());
    }

    #[test]
    fn the_claimed_data_centre_is_read_from_changes_and_resume_messages() {
        assert_eq!(
            claimed_dc(br#"{"dc":"b","server_id":1}"#).as_deref(),
            Some("b")
        );
        assert_eq!(
            claimed_dc(br#"{"resume":{"dc":"c","server_id":1}}"#).as_deref(),
            Some("c")
        );
        assert_eq!(claimed_dc(b"{not json"), None);
        let long = format!(r#"{{"dc":"{}"}}"#, "x".repeat(100));
        assert_eq!(claimed_dc(long.as_bytes()).unwrap().len(), 64);
    }
}
