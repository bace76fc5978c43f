//! What a TABLE_MAP event says about a table: its columns' names, kinds, binary encodings and
//! exact types, and its primary key (the last two make the table's [`Contract`]).
//!
//! Names, signedness, character sets, ENUM and SET members and the primary key come from the
//! event's optional metadata, which the server writes only with `binlog_row_metadata=FULL`
//! (without it an unsigned BIGINT cannot be told from a signed one); lengths, DECIMAL precision
//! and scale and fractional digits from each column's metadata. Column encodings follow MySQL's
//! `Field::save_field_metadata` / `log_event_print_value`, which MariaDB shares.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mysql_async::binlog::events::{OptionalMetaExtractor, OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;

use super::change::Kind;
use super::contract::{Contract, SqlType};

/// Collation ID of the `binary` character set.
const BINARY_COLLATION: u16 = 63;

/// The server's collations by ID with their character sets (`information_schema.COLLATIONS`):
/// strings in UTF-8 character sets (utf8mb3, utf8mb4, and ASCII, a subset) travel as text,
/// others as bytes, and the contract names every column's character set.
#[derive(Debug, Clone, Default)]
pub struct Charsets {
    names: HashMap<u16, String>,
}

impl Charsets {
    pub fn new(collations: impl IntoIterator<Item = (u16, String)>) -> Charsets {
        Charsets {
            names: collations.into_iter().collect(),
        }
    }

    /// The character sets whose strings travel as text.
    pub const UTF8_NAMES: &'static [&'static str] = &["utf8mb3", "utf8mb4", "utf8", "ascii"];

    /// The character set of `collation`; `binary` for the binary collation (and one the server
    /// did not list, which cannot be read as text either).
    fn name(&self, collation: u16) -> &str {
        match self.names.get(&collation) {
            Some(name) if collation != BINARY_COLLATION => name,
            _ => "binary",
        }
    }

    fn kind(&self, collation: u16) -> Kind {
        let name = self.name(collation);
        if Self::UTF8_NAMES
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
        {
            Kind::Text
        } else {
            Kind::Binary
        }
    }
}

/// How one column's values are laid out in a row image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Little-endian, `bytes` long.
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    /// 3 bytes, little-endian `day | month << 5 | year << 9`.
    Date,
    /// MySQL 5.6 temporal formats with `dec` fractional digits.
    Datetime2 {
        dec: u8,
    },
    Timestamp2 {
        dec: u8,
    },
    Time2 {
        dec: u8,
    },
    Year,
    Bit {
        bytes: u8,
    },
    Enum {
        bytes: u8,
    },
    Set {
        bytes: u8,
    },
    /// A string after a little-endian length of `len_bytes` bytes (VARCHAR, CHAR, BLOB, TEXT,
    /// GEOMETRY).
    Bytes {
        len_bytes: u8,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub kind: Kind,
    pub codec: Codec,
}

/// A relayed table as its TABLE_MAP describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    pub schema: String,
    pub table: String,
    pub columns: Vec<Column>,
    /// Indexes of the primary key's columns.
    pub key: Vec<usize>,
    /// Every column's kind by name, as messages carry it.
    pub kinds: BTreeMap<String, Kind>,
    /// The key and exact types, as messages carry them.
    pub contract: Arc<Contract>,
}

