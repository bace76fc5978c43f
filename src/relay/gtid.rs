//! MariaDB's own binlog events, which the binlog library passes through undecoded: GTID (162),
//! GTID_LIST (163) and BINLOG_CHECKPOINT (161), and the GTID state built from them.
//!
//! Layouts as MariaDB writes them (sql/log_event.h, `Gtid_log_event`, `Gtid_list_log_event`,
//! `Binlog_checkpoint_log_event`), all little-endian; the binlog library has already cut off the
//! event header and the CRC32 checksum. A reader must send `SET @mariadb_slave_capability=4`
//! (MARIA_SLAVE_CAPABILITY_GTID) to get these events instead of MySQL-style substitutes.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Event types MariaDB adds beyond MySQL's.
pub const ANNOTATE_ROWS_EVENT: u8 = 160;
pub const BINLOG_CHECKPOINT_EVENT: u8 = 161;
pub const GTID_EVENT: u8 = 162;
pub const GTID_LIST_EVENT: u8 = 163;
pub const START_ENCRYPTION_EVENT: u8 = 164;
/// QUERY_COMPRESSED_EVENT up to DELETE_ROWS_COMPRESSED_EVENT: written with `log_bin_compress`.
pub const COMPRESSED_EVENTS: std::ops::RangeInclusive<u8> = 165..=171;

/// `Gtid_log_event::flags2` bits used here.
const FL_STANDALONE: u8 = 1;
const FL_TRANSACTIONAL: u8 = 4;
const FL_PREPARED_XA: u8 = 64;
const FL_COMPLETED_XA: u8 = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode MariaDB {event} event: {reason}")]
pub struct GtidError {
    event: &'static str,
    reason: String,
}

fn error(event: &'static str, reason: impl Into<String>) -> GtidError {
    GtidError {
        event,
        reason: reason.into(),
    }
}

/// A MariaDB global transaction ID, `domain-server-sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl FromStr for Gtid {
    type Err = GtidError;

    fn from_str(s: &str) -> Result<Gtid, GtidError> {
        let bad = || error("GTID", format!("{s:?} is not domain-server-sequence"));
        let mut parts = s.trim().split('-');
        let (Some(d), Some(sv), Some(n), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Gtid {
            domain: d.parse().map_err(|_| bad())?,
            server: sv.parse().map_err(|_| bad())?,
            seq: n.parse().map_err(|_| bad())?,
        })
    }
}

/// The GTID event that starts every event group (transaction or DDL statement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtidEvent {
    pub domain: u32,
    pub seq: u64,
    pub flags2: u8,
}

impl GtidEvent {
    /// `seq_no` (8 bytes), `domain_id` (4), `flags2` (1), then optional parts this relay does
    /// not need (commit ID, XA XID, extra flags).
    pub fn parse(data: &[u8]) -> Result<GtidEvent, GtidError> {
        if data.len() < 13 {
            return Err(error(
                "GTID",
                format!("{} bytes, at least 13 expected", data.len()),
            ));
        }
        Ok(GtidEvent {
            seq: le_u64(&data[0..8]),
            domain: le_u32(&data[8..12]),
            flags2: data[12],
        })
    }

    /// The group is a single statement with no COMMIT or XID event after it (DDL, or a
    /// statement on a non-transactional table outside a transaction).
    pub fn is_standalone(&self) -> bool {
        self.flags2 & FL_STANDALONE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.flags2 & FL_TRANSACTIONAL != 0
    }

    /// The group belongs to an XA transaction, which this relay does not follow.
    pub fn is_xa(&self) -> bool {
        self.flags2 & (FL_PREPARED_XA | FL_COMPLETED_XA) != 0
    }

    pub fn gtid(&self, server: u32) -> Gtid {
        Gtid {
            domain: self.domain,
            server,
            seq: self.seq,
        }
    }
}

/// GTID_LIST: the binlog state at the start of a file (and, sent by the server when a reader
/// connects by GTID, the state the stream resumes from). `count` (4 bytes; the top 4 bits are
/// flags), then `count` entries of `domain_id` (4), `server_id` (4), `seq_no` (8).
pub fn parse_gtid_list(data: &[u8]) -> Result<Vec<Gtid>, GtidError> {
    if data.len() < 4 {
        return Err(error("GTID_LIST", "shorter than its count"));
    }
    let count = (le_u32(&data[0..4]) & 0x0fff_ffff) as usize;
    let entries = &data[4..];
    if entries.len() < count * 16 {
        return Err(error(
            "GTID_LIST",
            format!(
                "{count} entries announced, {} bytes hold them",
                entries.len()
            ),
        ));
    }
    Ok(entries
        .chunks_exact(16)
        .take(count)
        .map(|e| Gtid {
            domain: le_u32(&e[0..4]),
            server: le_u32(&e[4..8]),
            seq: le_u64(&e[8..16]),
        })
        .collect())
}

/// BINLOG_CHECKPOINT: the oldest binlog file crash recovery still needs. `name length` (4),
/// then the name.
pub fn parse_binlog_checkpoint(data: &[u8]) -> Result<String, GtidError> {
    if data.len() < 4 {
        return Err(error("BINLOG_CHECKPOINT", "shorter than its name length"));
    }
    let len = le_u32(&data[0..4]) as usize;
    let name = data
        .get(4..4 + len)
        .ok_or_else(|| error("BINLOG_CHECKPOINT", "name longer than the event"))?;
    String::from_utf8(name.to_vec()).map_err(|_| error("BINLOG_CHECKPOINT", "name is not UTF-8"))
}

/// The last GTID of every replication domain: what a reader sends in `@slave_connect_state`
/// to resume after it, and MariaDB's `@@gtid_binlog_pos` format (`0-1-100,1-2-7`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState(BTreeMap<u32, Gtid>);

