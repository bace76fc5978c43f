//! The schema contract of a relayed table: its primary key's columns in key order and every
//! column's exact type. Capture reads it from the table map (`binlog_row_metadata=FULL` gives
//! names, signedness, character sets, ENUM and SET members and the primary key; the column
//! metadata gives lengths, DECIMAL precision and scale and fractional digits), each message
//! carries it, and the applier reads the local table's from `information_schema`. A table's
//! changes are applied only where both are the same, so a different key cannot turn one DELETE
//! into many and a different ENUM order, DECIMAL scale or DATETIME precision cannot rewrite
//! values.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What a relayed table must be the same in in both data centres.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    /// The primary key's columns, in key order.
    pub key: Vec<String>,
    /// Every column's exact type, as [`SqlType`] writes it.
    pub types: BTreeMap<String, String>,
}

/// A column's exact type. Lengths of character columns are in bytes (the table map has no
/// other), so `VARCHAR(64)` in utf8mb4 and `VARCHAR(256)` in latin1 differ by their character
/// set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlType {
    /// `tinyint` to `bigint`, by its width in bytes.
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Float {
        unsigned: bool,
    },
    Double {
        unsigned: bool,
    },
    Decimal {
        precision: u8,
        scale: u8,
        unsigned: bool,
    },
    Date,
    Year,
    Datetime {
        dec: u8,
    },
    Timestamp {
        dec: u8,
    },
    Time {
        dec: u8,
    },
    Bit {
        bits: u16,
    },
    Enum {
        members: Vec<String>,
    },
    Set {
        members: Vec<String>,
    },
    /// CHAR and BINARY (`charset` `binary`), `bytes` long at most.
    Char {
        bytes: u32,
        charset: String,
    },
    /// VARCHAR and VARBINARY.
    Varchar {
        bytes: u32,
        charset: String,
    },
    /// TEXT and BLOB, by the size of their length prefix (1: TINYTEXT, 4: LONGTEXT).
    Text {
        len_bytes: u8,
        charset: String,
    },
    Geometry,
}

const BINARY: &str = "binary";

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = |unsigned: bool| if unsigned { " unsigned" } else { "" };
        match self {
            SqlType::Int { bytes, unsigned } => {
                let name = match bytes {
                    1 => "tinyint",
                    2 => "smallint",
                    3 => "mediumint",
                    4 => "int",
                    _ => "bigint",
                };
                write!(f, "{name}{}", sign(*unsigned))
            }
            SqlType::Float { unsigned } => write!(f, "float{}", sign(*unsigned)),
            SqlType::Double { unsigned } => write!(f, "double{}", sign(*unsigned)),
            SqlType::Decimal {
                precision,
                scale,
                unsigned,
            } => write!(f, "decimal({precision},{scale}){}", sign(*unsigned)),
            SqlType::Date => f.write_str("date"),
            SqlType::Year => f.write_str("year"),
            SqlType::Datetime { dec } => write!(f, "datetime({dec})"),
            SqlType::Timestamp { dec } => write!(f, "timestamp({dec})"),
            SqlType::Time { dec } => write!(f, "time({dec})"),
            SqlType::Bit { bits } => write!(f, "bit({bits})"),
            SqlType::Enum { members } => write!(f, "enum({})", quoted(members)),
            SqlType::Set { members } => write!(f, "set({})", quoted(members)),
            SqlType::Char { bytes, charset } if charset == BINARY => write!(f, "binary({bytes})"),
            SqlType::Char { bytes, charset } => write!(f, "char({bytes} bytes) {charset}"),
            SqlType::Varchar { bytes, charset } if charset == BINARY => {
                write!(f, "varbinary({bytes})")
            }
            SqlType::Varchar { bytes, charset } => write!(f, "varchar({bytes} bytes) {charset}"),
            SqlType::Text { len_bytes, charset } => {
                let size = ["tiny", "", "medium", "long"]
                    .get(usize::from(len_bytes.saturating_sub(1)))
                    .unwrap_or(&"long");
                if charset == BINARY {
                    write!(f, "{size}blob")
                } else {
                    write!(f, "{size}text {charset}")
                }
            }
            SqlType::Geometry => f.write_str("geometry"),
        }
    }
}