impl TableSchema {
    /// Reads the table map; the error says what the server must change.
    pub fn from_table_map(
        tme: &TableMapEvent<'_>,
        charsets: &Charsets,
    ) -> Result<TableSchema, String> {
        let schema = tme.database_name().into_owned();
        let table = tme.table_name().into_owned();
        let at = |what: String| format!("table {schema}.{table}: {what}");
        let meta = OptionalMetaExtractor::new(tme.iter_optional_meta())
            .map_err(|e| at(format!("unreadable table map metadata: {e}")))?;
        let mut names = meta.iter_column_name();
        let mut signedness = meta.iter_signedness();
        let mut collations = meta.iter_charset();
        let (mut enums, mut sets) = enum_and_set_members(tme).map_err(&at)?;
        let count =
            usize::try_from(tme.columns_count()).map_err(|_| at("too many columns".into()))?;
        let mut columns = Vec::with_capacity(count);
        let mut types = BTreeMap::new();
        for i in 0..count {
            let name = match names.next() {
                Some(Ok(name)) => name.name().into_owned(),
                Some(Err(e)) => return Err(at(format!("unreadable column names: {e}"))),
                None => {
                    return Err(at(
                        "the binlog has no column names: the server needs binlog_row_metadata=FULL"
                            .into(),
                    ));
                }
            };
            let column_type = tme
                .get_column_type(i)
                .map_err(|e| at(format!("column {name}: {e}")))?
                .ok_or_else(|| at(format!("column {name} has no type")))?;
            let unsigned =
                if column_type.is_numeric_type() {
                    signedness.next().ok_or_else(|| {
                        at("the binlog has no signedness: the server needs binlog_row_metadata=FULL"
                        .into())
                    })?
                } else {
                    false
                };
            let collation = if column_type.is_character_type() {
                Some(
                    collations
                        .next()
                        .transpose()
                        .map_err(|e| at(format!("unreadable character sets: {e}")))?
                        .ok_or_else(|| {
                            at("the binlog has no character sets: the server needs \
                                binlog_row_metadata=FULL"
                                .into())
                        })?,
                )
            } else {
                None
            };
            let members = match column_type {
                ColumnType::MYSQL_TYPE_ENUM => enums.next(),
                ColumnType::MYSQL_TYPE_SET => sets.next(),
                _ => Some(Vec::new()),
            }
            .ok_or_else(|| {
                at(format!(
                    "the binlog has no members of {name}: the server needs binlog_row_metadata=FULL"
                ))
            })?;
            let raw = tme.get_column_metadata(i).unwrap_or(&[]);
            let (kind, codec, sql_type) =
                column_codec(column_type, raw, unsigned, collation, members, charsets)
                    .map_err(|e| at(format!("column {name}: {e}")))?;
            types.insert(name.clone(), sql_type.to_string());
            columns.push(Column { name, kind, codec });
        }
        let mut key = Vec::new();
        for index in meta.iter_primary_key() {
            let index = index.map_err(|e| at(format!("unreadable primary key: {e}")))?;
            let index = usize::try_from(index)
                .ok()
                .filter(|i| *i < count)
                .ok_or_else(|| at(format!("primary key column {index} out of range")))?;
            key.push(index);
        }
        if key.is_empty() {
            return Err(at(
                "no primary key: the relay applies changes by primary key, so every relayed table needs one"
                    .into(),
            ));
        }
        let kinds = columns.iter().map(|c| (c.name.clone(), c.kind)).collect();
        let contract = Arc::new(Contract {
            key: key.iter().map(|&i| columns[i].name.clone()).collect(),
            types,
        });
        Ok(TableSchema {
            schema,
            table,
            columns,
            key,
            kinds,
            contract,
        })
    }
}

/// Each column's members, in column order.
type Members = std::vec::IntoIter<Vec<String>>;

/// The members of each ENUM and of each SET column, in column order.
fn enum_and_set_members(tme: &TableMapEvent<'_>) -> Result<(Members, Members), String> {
    let (mut enums, mut sets) = (Vec::new(), Vec::new());
    for field in tme.iter_optional_meta() {
        match field.map_err(|e| format!("unreadable table map metadata: {e}"))? {
            OptionalMetadataField::EnumStrValue(values) => {
                for column in values.iter_values() {
                    let column = column.map_err(|e| format!("unreadable ENUM members: {e}"))?;
                    enums.push(
                        column
                            .values()
                            .iter()
                            .map(|v| v.value().into_owned())
                            .collect(),
                    );
                }
            }
            OptionalMetadataField::SetStrValue(values) => {
                for column in values.iter_values() {
                    let column = column.map_err(|e| format!("unreadable SET members: {e}"))?;
                    sets.push(
                        column
                            .values()
                            .iter()
                            .map(|v| v.value().into_owned())
                            .collect(),
                    );
                }
            }
            _ => {}
        }
    }
    Ok((enums.into_iter(), sets.into_iter()))
}

/// What a column's type and the metadata bytes the table map gives it say: how its values
/// are written in messages, how they are laid out in row images, and its exact type.
type Format = (Kind, Codec, SqlType);

