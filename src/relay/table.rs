//! What a TABLE_MAP event says about a table: its columns' names, kinds and binary encodings,
//! and its primary key.
//!
//! Names, signedness, character sets and the primary key come from the event's optional
//! metadata, which the server writes only with `binlog_row_metadata=FULL` (without it an
//! unsigned BIGINT cannot be told from a signed one). Column encodings follow MySQL's
//! `Field::save_field_metadata` / `log_event_print_value`, which MariaDB shares.

use std::collections::{BTreeMap, HashSet};

use mysql_async::binlog::events::{OptionalMetaExtractor, TableMapEvent};
use mysql_async::consts::ColumnType;

use super::change::Kind;

/// Collation ID of the `binary` character set.
const BINARY_COLLATION: u16 = 63;

/// The collations whose character set stores UTF-8 (utf8mb3, utf8mb4, and ASCII, a subset), as
/// the server lists them in `information_schema.COLLATIONS`. Strings in other character sets
/// travel as bytes.
#[derive(Debug, Clone, Default)]
pub struct Charsets {
    utf8: HashSet<u16>,
}

impl Charsets {
    pub fn new(utf8_collations: impl IntoIterator<Item = u16>) -> Charsets {
        Charsets {
            utf8: utf8_collations.into_iter().collect(),
        }
    }

    /// The character sets whose collations [`Charsets::new`] wants.
    pub const UTF8_NAMES: &'static [&'static str] = &["utf8mb3", "utf8mb4", "utf8", "ascii"];

    fn kind(&self, collation: u16) -> Kind {
        if collation != BINARY_COLLATION && self.utf8.contains(&collation) {
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
        let count =
            usize::try_from(tme.columns_count()).map_err(|_| at("too many columns".into()))?;
        let mut columns = Vec::with_capacity(count);
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
            let raw = tme.get_column_metadata(i).unwrap_or(&[]);
            let (kind, codec) = column_codec(column_type, raw, unsigned, collation, charsets)
                .map_err(|e| at(format!("column {name}: {e}")))?;
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
        Ok(TableSchema {
            schema,
            table,
            columns,
            key,
            kinds,
        })
    }
}