/// The length of a BINARY(n) column, from its type as [`SqlType`] writes it (the binlog leaves
/// out such a value's trailing zero bytes, which the column keeps).
pub fn binary_length(sql_type: &str) -> Option<u32> {
    sql_type
        .strip_prefix("binary(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

fn quoted(members: &[String]) -> String {
    members
        .iter()
        .map(|m| format!("'{}'", m.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",")
}

/// A local column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalColumn {
    pub name: String,
    pub data_type: String,
    pub column_type: String,
    pub charset: Option<String>,
    pub octet_length: Option<u64>,
    pub precision: Option<u64>,
    pub scale: Option<u64>,
    pub datetime_precision: Option<u64>,
}

impl LocalColumn {
    /// The column's exact type, written as capture writes it; `None` for a type the relay does
    /// not carry.
    pub fn sql_type(&self) -> Option<SqlType> {
        let unsigned = self.column_type.to_ascii_lowercase().contains("unsigned");
        let small = |n: Option<u64>| n.and_then(|n| u8::try_from(n).ok()).unwrap_or(0);
        let bytes = || u32::try_from(self.octet_length.unwrap_or(0)).unwrap_or(u32::MAX);
        let charset = || self.charset.clone().unwrap_or_else(|| BINARY.to_string());
        let text = |len_bytes| SqlType::Text {
            len_bytes,
            charset: charset(),
        };
        let int = |bytes| SqlType::Int { bytes, unsigned };
        Some(match self.data_type.to_ascii_lowercase().as_str() {
            "tinyint" => int(1),
            "smallint" => int(2),
            "mediumint" => int(3),
            "int" => int(4),
            "bigint" => int(8),
            "float" => SqlType::Float { unsigned },
            "double" => SqlType::Double { unsigned },
            "decimal" => SqlType::Decimal {
                precision: small(self.precision),
                scale: small(self.scale),
                unsigned,
            },
            "date" => SqlType::Date,
            "year" => SqlType::Year,
            "datetime" => SqlType::Datetime {
                dec: small(self.datetime_precision),
            },
            "timestamp" => SqlType::Timestamp {
                dec: small(self.datetime_precision),
            },
            "time" => SqlType::Time {
                dec: small(self.datetime_precision),
            },
            "bit" => SqlType::Bit {
                bits: self
                    .precision
                    .and_then(|n| u16::try_from(n).ok())
                    .unwrap_or(0),
            },
            "enum" => SqlType::Enum {
                members: members(&self.column_type)?,
            },
            "set" => SqlType::Set {
                members: members(&self.column_type)?,
            },
            "char" | "binary" => SqlType::Char {
                bytes: bytes(),
                charset: charset(),
            },
            "varchar" | "varbinary" => SqlType::Varchar {
                bytes: bytes(),
                charset: charset(),
            },
            "tinytext" | "tinyblob" => text(1),
            "text" | "blob" => text(2),
            "mediumtext" | "mediumblob" => text(3),
            "longtext" | "longblob" => text(4),
            "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
            | "multipolygon" | "geometrycollection" => SqlType::Geometry,
            _ => return None,
        })
    }
}

/// The members of `enum('a','it''s')` or `set(..)`, as `COLUMN_TYPE` lists them.
fn members(column_type: &str) -> Option<Vec<String>> {
    let inner = column_type.split_once('(')?.1.strip_suffix(')')?;
    let mut members = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(open) = chars.next() {
        if open == ',' {
            continue;
        }
        if open != '\'' {
            return None;
        }
        let mut member = String::new();
        loop {
            match chars.next()? {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    member.push('\'');
                }
                '\'' => break,
                c => member.push(c),
            }
        }
        members.push(member);
    }
    Some(members)
}

/// The local table's contract: its columns from `information_schema.COLUMNS` and its key from
/// `information_schema.STATISTICS`.
pub fn local_contract(columns: &[LocalColumn], key: Vec<String>) -> Contract {
    Contract {
        key,
        types: columns
            .iter()
            .map(|c| {
                let sql = c.sql_type().map_or_else(
                    || format!("{} (not carried by the relay)", c.column_type),
                    |t| t.to_string(),
                );
                (c.name.clone(), sql)
            })
            .collect(),
    }
}

/// How the source's contract differs from the local one, one line per difference; empty when
/// they agree.
pub fn differences(source: &Contract, local: &Contract, source_dc: &str) -> Vec<String> {
    let mut out = Vec::new();
    if source.key != local.key {
        out.push(format!(
            "the primary key is ({}) in {source_dc} but ({}) here",
            source.key.join(", "),
            local.key.join(", ")
        ));
    }
    for (name, sql) in &source.types {
        match local.types.get(name) {
            None => out.push(format!(
                "column {name} ({sql}) is in {source_dc} but not here"
            )),
            Some(here) if here == sql => {}
            Some(here) => out.push(format!(
                "column {name} is {sql} in {source_dc} but {here} here"
            )),
        }
    }
    for name in local.types.keys() {
        if !source.types.contains_key(name) {
            out.push(format!("column {name} is here but not in {source_dc}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, data_type: &str, column_type: &str) -> LocalColumn {
        LocalColumn {
            name: name.into(),
            data_type: data_type.into(),
            column_type: column_type.into(),
            ..LocalColumn::default()
        }
    }

    #[test]
    fn enum_and_set_members_are_read_in_order_with_quotes() {
        assert_eq!(
            members("enum('a','it''s','b,c')").unwrap(),
            ["a", "it's", "b,c"]
        );
        assert_eq!(members("set('x')").unwrap(), ["x"]);
        assert_eq!(members("enum('')").unwrap(), [""]);
        assert!(members("enum(a)").is_none());
    }

    #[test]
    fn local_types_read_as_capture_writes_them() {
        let decimal = LocalColumn {
            precision: Some(18),
            scale: Some(6),
            ..column("p", "decimal", "decimal(18,6) unsigned")
        };
        assert_eq!(
            decimal.sql_type().unwrap().to_string(),
            "decimal(18,6) unsigned"
        );
        let varchar = LocalColumn {
            charset: Some("utf8mb4".into()),
            octet_length: Some(256),
            ..column("n", "varchar", "varchar(64)")
        };
        assert_eq!(
            varchar.sql_type().unwrap().to_string(),
            "varchar(256 bytes) utf8mb4"
        );
        let blob = LocalColumn {
            octet_length: Some(65_535),
            ..column("b", "blob", "blob")
        };
        assert_eq!(blob.sql_type().unwrap().to_string(), "blob");
        let fixed = LocalColumn {
            octet_length: Some(4),
            ..column("f", "binary", "binary(4)")
        };
        let fixed = fixed.sql_type().unwrap().to_string();
        assert_eq!(
            (fixed.as_str(), binary_length(&fixed)),
            ("binary(4)", Some(4))
        );
        assert_eq!(binary_length("varbinary(4)"), None);
        let seen = LocalColumn {
            datetime_precision: Some(3),
            ..column("s", "datetime", "datetime(3)")
        };
        assert_eq!(seen.sql_type().unwrap().to_string(), "datetime(3)");
        assert_eq!(
            column("i", "bigint", "bigint(20) unsigned")
                .sql_type()
                .unwrap(),
            SqlType::Int {
                bytes: 8,
                unsigned: true
            }
        );
        assert!(column("x", "inet6", "inet6").sql_type().is_none());
    }

    fn contract(key: &[&str], types: &[(&str, SqlType)]) -> Contract {
        Contract {
            key: key.iter().map(|k| k.to_string()).collect(),
            types: types
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
        }
    }

    /// Every difference the contract exists for is one, and the same table is none.
    #[test]
    fn each_difference_is_refused_and_the_same_table_is_not() {
        let members = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = [
            (
                "id",
                SqlType::Int {
                    bytes: 8,
                    unsigned: true,
                },
            ),
            (
                "state",
                SqlType::Enum {
                    members: members(&["new", "done"]),
                },
            ),
            (
                "price",
                SqlType::Decimal {
                    precision: 10,
                    scale: 2,
                    unsigned: false,
                },
            ),
            ("seen", SqlType::Datetime { dec: 6 }),
            (
                "note",
                SqlType::Varchar {
                    bytes: 256,
                    charset: "utf8mb4".into(),
                },
            ),
        ];
        let source = contract(&["id"], &base);
        assert!(differences(&source, &source.clone(), "a").is_empty());
        let changed = |i: usize, t: SqlType| {
            let mut types = base.clone();
            types[i].1 = t;
            contract(&["id"], &types)
        };
        let cases = [
            (
                changed(
                    0,
                    SqlType::Int {
                        bytes: 8,
                        unsigned: false,
                    },
                ),
                "column id is bigint unsigned in a but bigint here",
            ),
            (
                changed(
                    1,
                    SqlType::Enum {
                        members: members(&["done", "new"]),
                    },
                ),
                "column state is enum('new','done') in a but enum('done','new') here",
            ),
            (
                changed(
                    2,
                    SqlType::Decimal {
                        precision: 10,
                        scale: 3,
                        unsigned: false,
                    },
                ),
                "column price is decimal(10,2) in a but decimal(10,3) here",
            ),
            (
                changed(3, SqlType::Datetime { dec: 3 }),
                "column seen is datetime(6) in a but datetime(3) here",
            ),
            (
                changed(
                    4,
                    SqlType::Varchar {
                        bytes: 256,
                        charset: "latin1".into(),
                    },
                ),
                "column note is varchar(256 bytes) utf8mb4 in a but varchar(256 bytes) latin1 here",
            ),
            (
                changed(
                    4,
                    SqlType::Varchar {
                        bytes: 128,
                        charset: "utf8mb4".into(),
                    },
                ),
                "column note is varchar(256 bytes) utf8mb4 in a but varchar(128 bytes) utf8mb4 here",
            ),
            (
                contract(&["id", "state"], &base),
                "the primary key is (id) in a but (id, state) here",
            ),
        ];
        for (local, expected) in cases {
            assert_eq!(differences(&source, &local, "a"), [expected]);
        }
        let fewer = contract(&["id"], &base[..4]);
        assert_eq!(
            differences(&source, &fewer, "a"),
            ["column note (varchar(256 bytes) utf8mb4) is in a but not here"]
        );
        assert_eq!(
            differences(&fewer, &source, "a"),
            ["column note is here but not in a"]
        );
    }
}