/// A column's format from its type, the metadata bytes the table map gives it, and the
/// optional metadata's signedness, collation and ENUM or SET members.
fn column_codec(
    column_type: ColumnType,
    meta: &[u8],
    unsigned: bool,
    collation: Option<u16>,
    members: Vec<String>,
    charsets: &Charsets,
) -> Result<Format, String> {
    use ColumnType::*;
    let byte = |i: usize| {
        meta.get(i)
            .copied()
            .ok_or_else(|| format!("{column_type:?} metadata is {} bytes", meta.len()))
    };
    let int = |bytes: u8| {
        let kind = if unsigned { Kind::Uint } else { Kind::Int };
        Ok((
            kind,
            Codec::Int { bytes, unsigned },
            SqlType::Int { bytes, unsigned },
        ))
    };
    let collation = collation.unwrap_or(BINARY_COLLATION);
    let text = || charsets.kind(collation);
    let charset = || charsets.name(collation).to_string();
    let string = |max: u16, sql: fn(u32, String) -> SqlType| {
        Ok((
            text(),
            Codec::Bytes {
                len_bytes: if max < 256 { 1 } else { 2 },
            },
            sql(u32::from(max), charset()),
        ))
    };
    match column_type {
        MYSQL_TYPE_TINY => int(1),
        MYSQL_TYPE_SHORT => int(2),
        MYSQL_TYPE_INT24 => int(3),
        MYSQL_TYPE_LONG => int(4),
        MYSQL_TYPE_LONGLONG => int(8),
        MYSQL_TYPE_FLOAT => Ok((Kind::Float, Codec::Float, SqlType::Float { unsigned })),
        MYSQL_TYPE_DOUBLE => Ok((Kind::Double, Codec::Double, SqlType::Double { unsigned })),
        MYSQL_TYPE_NEWDECIMAL => {
            let (precision, scale) = (byte(0)?, byte(1)?);
            if scale > precision || precision > 65 || scale > 38 {
                return Err(format!(
                    "DECIMAL({precision},{scale}) is not a valid decimal"
                ));
            }
            Ok((
                Kind::Decimal,
                Codec::Decimal { precision, scale },
                SqlType::Decimal {
                    precision,
                    scale,
                    unsigned,
                },
            ))
        }
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => Ok((Kind::Date, Codec::Date, SqlType::Date)),
        MYSQL_TYPE_DATETIME2 => {
            let dec = fraction(byte(0)?)?;
            Ok((
                Kind::Datetime,
                Codec::Datetime2 { dec },
                SqlType::Datetime { dec },
            ))
        }
        MYSQL_TYPE_TIMESTAMP2 => {
            let dec = fraction(byte(0)?)?;
            Ok((
                Kind::Timestamp,
                Codec::Timestamp2 { dec },
                SqlType::Timestamp { dec },
            ))
        }
        MYSQL_TYPE_TIME2 => {
            let dec = fraction(byte(0)?)?;
            Ok((Kind::Time, Codec::Time2 { dec }, SqlType::Time { dec }))
        }
        MYSQL_TYPE_YEAR => Ok((Kind::Year, Codec::Year, SqlType::Year)),
        MYSQL_TYPE_BIT => {
            // Bits beyond whole bytes, then whole bytes.
            let bits = u16::from(byte(1)?) * 8 + u16::from(byte(0)?);
            let bytes = bits.div_ceil(8);
            if bytes > 8 {
                return Err(format!("BIT({bits}) is wider than 64 bits"));
            }
            Ok((
                Kind::Bit,
                Codec::Bit { bytes: bytes as u8 },
                SqlType::Bit { bits },
            ))
        }
        // ENUM and SET are STRING in the table map, the real type and the size in the metadata.
        MYSQL_TYPE_ENUM => match byte(1)? {
            bytes @ (1 | 2) => Ok((Kind::Enum, Codec::Enum { bytes }, SqlType::Enum { members })),
            other => Err(format!("ENUM of {other} bytes")),
        },
        MYSQL_TYPE_SET => match byte(1)? {
            bytes @ 1..=8 => Ok((Kind::Set, Codec::Set { bytes }, SqlType::Set { members })),
            other => Err(format!("SET of {other} bytes")),
        },
        MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => string(
            u16::from_le_bytes([byte(0)?, byte(1)?]),
            |bytes, charset| SqlType::Varchar { bytes, charset },
        ),
        MYSQL_TYPE_STRING => {
            // CHAR(n): the byte length's top bits are folded into the type byte (MySQL bug
            // #37426).
            let (b0, b1) = (u16::from(byte(0)?), u16::from(byte(1)?));
            let max = if b0 & 0x30 != 0x30 {
                b1 | (((b0 & 0x30) ^ 0x30) << 4)
            } else {
                b1
            };
            string(max, |bytes, charset| SqlType::Char { bytes, charset })
        }
        MYSQL_TYPE_BLOB | MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB => {
            match byte(0)? {
                len_bytes @ 1..=4 => Ok((
                    text(),
                    Codec::Bytes { len_bytes },
                    SqlType::Text {
                        len_bytes,
                        charset: charset(),
                    },
                )),
                other => Err(format!("BLOB with a {other}-byte length")),
            }
        }
        MYSQL_TYPE_GEOMETRY => match byte(0)? {
            len_bytes @ 1..=4 => Ok((Kind::Binary, Codec::Bytes { len_bytes }, SqlType::Geometry)),
            other => Err(format!("GEOMETRY with a {other}-byte length")),
        },
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_DATETIME | MYSQL_TYPE_TIME => Err(format!(
            "{column_type:?} is a temporal format from before MySQL 5.6 / MariaDB 10.1; \
             ALTER TABLE ... FORCE rewrites the table in the current format"
        )),
        other => Err(format!("{other:?} columns are not supported by the relay")),
    }
}

