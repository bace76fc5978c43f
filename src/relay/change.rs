//! The change message: one row change of a relayed table, as capture publishes it to its data
//! centre's topic and the appliers read it back.
//!
//! ```json
//! {"dc":"dc1","server_id":11,"schema":"app","table":"t","type":"update",
//!  "columns":{"id":"uint","price":"decimal","seen":"datetime"},
//!  "key":{"id":18446744073709551615},
//!  "values":{"price":"12.3400"},
//!  "before":{"id":18446744073709551615,"price":"9.9900","seen":"2024-05-01 10:00:00.250000"},
//!  "contract":{"key":["id"],"types":{"id":"bigint unsigned","price":"decimal(10,4)",
//!              "seen":"datetime(6)"}},
//!  "file":"mariadb-bin.000002","pos":643,"gtid":"0-11-9","commit_ts":1714557600,
//!  "txn":{"seq":17,"index":0,"last":true},
//!  "stream":{"epoch":0,"published":"0-11-7","binlog":"0-11-8"}}
//! ```
//!
//! `columns` is every column of the table with its kind, which says how each value is written:
//! integers (`int`, `uint`, `year`, `bit`, `enum` as its index, `set` as its bit mask) are JSON
//! numbers, unsigned 64-bit included; `float` and `double` are numbers that read back as the
//! same binary value; `decimal`, `date`, `datetime`, `timestamp` (UTC) and `time` are strings
//! with every digit the column keeps; `text` is a string; `binary` (binary strings, and strings
//! of character sets other than UTF-8) is base64. NULL is `null`. MariaDB's JSON columns are
//! LONGTEXT with a validity check, so they travel as `text`, byte for byte.
//!
//! `contract` is the table's primary key (its columns in key order) and every column's exact
//! type at the source (see [`super::contract`]): the applier applies nothing to a table that
//! differs here. Messages of a capture from before it was added have none.
//!
//! `values` holds every column for an insert and the changed columns for an update; `before`
//! the whole row before an update or delete. `txn` places the change in its transaction
//! (`seq` numbers the transactions capture published, one after the other; `relay reset` jumps
//! ahead; `index` counts the transaction's messages from 0; `last` marks its last one). `gtid`
//! is the transaction's MariaDB GTID; `file`/`pos` is the end of the transaction in the source's
//! binlog on its last message, and how far capture had read it on the others (capture publishes
//! a large transaction while it reads it).
//!
//! `stream` is what keeps the data centre's stream exactly once across restarts and failovers
//! (see [`super::order`]): `epoch` is the `seq` of the first transaction published since the
//! stream was last started anew (`relay reset`); `published`, per replication domain, the GTID
//! of the last transaction published before this one in the epoch (an applier that applied
//! anything else in that domain is missing something, or the source's history diverged);
//! `binlog` is the source's GTID state just before this transaction, where capture reads again
//! to publish it (GTIDs are the same on every server of the data centre, binlog positions not).
//! `run` is the offset of the resume message of the capture that published it:
//!
//! `{"resume":{"dc":"a","server_id":11,"after":812}}` is what capture publishes each time it
//! starts, before it reads where its topic ends (`after`: the end offset just before it, so a
//! copy of an earlier resume message, or one landing late, is told apart and starts no run). A capture that was killed (or lost its database connection)
//! may still have messages on their way to the broker, which land after that end was read: a
//! message of another run than the latest resume message before it is one of those, and every
//! applier passes it over, as capture did when it chose where to resume (see [`super::resume`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::contract::Contract;
use super::gtid::{Gtid, GtidState};

/// How a column's values are written, derived from the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Int,
    Uint,
    Float,
    Double,
    Decimal,
    Date,
    Datetime,
    Timestamp,
    Time,
    Year,
    Bit,
    Enum,
    Set,
    Text,
    Binary,
}

impl fmt::Display for Kind {
    /// The name messages use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Int => "int",
            Kind::Uint => "uint",
            Kind::Float => "float",
            Kind::Double => "double",
            Kind::Decimal => "decimal",
            Kind::Date => "date",
            Kind::Datetime => "datetime",
            Kind::Timestamp => "timestamp",
            Kind::Time => "time",
            Kind::Year => "year",
            Kind::Bit => "bit",
            Kind::Enum => "enum",
            Kind::Set => "set",
            Kind::Text => "text",
            Kind::Binary => "binary",
        })
    }
}