impl GtidState {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records `gtid` as its domain's latest.
    pub fn update(&mut self, gtid: Gtid) {
        self.0.insert(gtid.domain, gtid);
    }

    /// The latest GTID of `domain`.
    pub fn get(&self, domain: u32) -> Option<Gtid> {
        self.0.get(&domain).copied()
    }

    /// The latest GTID of every domain, by domain.
    pub fn gtids(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.0.values().copied()
    }

    /// This state with `gtid` as its domain's latest.
    pub fn with(&self, gtid: Gtid) -> GtidState {
        let mut next = self.clone();
        next.update(gtid);
        next
    }

    /// Whether every domain of `other` is here at the same or a later sequence number.
    pub fn includes(&self, other: &GtidState) -> bool {
        other
            .0
            .values()
            .all(|g| self.0.get(&g.domain).is_some_and(|mine| mine.seq >= g.seq))
    }

    /// How many sequence numbers `self` is ahead of `older`, summed over domains: the number of
    /// event groups written in between when each domain has one writing server.
    pub fn groups_since(&self, older: &GtidState) -> u64 {
        self.0
            .values()
            .map(|g| {
                let before = older.0.get(&g.domain).map_or(0, |o| o.seq);
                g.seq.saturating_sub(before)
            })
            .sum()
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for gtid in self.0.values() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{gtid}")?;
        }
        Ok(())
    }
}

impl FromStr for GtidState {
    type Err = GtidError;

    fn from_str(s: &str) -> Result<GtidState, GtidError> {
        let mut state = GtidState::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let gtid: Gtid = part.parse()?;
            if state.0.contains_key(&gtid.domain) {
                return Err(error(
                    "GTID",
                    format!("domain {} appears twice in {s:?}", gtid.domain),
                ));
            }
            state.update(gtid);
        }
        Ok(state)
    }
}

/// In messages a state is its text, `0-1-100,1-2-7`.
impl serde::Serialize for GtidState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GtidState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<GtidState, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_includes_states_it_is_at_or_past_in_every_domain() {
        let state: GtidState = "0-1-10,1-2-7".parse().unwrap();
        assert!(state.includes(&"0-1-10".parse().unwrap()));
        assert!(state.includes(&"0-3-9,1-2-7".parse().unwrap()));
        assert!(state.includes(&GtidState::default()));
        assert!(!state.includes(&"0-1-11".parse().unwrap()));
        assert!(!state.includes(&"2-1-1".parse().unwrap()));
    }

    #[test]
    fn gtid_event_as_mariadb_writes_it() {
        // Captured from MariaDB 10.11: seq 3, domain 0, flags2 0x0c (transactional, allow
        // parallel), six reserved bytes.
        let data = [3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0];
        let e = GtidEvent::parse(&data).unwrap();
        assert_eq!((e.seq, e.domain), (3, 0));
        assert!(e.is_transactional() && !e.is_standalone() && !e.is_xa());
        assert_eq!(e.gtid(11).to_string(), "0-11-3");
        // DDL: standalone | allow parallel | DDL.
        let ddl = GtidEvent::parse(&[1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 41]).unwrap();
        assert!(ddl.is_standalone());
        assert_eq!(ddl.domain, 7);
        let seq = GtidEvent::parse(&[0xff; 13]).unwrap().seq;
        assert_eq!(seq, u64::MAX);
        assert!(GtidEvent::parse(&data[..12]).is_err());
    }

    #[test]
    fn gtid_list_as_mariadb_writes_it() {
        // The list sent on a GTID connect: one entry, 0-11-5.
        let data = [1, 0, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            parse_gtid_list(&data).unwrap(),
            [Gtid {
                domain: 0,
                server: 11,
                seq: 5
            }]
        );
        assert_eq!(parse_gtid_list(&[0, 0, 0, 0, 0, 0]).unwrap(), []);
        // Flag bits in the top of the count are not entries.
        let mut flagged = data;
        flagged[3] = 0x10;
        assert_eq!(parse_gtid_list(&flagged).unwrap().len(), 1);
        assert!(parse_gtid_list(&data[..10]).is_err());
        assert!(parse_gtid_list(&[1]).is_err());
    }

    #[test]
    fn binlog_checkpoint_names_a_file() {
        let mut data = vec![18, 0, 0, 0];
        data.extend_from_slice(b"mariadb-bin.000001");
        assert_eq!(
            parse_binlog_checkpoint(&data).unwrap(),
            "mariadb-bin.000001"
        );
        assert!(parse_binlog_checkpoint(&data[..10]).is_err());
        assert!(parse_binlog_checkpoint(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn state_round_trips_and_keeps_one_gtid_per_domain() {
        let mut state: GtidState = "1-2-7, 0-1-100".parse().unwrap();
        assert_eq!(state.to_string(), "0-1-100,1-2-7");
        state.update("0-3-101".parse().unwrap());
        assert_eq!(state.to_string(), "0-3-101,1-2-7");
        assert_eq!("".parse::<GtidState>().unwrap(), GtidState::default());
        for bad in ["0-1", "0-1-2-3", "a-1-2", "0-1-2,0-1-3", "-1-1-1"] {
            assert!(bad.parse::<GtidState>().is_err(), "{bad}");
        }
        let older: GtidState = "0-1-90".parse().unwrap();
        assert_eq!(state.groups_since(&older), 11 + 7);
        assert_eq!(older.groups_since(&state), 0);
        assert_eq!(state.get(1).map(|g| g.to_string()), Some("1-2-7".into()));
        assert_eq!(state.get(5), None);
        assert_eq!(
            older.with("1-4-2".parse().unwrap()).to_string(),
            "0-1-90,1-4-2"
        );
        assert_eq!(older.to_string(), "0-1-90");
    }
}