/// A column's kind and layout from its type and the metadata bytes the table map gives it.
fn column_codec(
    column_type: ColumnType,
    meta: &[u8],
    unsigned: bool,
    collation: Option<u16>,
    charsets: &Charsets,
) -> Result<(Kind, Codec), String> {
    use ColumnType::*;
    let byte = |i: usize| {
        meta.get(i)
            .copied()
            .ok_or_else(|| format!("{column_type:?} metadata is {} bytes", meta.len()))
    };
    let int = |bytes: u8| {
        let kind = if unsigned { Kind::Uint } else { Kind::Int };
        Ok((kind, Codec::Int { bytes, unsigned }))
    };
    let text = || charsets.kind(collation.unwrap_or(BINARY_COLLATION));
    match column_type {
        MYSQL_TYPE_TINY => int(1),
        MYSQL_TYPE_SHORT => int(2),
        MYSQL_TYPE_INT24 => int(3),
        MYSQL_TYPE_LONG => int(4),
        MYSQL_TYPE_LONGLONG => int(8),
        MYSQL_TYPE_FLOAT => Ok((Kind::Float, Codec::Float)),
        MYSQL_TYPE_DOUBLE => Ok((Kind::Double, Codec::Double)),
        MYSQL_TYPE_NEWDECIMAL => {
            let (precision, scale) = (byte(0)?, byte(1)?);
            if scale > precision || precision > 65 || scale > 38 {
                return Err(format!(
                    "DECIMAL({precision},{scale}) is not a valid decimal"
                ));
            }
            Ok((Kind::Decimal, Codec::Decimal { precision, scale }))
        }
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => Ok((Kind::Date, Codec::Date)),
        MYSQL_TYPE_DATETIME2 => Ok((
            Kind::Datetime,
            Codec::Datetime2 {
                dec: fraction(byte(0)?)?,
            },
        )),
        MYSQL_TYPE_TIMESTAMP2 => Ok((
            Kind::Timestamp,
            Codec::Timestamp2 {
                dec: fraction(byte(0)?)?,
            },
        )),
        MYSQL_TYPE_TIME2 => Ok((
            Kind::Time,
            Codec::Time2 {
                dec: fraction(byte(0)?)?,
            },
        )),
        MYSQL_TYPE_YEAR => Ok((Kind::Year, Codec::Year)),
        MYSQL_TYPE_BIT => {
            // Bits beyond whole bytes, then whole bytes.
            let bits = u16::from(byte(1)?) * 8 + u16::from(byte(0)?);
            let bytes = bits.div_ceil(8);
            if bytes > 8 {
                return Err(format!("BIT({bits}) is wider than 64 bits"));
            }
            Ok((Kind::Bit, Codec::Bit { bytes: bytes as u8 }))
        }
        // ENUM and SET are STRING in the table map, the real type and the size in the metadata.
        MYSQL_TYPE_ENUM => match byte(1)? {
            bytes @ (1 | 2) => Ok((Kind::Enum, Codec::Enum { bytes })),
            other => Err(format!("ENUM of {other} bytes")),
        },
        MYSQL_TYPE_SET => match byte(1)? {
            bytes @ 1..=8 => Ok((Kind::Set, Codec::Set { bytes })),
            other => Err(format!("SET of {other} bytes")),
        },
        MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => {
            let max = u16::from_le_bytes([byte(0)?, byte(1)?]);
            Ok((
                text(),
                Codec::Bytes {
                    len_bytes: if max < 256 { 1 } else { 2 },
                },
            ))
        }
        MYSQL_TYPE_STRING => {
            // CHAR(n): the byte length's top bits are folded into the type byte (MySQL bug
            // #37426).
            let (b0, b1) = (u16::from(byte(0)?), u16::from(byte(1)?));
            let max = if b0 & 0x30 != 0x30 {
                b1 | (((b0 & 0x30) ^ 0x30) << 4)
            } else {
                b1
            };
            Ok((
                text(),
                Codec::Bytes {
                    len_bytes: if max < 256 { 1 } else { 2 },
                },
            ))
        }
        MYSQL_TYPE_BLOB | MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB => {
            match byte(0)? {
                len_bytes @ 1..=4 => Ok((text(), Codec::Bytes { len_bytes })),
                other => Err(format!("BLOB with a {other}-byte length")),
            }
        }
        MYSQL_TYPE_GEOMETRY => match byte(0)? {
            len_bytes @ 1..=4 => Ok((Kind::Binary, Codec::Bytes { len_bytes })),
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
        Charsets::new([33, 45, 46, 224])
    }

    #[test]
    fn integers_follow_signedness() {
        let c = utf8();
        assert_eq!(
            column_codec(ColumnType::MYSQL_TYPE_LONGLONG, &[], true, None, &c).unwrap(),
            (
                Kind::Uint,
                Codec::Int {
                    bytes: 8,
                    unsigned: true
                }
            )
        );
        assert_eq!(
            column_codec(ColumnType::MYSQL_TYPE_INT24, &[], false, None, &c).unwrap(),
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
            column_codec(
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
        let long = column_codec(
            ColumnType::MYSQL_TYPE_VARCHAR,
            &[0x2c, 1],
            false,
            Some(45),
            &c,
        );
        assert_eq!(long.unwrap().1, Codec::Bytes { len_bytes: 2 });
        let blob = column_codec(ColumnType::MYSQL_TYPE_BLOB, &[4], false, Some(63), &c);
        assert_eq!(blob.unwrap(), (Kind::Binary, Codec::Bytes { len_bytes: 4 }));
    }

    #[test]
    fn char_length_keeps_its_folded_bits() {
        let c = utf8();
        // CHAR(255) utf8mb4 is 1020 bytes: 0x3fc, written as type byte 0xce and 0xfc.
        let wide = column_codec(
            ColumnType::MYSQL_TYPE_STRING,
            &[0xce, 0xfc],
            false,
            Some(45),
            &c,
        );
        assert_eq!(wide.unwrap().1, Codec::Bytes { len_bytes: 2 });
        let narrow = column_codec(
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
        let codec = |t, meta: &[u8]| column_codec(t, meta, false, None, &c);
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