/// One non-NULL column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `int`.
    Int(i64),
    /// `uint`, `year`, `bit`, `enum`, `set`.
    Uint(u64),
    /// `float`, `double`.
    Float(f64),
    /// `decimal`, `date`, `datetime`, `timestamp`, `time`, `text`.
    Text(String),
    /// `binary`.
    Bytes(Vec<u8>),
}

/// Column values by name; `None` is NULL.
pub type Row = BTreeMap<String, Option<Value>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChangeKind::Insert => "insert",
            ChangeKind::Update => "update",
            ChangeKind::Delete => "delete",
        })
    }
}

/// A row change as decoded from the binlog, before it is placed in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange {
    pub schema: String,
    pub table: String,
    pub kind: ChangeKind,
    pub columns: BTreeMap<String, Kind>,
    /// The primary key (its values before an update).
    pub key: Row,
    pub values: Row,
    pub before: Option<Row>,
    /// The table's key and exact types at the source; `None` in messages of a capture from
    /// before the relay carried them.
    pub contract: Option<Arc<Contract>>,
}

/// A transaction's place in its data centre's stream (see the module's documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub epoch: u64,
    pub published: GtidState,
    pub binlog: GtidState,
    /// The offset of its capture's resume message; none from a capture before resume messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
}

/// What capture publishes when it starts, before it reads where its topic ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    pub dc: String,
    pub server_id: u32,
    /// The topic's end offset when capture published it: the message lies at or after it, so a
    /// resume message of a later run names an offset after the earlier one's. None from a
    /// capture before this was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct ResumeWire {
    resume: Resume,
}

/// How a resume message starts: a change message starts with `{"dc":`.
const RESUME_PREFIX: &[u8] = b"{\"resume\":";

impl Resume {
    pub fn to_json(&self) -> Vec<u8> {
        // Two strings and a number always serialize.
        serde_json::to_vec(&ResumeWire {
            resume: self.clone(),
        })
        .unwrap_or_default()
    }

    /// Whether it was published before the resume message at offset `run` (the run followed):
    /// a copy of an earlier one, or one of a capture that stopped that landed late. It starts no
    /// run.
    pub fn precedes(&self, run: Option<u64>) -> bool {
        matches!((self.after, run), (Some(after), Some(run)) if after <= run)
    }

    /// The resume message `bytes` holds; `None` when they hold something else.
    pub fn from_json(bytes: &[u8]) -> Option<Result<Resume, ChangeError>> {
        bytes.starts_with(RESUME_PREFIX).then(|| {
            serde_json::from_slice::<ResumeWire>(bytes)
                .map(|w| w.resume)
                .map_err(|e| ChangeError(format!("resume message: {e}")))
        })
    }
}

/// The end of a transaction in the source's binlog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub file: String,
    pub pos: u64,
    /// The transaction's MariaDB GTID, when the source writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

impl Position {
    /// The transaction's GTID; `None` when it has none or it does not read as one.
    pub fn gtid(&self) -> Option<Gtid> {
        self.gtid.as_deref().and_then(|g| g.parse().ok())
    }

    /// Binlog order: the file's numeric extension, then the offset in the file. `None` for a
    /// file name without one (every binlog file name has one).
    pub fn order(&self) -> Option<(u64, u64)> {
        binlog_file_number(&self.file).map(|n| (n, self.pos))
    }
}