fn fraction(dec: u8) -> Result<u8, String> {
    if dec <= 6 {
        Ok(dec)
    } else {
        Err(format!("{dec} fractional digits (at most 6)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf8() -> Charsets {
        Charsets::new([
            (8, "latin1".to_string()),
            (33, "utf8mb3".to_string()),
            (45, "utf8mb4".to_string()),
            (46, "utf8mb4".to_string()),
            (63, "binary".to_string()),
        ])
    }

    fn kind_and_codec(
        column_type: ColumnType,
        meta: &[u8],
        unsigned: bool,
        collation: Option<u16>,
        charsets: &Charsets,
    ) -> Result<(Kind, Codec), String> {
        column_codec(column_type, meta, unsigned, collation, Vec::new(), charsets)
            .map(|(kind, codec, _)| (kind, codec))
    }

    /// The exact types the contract compares, from the same bytes the codecs are read from.
    #[test]
    fn exact_types_keep_lengths_scales_precisions_members_and_charsets() {
        let c = utf8();
        let sql = |t, meta: &[u8], unsigned, collation, members: &[&str]| {
            let members = members.iter().map(|m| m.to_string()).collect();
            column_codec(t, meta, unsigned, collation, members, &c)
                .unwrap()
                .2
                .to_string()
        };
        use ColumnType::*;
        assert_eq!(
            sql(MYSQL_TYPE_LONGLONG, &[], true, None, &[]),
            "bigint unsigned"
        );
        assert_eq!(sql(MYSQL_TYPE_TINY, &[], false, None, &[]), "tinyint");
        assert_eq!(
            sql(MYSQL_TYPE_NEWDECIMAL, &[18, 6], false, None, &[]),
            "decimal(18,6)"
        );
        assert_eq!(
            sql(MYSQL_TYPE_DATETIME2, &[3], false, None, &[]),
            "datetime(3)"
        );
        assert_eq!(
            sql(MYSQL_TYPE_TIMESTAMP2, &[0], false, None, &[]),
            "timestamp(0)"
        );
        assert_eq!(sql(MYSQL_TYPE_BIT, &[5, 0], false, None, &[]), "bit(5)");
        assert_eq!(
            sql(MYSQL_TYPE_ENUM, &[0xf7, 1], false, None, &["b", "a"]),
            "enum('b','a')"
        );
        assert_eq!(
            sql(MYSQL_TYPE_SET, &[0xf8, 1], false, None, &["x"]),
            "set('x')"
        );
        assert_eq!(
            sql(MYSQL_TYPE_VARCHAR, &[0, 1], false, Some(45), &[]),
            "varchar(256 bytes) utf8mb4"
        );
        assert_eq!(
            sql(MYSQL_TYPE_VARCHAR, &[16, 0], false, Some(63), &[]),
            "varbinary(16)"
        );
        assert_eq!(
            sql(MYSQL_TYPE_STRING, &[0xfe, 12], false, Some(8), &[]),
            "char(12 bytes) latin1"
        );
        assert_eq!(
            sql(MYSQL_TYPE_BLOB, &[4], false, Some(46), &[]),
            "longtext utf8mb4"
        );
        assert_eq!(sql(MYSQL_TYPE_BLOB, &[2], false, Some(63), &[]), "blob");
    }

    #[test]
    fn integers_follow_signedness() {
        let c = utf8();
        assert_eq!(
            kind_and_codec(ColumnType::MYSQL_TYPE_LONGLONG, &[], true, None, &c).unwrap(),
            (
                Kind::Uint,
                Codec::Int {
                    bytes: 8,
                    unsigned: true
                }
            )
        );
        assert_eq!(
            kind_and_codec(ColumnType::MYSQL_TYPE_INT24, &[], false, None, &c).unwrap(),
            (
                Kind::Int,
                Codec::Int {
                    bytes: 3,
                    unsigned: false
                }
            )
        );
    }

    #[test]
    fn strings_are_text_only_in_utf8() {
        let c = utf8();
        let varchar = |collation| {
            kind_and_codec(
                ColumnType::MYSQL_TYPE_VARCHAR,
                &[80, 0],
                false,
                Some(collation),
                &c,
            )
            .unwrap()
        };
        assert_eq!(varchar(45), (Kind::Text, Codec::Bytes { len_bytes: 1 }));
        assert_eq!(varchar(63).0, Kind::Binary);
        // latin1: bytes, so nothing is converted on the way.
        assert_eq!(varchar(8).0, Kind::Binary);
        // VARCHAR(300) in bytes needs a 2-byte length.
        let long = kind_and_codec(
            ColumnType::MYSQL_TYPE_VARCHAR,
            &[0x2c, 1],
            false,
            Some(45),
            &c,
        );
        assert_eq!(long.unwrap().1, Codec::Bytes { len_bytes: 2 });
        let blob = kind_and_codec(ColumnType::MYSQL_TYPE_BLOB, &[4], false, Some(63), &c);
        assert_eq!(blob.unwrap(), (Kind::Binary, Codec::Bytes { len_bytes: 4 }));
    }

    #[test]
    fn char_length_keeps_its_folded_bits() {
        let c = utf8();
        // CHAR(255) utf8mb4 is 1020 bytes: 0x3fc, written as type byte 0xce and 0xfc.
        let wide = kind_and_codec(
            ColumnType::MYSQL_TYPE_STRING,
            &[0xce, 0xfc],
            false,
            Some(45),
            &c,
        );
        assert_eq!(wide.unwrap().1, Codec::Bytes { len_bytes: 2 });
        let narrow = kind_and_codec(
            ColumnType::MYSQL_TYPE_STRING,
            &[0xfe, 12],
            false,
            Some(45),
            &c,
        );
        assert_eq!(narrow.unwrap().1, Codec::Bytes { len_bytes: 1 });
    }

    #[test]
    fn temporal_and_exact_numeric_metadata() {
        let c = utf8();
        let codec = |t, meta: &[u8]| kind_and_codec(t, meta, false, None, &c);
        assert_eq!(
            codec(ColumnType::MYSQL_TYPE_DATETIME2, &[6]).unwrap(),
            (Kind::Datetime, Codec::Datetime2 { dec: 6 })
        );
        assert_eq!(
            codec(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[65, 30])
                .unwrap()
                .1,
            Codec::Decimal {
                precision: 65,
                scale: 30
            }
        );
        assert_eq!(
            codec(ColumnType::MYSQL_TYPE_BIT, &[2, 1]).unwrap().1,
            Codec::Bit { bytes: 2 }
        );
        for (t, meta) in [
            (ColumnType::MYSQL_TYPE_DATETIME2, &[7][..]),
            (ColumnType::MYSQL_TYPE_NEWDECIMAL, &[4, 5][..]),
            (ColumnType::MYSQL_TYPE_NEWDECIMAL, &[4][..]),
            (ColumnType::MYSQL_TYPE_BIT, &[0, 9][..]),
            (ColumnType::MYSQL_TYPE_DATETIME, &[][..]),
            (ColumnType::MYSQL_TYPE_JSON, &[4][..]),
        ] {
            assert!(codec(t, meta).is_err(), "{t:?} {meta:?} accepted");
        }
    }
}