/// The sequence number in `name.000123`.
pub fn binlog_file_number(file: &str) -> Option<u64> {
    let (_, number) = file.rsplit_once('.')?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

/// Where a change sits in its transaction: capture publishes a transaction as it reads it, so
/// a message says whether it is the last, not how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TxnWire")]
pub struct TxnRef {
    pub seq: u64,
    pub index: u32,
    pub last: bool,
}

impl TxnRef {
    pub fn is_last(&self) -> bool {
        self.last
    }
}

/// `txn` as read: messages of earlier versions give the transaction's `count` instead of `last`.
#[derive(Deserialize)]
struct TxnWire {
    seq: u64,
    index: u32,
    #[serde(default)]
    last: Option<bool>,
    #[serde(default)]
    count: Option<u32>,
}

impl TryFrom<TxnWire> for TxnRef {
    type Error = String;

    fn try_from(wire: TxnWire) -> Result<TxnRef, String> {
        let last = match (wire.last, wire.count) {
            (Some(last), _) => last,
            (None, Some(count)) if wire.index < count => wire.index + 1 == count,
            (None, Some(count)) => {
                return Err(format!("change {} of a transaction of {count}", wire.index));
            }
            (None, None) => return Err("txn has neither last nor count".into()),
        };
        Ok(TxnRef {
            seq: wire.seq,
            index: wire.index,
            last,
        })
    }
}

/// A change message.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub dc: String,
    pub server_id: u32,
    pub row: RowChange,
    pub position: Position,
    /// The source's commit time, Unix seconds.
    pub commit_ts: u32,
    pub txn: TxnRef,
    pub stream: Stream,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad change message: {0}")]
pub struct ChangeError(String);

/// The message as JSON: the typed rows become plain JSON values. `C` is the contract: shared
/// when written, its text when read (see [`Contracts`]).
#[derive(Serialize, Deserialize)]
struct Wire<C> {
    dc: String,
    server_id: u32,
    schema: String,
    table: String,
    #[serde(rename = "type")]
    kind: ChangeKind,
    columns: BTreeMap<String, Kind>,
    key: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    values: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before: Option<BTreeMap<String, serde_json::Value>>,
    /// Shared with the row: serialising a message does not copy its table's contract. Messages
    /// without one read as `None` (serde's rule for a missing `Option`).
    #[serde(skip_serializing_if = "Option::is_none")]
    contract: Option<C>,
    #[serde(flatten)]
    position: Position,
    commit_ts: u32,
    txn: TxnRef,
    stream: Stream,
}

impl Change {
    pub fn to_json(&self) -> Vec<u8> {
        let r = &self.row;
        let wire = Wire {
            dc: self.dc.clone(),
            server_id: self.server_id,
            schema: r.schema.clone(),
            table: r.table.clone(),
            kind: r.kind,
            columns: r.columns.clone(),
            key: row_to_json(&r.key),
            values: row_to_json(&r.values),
            before: r.before.as_ref().map(row_to_json),
            contract: r.contract.clone(),
            position: self.position.clone(),
            commit_ts: self.commit_ts,
            txn: self.txn,
            stream: self.stream.clone(),
        };
        // Maps with string keys and JSON values always serialize.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads a message, checking every value against its column's kind.
    pub fn from_json(bytes: &[u8]) -> Result<Change, ChangeError> {
        Change::from_json_with(bytes, &mut Contracts::default())
    }

    /// [`Change::from_json`], taking the contract from `contracts` when its text is one read
    /// before: every message carries its table's contract, and reading it again for each row
    /// would cost more than the row.
    pub fn from_json_with(bytes: &[u8], contracts: &mut Contracts) -> Result<Change, ChangeError> {
        let wire: Wire<&serde_json::value::RawValue> =
            serde_json::from_slice(bytes).map_err(|e| ChangeError(e.to_string()))?;
        let contract = wire
            .contract
            .map(|raw| contracts.read(raw.get()))
            .transpose()?;
        let columns = wire.columns;
        let row = |values: BTreeMap<String, serde_json::Value>| -> Result<Row, ChangeError> {
            values
                .into_iter()
                .map(|(name, json)| {
                    let kind = columns.get(&name).ok_or_else(|| {
                        ChangeError(format!("value for {name:?}, which is not in columns"))
                    })?;
                    let value = value_from_json(*kind, json)
                        .map_err(|e| ChangeError(format!("column {name:?}: {e}")))?;
                    Ok((name, value))
                })
                .collect()
        };
        let key = row(wire.key)?;
        let values = row(wire.values)?;
        let before = wire.before.map(row).transpose()?;
        if key.is_empty() {
            return Err(ChangeError("no primary key".into()));
        }
        let needs_before = matches!(wire.kind, ChangeKind::Update | ChangeKind::Delete);
        if needs_before != before.is_some() {
            return Err(ChangeError(format!(
                "a {} {} a before image",
                wire.kind,
                if needs_before { "needs" } else { "has" }
            )));
        }
        Ok(Change {
            dc: wire.dc,
            server_id: wire.server_id,
            row: RowChange {
                schema: wire.schema,
                table: wire.table,
                kind: wire.kind,
                columns,
                key,
                values,
                before,
                contract,
            },
            position: wire.position,
            commit_ts: wire.commit_ts,
            txn: wire.txn,
            stream: wire.stream,
        })
    }
}

/// The contracts read lately, by their text, one copy each (decoded, a contract takes more
/// memory than a narrow row's change). Bounded: a table's contract changes only with its
/// definition.
#[derive(Debug, Default)]
pub struct Contracts {
    recent: Vec<(Box<str>, Arc<Contract>)>,
}

impl Contracts {
    /// Tables whose contracts are kept; past it the oldest is forgotten.
    const KEPT: usize = 64;

    fn read(&mut self, text: &str) -> Result<Arc<Contract>, ChangeError> {
        if let Some((_, contract)) = self.recent.iter().find(|(t, _)| **t == *text) {
            return Ok(contract.clone());
        }
        let contract: Arc<Contract> =
            serde_json::from_str(text).map_err(|e| ChangeError(format!("contract: {e}")))?;
        if self.recent.len() == Self::KEPT {
            self.recent.remove(0);
        }
        self.recent.push((text.into(), contract.clone()));
        Ok(contract)
    }
}

/// A row's values as a message writes them.
pub fn row_to_json(row: &Row) -> BTreeMap<String, serde_json::Value> {
    row.iter()
        .map(|(name, value)| (name.clone(), value_to_json(value.as_ref())))
        .collect()
}

/// A value as it appears in a message.
pub fn value_to_json(value: Option<&Value>) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        None => J::Null,
        Some(Value::Int(n)) => J::from(*n),
        Some(Value::Uint(n)) => J::from(*n),
        // MySQL has no NaN or infinity, which JSON could not hold.
        Some(Value::Float(f)) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Some(Value::Text(s)) => J::String(s.clone()),
        Some(Value::Bytes(b)) => J::String(BASE64.encode(b)),
    }
}

/// A message value read back as the value of a column of `kind`.
pub fn value_from_json(kind: Kind, json: serde_json::Value) -> Result<Option<Value>, String> {
    use serde_json::Value as J;
    if json.is_null() {
        return Ok(None);
    }
    let wrong = |json: &J| format!("{json} is not a {kind} value");
    let value = match kind {
        Kind::Int => Value::Int(json.as_i64().ok_or_else(|| wrong(&json))?),
        Kind::Uint | Kind::Year | Kind::Bit | Kind::Enum | Kind::Set => {
            Value::Uint(json.as_u64().ok_or_else(|| wrong(&json))?)
        }
        Kind::Float | Kind::Double => Value::Float(json.as_f64().ok_or_else(|| wrong(&json))?),
        Kind::Binary => match &json {
            J::String(s) => {
                Value::Bytes(BASE64.decode(s).map_err(|e| format!("not base64 ({e})"))?)
            }
            _ => return Err(wrong(&json)),
        },
        Kind::Decimal | Kind::Date | Kind::Datetime | Kind::Timestamp | Kind::Time | Kind::Text => {
            match json {
                J::String(s) => Value::Text(s),
                other => return Err(wrong(&other)),
            }
        }
    };
    Ok(Some(value))
}

#[cfg(test)]
impl Change {
    /// A one-row DELETE of `app.t` from data centre `a`: the fixture of tests that look only at
    /// a message's position, framing and stream.
    pub(crate) fn test_delete(position: Position, txn: TxnRef, stream: Stream) -> Change {
        Change {
            dc: "a".into(),
            server_id: 1,
            row: RowChange {
                schema: "app".into(),
                table: "t".into(),
                kind: ChangeKind::Delete,
                columns: Default::default(),
                key: Default::default(),
                values: Default::default(),
                before: None,
                contract: None,
            },
            position,
            commit_ts: 1_700_000_000,
            txn,
            stream,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_with_the_same_contract_share_one_copy() {
        let mut contracts = Contracts::default();
        let first = sample();
        let mut other = sample();
        other.row.contract = Some(Arc::new(Contract {
            key: vec!["id".into(), "region".into()],
            types: [("id".to_string(), "int".to_string())].into(),
        }));
        let read = |change: &Change, contracts: &mut Contracts| {
            Change::from_json_with(&change.to_json(), contracts).unwrap()
        };
        let (a, b, c) = (
            read(&first, &mut contracts),
            read(&first, &mut contracts),
            read(&other, &mut contracts),
        );
        assert_eq!(a, first);
        assert_eq!(c, other);
        let shared = |x: &Change, y: &Change| {
            Arc::ptr_eq(
                x.row.contract.as_ref().unwrap(),
                y.row.contract.as_ref().unwrap(),
            )
        };
        assert!(shared(&a, &b), "the same contract text is read once");
        assert!(!shared(&a, &c));
        let text = String::from_utf8(first.to_json()).unwrap();
        let bad = text.replace(r#""key":["id"]"#, r#""key":"id""#);
        assert_ne!(bad, text);
        assert!(Change::from_json_with(bad.as_bytes(), &mut contracts).is_err());
    }

    fn sample() -> Change {
        let columns: BTreeMap<String, Kind> = [
            ("id", Kind::Uint),
            ("price", Kind::Decimal),
            ("seen", Kind::Datetime),
            ("doc", Kind::Text),
            ("raw", Kind::Binary),
            ("note", Kind::Text),
            ("ratio", Kind::Float),
            ("delta", Kind::Int),
        ]
        .into_iter()
        .map(|(n, k)| (n.to_string(), k))
        .collect();
        let before: Row = [
            ("id", Some(Value::Uint(u64::MAX))),
            ("price", Some(Value::Text("-12.3400".into()))),
            (
                "seen",
                Some(Value::Text("2024-01-02 03:04:05.123456".into())),
            ),
            ("doc", Some(Value::Text(r#"{"a": [1, 2]}"#.into()))),
            ("raw", Some(Value::Bytes(vec![0, 0xff, b'\'']))),
            ("note", Some(Value::Text("😀 \"quoted\"".into()))),
            ("ratio", Some(Value::Float(0.1))),
            ("delta", Some(Value::Int(i64::MIN))),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        Change {
            dc: "dc1".into(),
            server_id: 11,
            row: RowChange {
                schema: "app".into(),
                table: "t".into(),
                kind: ChangeKind::Update,
                columns,
                key: [("id".to_string(), Some(Value::Uint(u64::MAX)))].into(),
                values: [("note".to_string(), None)].into(),
                before: Some(before),
                contract: Some(Arc::new(Contract {
                    key: vec!["id".into()],
                    types: [("id".to_string(), "bigint unsigned".to_string())].into(),
                })),
            },
            position: Position {
                file: "mariadb-bin.000002".into(),
                pos: 643,
                gtid: Some("0-11-9".into()),
            },
            commit_ts: 1_714_557_600,
            txn: TxnRef {
                seq: 17,
                index: 0,
                last: true,
            },
            stream: Stream {
                epoch: 3,
                published: "0-11-7,1-12-4".parse().unwrap(),
                binlog: "0-11-8,1-12-4".parse().unwrap(),
                run: Some(4_096),
            },
        }
    }

    #[test]
    fn a_resume_message_published_before_the_run_followed_starts_none() {
        let at = |after| Resume {
            dc: "dc1".into(),
            server_id: 11,
            after,
        };
        // The run followed began with the resume message at offset 9: the next capture read
        // an end offset of at least 10.
        assert!(!at(Some(10)).precedes(Some(9)));
        assert!(at(Some(9)).precedes(Some(9)));
        assert!(at(Some(0)).precedes(Some(9)));
        // No run followed yet, or a resume message without `after`.
        assert!(!at(Some(0)).precedes(None));
        assert!(!at(None).precedes(Some(9)));
    }

    #[test]
    fn a_resume_message_is_told_from_a_change() {
        let resume = Resume {
            dc: "dc1".into(),
            server_id: 11,
            after: Some(7),
        };
        let json = resume.to_json();
        assert_eq!(Resume::from_json(&json).unwrap().unwrap(), resume);
        // Of a capture before `after`: it reads without one, and precedes nothing.
        let old = Resume::from_json(br#"{"resume":{"dc":"dc1","server_id":11}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(old.after, None);
        assert!(!old.precedes(Some(3)));
        assert!(Resume::from_json(&sample().to_json()).is_none());
        assert!(
            Resume::from_json(b"{\"resume\":{\"dc\":1}}")
                .unwrap()
                .is_err()
        );
        // A message of a capture before runs reads without one.
        let mut old: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        old["stream"].as_object_mut().unwrap().remove("run");
        let old = Change::from_json(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(old.stream.run, None);
    }

    #[test]
    fn round_trips_every_kind_exactly() {
        let change = sample();
        let json = change.to_json();
        assert_eq!(Change::from_json(&json).unwrap(), change);
    }

    #[test]
    fn values_are_written_as_documented() {
        let json: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        let before = &json["before"];
        // Unsigned 64-bit stays a number above i64::MAX, never a float or a negative.
        assert_eq!(before["id"].as_u64(), Some(u64::MAX));
        assert_eq!(before["price"], "-12.3400");
        assert_eq!(before["seen"], "2024-01-02 03:04:05.123456");
        assert_eq!(before["doc"], r#"{"a": [1, 2]}"#);
        assert_eq!(before["raw"], "AP8n");
        assert_eq!(before["ratio"].to_string(), "0.1");
        assert_eq!(json["values"]["note"], serde_json::Value::Null);
        assert_eq!(json["type"], "update");
        assert_eq!(json["file"], "mariadb-bin.000002");
        assert_eq!(json["gtid"], "0-11-9");
        assert_eq!(json["stream"]["published"], "0-11-7,1-12-4");
        assert_eq!(json["stream"]["binlog"], "0-11-8,1-12-4");
        assert_eq!(json["stream"]["epoch"], 3);
        assert_eq!(json["columns"]["id"], "uint");
    }

    #[test]
    fn refuses_values_that_do_not_fit_their_kind() {
        let good = String::from_utf8(sample().to_json()).unwrap();
        for (from, to) in [
            (r#""raw":"AP8n""#, r#""raw":"not base64!""#),
            (r#""price":"-12.3400""#, r#""price":-12.34"#),
            (r#""delta":-9223372036854775808"#, r#""delta":"x""#),
            (r#""key":{"id":18446744073709551615}"#, r#""key":{}"#),
            (
                r#""key":{"id":18446744073709551615}"#,
                r#""key":{"nope":1}"#,
            ),
            (r#""last":true"#, r#""last":1"#),
            (r#""type":"update""#, r#""type":"insert""#),
            (r#""id":18446744073709551615,"#, r#""id":-1,"#),
            (r#""published":"0-11-7,1-12-4""#, r#""published":"0-11""#),
        ] {
            assert!(good.contains(from), "{from} not in {good}");
            let bad = good.replacen(from, to, 1);
            assert!(Change::from_json(bad.as_bytes()).is_err(), "accepted {to}");
        }
        assert!(Change::from_json(b"{").is_err());
    }

    #[test]
    fn messages_of_earlier_versions_give_a_count() {
        let good = String::from_utf8(sample().to_json()).unwrap();
        let txn = |with: &str| {
            let text = good.replacen(r#""last":true"#, with, 1);
            Change::from_json(text.as_bytes()).map(|c| c.txn.last)
        };
        assert_eq!(txn(r#""count":1"#), Ok(true));
        assert_eq!(txn(r#""count":2"#), Ok(false));
        assert!(txn(r#""count":0"#).is_err());
        assert!(txn(r#""seen":1"#).is_err());
    }

    #[test]
    fn kinds_display_as_messages_spell_them() {
        for kind in [
            Kind::Int,
            Kind::Uint,
            Kind::Datetime,
            Kind::Binary,
            Kind::Set,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.to_string());
        }
    }

    #[test]
    fn binlog_files_order_by_number_then_offset() {
        let p = |file: &str, pos| Position {
            file: file.into(),
            pos,
            gtid: None,
        };
        assert!(p("bin.000002", 4).order() > p("bin.000001", 9000).order());
        assert!(p("bin.1000000", 4).order() > p("bin.999999", 4).order());
        assert_eq!(p("bin", 4).order(), None);
        assert_eq!(binlog_file_number("a.b.000010"), Some(10));
    }
}
