//! Row images of WRITE/UPDATE/DELETE rows events, decoded into typed values.
//!
//! The binlog library decodes rows too, but it panics on a negative TIME with a fraction and
//! reads YEAR 0000 as 1900; this decoder covers the column types the relay accepts (see
//! [`super::table`]) and returns an error for anything it cannot read. Layouts follow MySQL's
//! `log_event_print_value` and `my_*_packed_from_binary` (sql-common/my_time.cc), which
//! MariaDB shares.

use std::fmt::Write as _;

use chrono::DateTime;

use super::change::{Kind, Value};
use super::table::{Codec, Column, TableSchema};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode a row of {table}: {reason}")]
pub struct DecodeError {
    pub table: String,
    pub reason: String,
}

/// One row image: every column's value, `None` for NULL.
pub type Image = Vec<Option<Value>>;

/// The images of one rows event, in order: after images for WRITE, before images for
/// DELETE, (before, after) pairs for UPDATE. `present` is the event's column bitmap for
/// each image; the relay needs `binlog_row_image=FULL`, so every column must be present.
pub fn decode_images(
    table: &TableSchema,
    present: &[&[bool]],
    data: &[u8],
) -> Result<Vec<Image>, DecodeError> {
    let fail = |reason: String| DecodeError {
        table: format!("{}.{}", table.schema, table.table),
        reason,
    };
    for bits in present {
        if bits.len() != table.columns.len() || !bits.iter().all(|b| *b) {
            return Err(fail(
                "the row image lacks columns: the server needs binlog_row_image=FULL".into(),
            ));
        }
    }
    let mut input = Input(data);
    let mut images = Vec::new();
    while !input.0.is_empty() {
        for _ in present {
            images.push(decode_image(&table.columns, &mut input).map_err(&fail)?);
        }
    }
    Ok(images)
}

/// A null bitmap over the columns, then each non-NULL value.
fn decode_image(columns: &[Column], input: &mut Input<'_>) -> Result<Image, String> {
    let nulls = input.take(columns.len().div_ceil(8))?;
    let mut image = Vec::with_capacity(columns.len());
    for (i, column) in columns.iter().enumerate() {
        if nulls[i / 8] & (1 << (i % 8)) != 0 {
            image.push(None);
        } else {
            let value =
                decode_value(column, input).map_err(|e| format!("column {}: {e}", column.name))?;
            image.push(Some(value));
        }
    }
    Ok(image)
}

fn decode_value(column: &Column, input: &mut Input<'_>) -> Result<Value, String> {
    Ok(match column.codec {
        Codec::Int { bytes, unsigned } => {
            let raw = input.le(bytes)?;
            if unsigned {
                Value::Uint(raw)
            } else {
                // Sign-extend from the stored width.
                let shift = 64 - 8 * u32::from(bytes);
                Value::Int(((raw << shift) as i64) >> shift)
            }
        }
        Codec::Float => {
            let f = f32::from_bits(input.le(4)? as u32);
            // The shortest decimal that reads back as this f32, so 0.1 stays 0.1 rather than
            // becoming 0.10000000149011612.
            Value::Float(f.to_string().parse::<f64>().map_err(|e| e.to_string())?)
        }
        Codec::Double => Value::Float(f64::from_bits(input.le(8)?)),
        Codec::Decimal { precision, scale } => Value::Text(decimal(input, precision, scale)?),
        Codec::Date => {
            let v = input.le(3)?;
            Value::Text(format!("{:04}-{:02}-{:02}", v >> 9, (v >> 5) & 15, v & 31))
        }
        Codec::Datetime2 { dec } => Value::Text(datetime2(input, dec)?),
        Codec::Timestamp2 { dec } => Value::Text(timestamp2(input, dec)?),
        Codec::Time2 { dec } => Value::Text(time2(input, dec)?),
        // 0 is the zero year 0000; others count from 1900.
        Codec::Year => Value::Uint(match input.le(1)? {
            0 => 0,
            y => 1900 + y,
        }),
        Codec::Bit { bytes } => Value::Uint(input.be(bytes)?),
        Codec::Enum { bytes } | Codec::Set { bytes } => Value::Uint(input.le(bytes)?),
        Codec::Bytes { len_bytes } => {
            let len = usize::try_from(input.le(len_bytes)?).map_err(|e| e.to_string())?;
            let bytes = input.take(len)?.to_vec();
            if column.kind == Kind::Text {
                Value::Text(
                    String::from_utf8(bytes)
                        .map_err(|_| "a UTF-8 column holds bytes that are not UTF-8".to_string())?,
                )
            } else {
                Value::Bytes(bytes)
            }
        }
    })
}

/// DATETIME(dec): 5 bytes big-endian `(year * 13 + month) << 22 | day << 17 | hour << 12 |
/// minute << 6 | second`, offset by 2^39, then the fraction.
fn datetime2(input: &mut Input<'_>, dec: u8) -> Result<String, String> {
    let packed = input.be(5)?.wrapping_sub(0x80_0000_0000);
    let ymd = packed >> 17;
    let (ym, day) = (ymd >> 5, ymd & 31);
    let hms = packed & 0x1_ffff;
    let micros = fraction_micros(input, dec)?;
    let mut s = format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        ym / 13,
        ym % 13,
        day,
        hms >> 12,
        (hms >> 6) & 63,
        hms & 63
    );
    push_fraction(&mut s, micros, dec);
    Ok(s)
}

/// TIMESTAMP(dec): 4 bytes big-endian Unix seconds, then the fraction; shown in UTC. 0 is the
/// zero timestamp.
fn timestamp2(input: &mut Input<'_>, dec: u8) -> Result<String, String> {
    let seconds = input.be(4)?;
    let micros = fraction_micros(input, dec)?;
    let mut s = if seconds == 0 {
        "0000-00-00 00:00:00".to_string()
    } else {
        let t = DateTime::from_timestamp(seconds as i64, 0)
            .ok_or_else(|| format!("timestamp {seconds} out of range"))?;
        t.format("%Y-%m-%d %H:%M:%S").to_string()
    };
    push_fraction(&mut s, micros, dec);
    Ok(s)
}

/// The unsigned fraction after DATETIME and TIMESTAMP: (dec + 1) / 2 bytes big-endian, in
/// units of 10^-(2 * bytes) seconds.
fn fraction_micros(input: &mut Input<'_>, dec: u8) -> Result<u64, String> {
    Ok(match dec {
        0 => 0,
        1 | 2 => input.be(1)? * 10_000,
        3 | 4 => input.be(2)? * 100,
        _ => input.be(3)?,
    })
}

/// TIME(dec): a signed packed value `hours << 12 | minutes << 6 | seconds` (24 bits, then 24 of
/// microseconds), stored big-endian with an offset so it sorts as unsigned. With 1 to 4
/// fractional digits a negative value borrows from the integer part (my_time.cc).
fn time2(input: &mut Input<'_>, dec: u8) -> Result<String, String> {
    const INT_OFS: i64 = 0x80_0000;
    let packed: i64 = match dec {
        0 => (input.be(3)? as i64 - INT_OFS) << 24,
        1..=4 => {
            let (frac_bytes, unit, wrap) = if dec <= 2 {
                (1, 10_000, 0x100)
            } else {
                (2, 100, 0x1_0000)
            };
            let mut int = input.be(3)? as i64 - INT_OFS;
            let mut frac = input.be(frac_bytes)? as i64;
            if int < 0 && frac > 0 {
                int += 1;
                frac -= wrap;
            }
            (int << 24) + frac * unit
        }
        _ => input.be(6)? as i64 - 0x8000_0000_0000,
    };
    let negative = packed < 0;
    let abs = packed.unsigned_abs();
    let hms = abs >> 24;
    let micros = abs & 0xff_ffff;
    let mut s = format!(
        "{}{:02}:{:02}:{:02}",
        if negative { "-" } else { "" },
        (hms >> 12) & 0x3ff,
        (hms >> 6) & 63,
        hms & 63
    );
    push_fraction(&mut s, micros, dec);
    Ok(s)
}

/// `.` and the first `dec` digits of the microseconds.
fn push_fraction(s: &mut String, micros: u64, dec: u8) {
    if dec > 0 {
        let digits = micros / 10u64.pow(6 - u32::from(dec));
        let _ = write!(s, ".{digits:0width$}", width = usize::from(dec));
    }
}

/// DECIMAL(precision, scale) in MySQL's binary form (strings/decimal.cc `bin2decimal`): the
/// integer and fraction parts in groups of 9 digits, 4 bytes each, big-endian, a shorter group
/// for leftover digits (leading for the integer part, trailing for the fraction); the first
/// bit is flipped, and a negative value has every bit inverted.
fn decimal(input: &mut Input<'_>, precision: u8, scale: u8) -> Result<String, String> {
    const DIG_PER_DEC: usize = 9;
    const DIG_TO_BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
    let (precision, scale) = (usize::from(precision), usize::from(scale));
    let intg = precision
        .checked_sub(scale)
        .ok_or_else(|| format!("DECIMAL({precision},{scale})"))?;
    let (intg_full, intg_rest) = (intg / DIG_PER_DEC, intg % DIG_PER_DEC);
    let (frac_full, frac_rest) = (scale / DIG_PER_DEC, scale % DIG_PER_DEC);
    let size = intg_full * 4 + DIG_TO_BYTES[intg_rest] + frac_full * 4 + DIG_TO_BYTES[frac_rest];
    let mut bytes = input.take(size)?.to_vec();
    let Some(first) = bytes.first_mut() else {
        return Ok("0".into());
    };
    *first ^= 0x80;
    let negative = *first & 0x80 != 0;
    if negative {
        bytes.iter_mut().for_each(|b| *b = !*b);
    }
    let mut groups = Input(&bytes);
    let mut group = |len: usize| -> Result<u64, String> { groups.be(len as u8) };
    let mut int_digits = String::new();
    if intg_rest > 0 {
        let _ = write!(int_digits, "{}", group(DIG_TO_BYTES[intg_rest])?);
    }
    for _ in 0..intg_full {
        let _ = write!(int_digits, "{:09}", group(4)?);
    }
    let int_digits = int_digits.trim_start_matches('0');
    let mut s = String::new();
    if negative {
        s.push('-');
    }
    s.push_str(if int_digits.is_empty() {
        "0"
    } else {
        int_digits
    });
    if scale > 0 {
        s.push('.');
        for _ in 0..frac_full {
            let _ = write!(s, "{:09}", group(4)?);
        }
        if frac_rest > 0 {
            let _ = write!(
                s,
                "{:0width$}",
                group(DIG_TO_BYTES[frac_rest])?,
                width = frac_rest
            );
        }
    }
    Ok(s)
}

/// The unread rest of a rows event.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes needed, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn le(&mut self, n: u8) -> Result<u64, String> {
        Ok(self
            .take(usize::from(n))?
            .iter()
            .rev()
            .fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
    }

    fn be(&mut self, n: u8) -> Result<u64, String> {
        Ok(self
            .take(usize::from(n))?
            .iter()
            .fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(kind: Kind, codec: Codec) -> Column {
        Column {
            name: "c".into(),
            kind,
            codec,
        }
    }

    fn one(kind: Kind, codec: Codec, bytes: &[u8]) -> Result<Value, String> {
        let mut input = Input(bytes);
        let value = decode_value(&column(kind, codec), &mut input)?;
        assert!(input.0.is_empty(), "{} bytes left", input.0.len());
        Ok(value)
    }

    fn text(codec: Codec, bytes: &[u8]) -> String {
        match one(Kind::Text, codec, bytes).unwrap() {
            Value::Text(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn integers_keep_sign_and_width() {
        let int = |bytes, unsigned| Codec::Int { bytes, unsigned };
        assert_eq!(
            one(Kind::Uint, int(8, true), &[0xff; 8]).unwrap(),
            Value::Uint(u64::MAX)
        );
        assert_eq!(
            one(Kind::Int, int(8, false), &[0xff; 8]).unwrap(),
            Value::Int(-1)
        );
        assert_eq!(
            one(Kind::Int, int(3, false), &[0, 0, 0x80]).unwrap(),
            Value::Int(-8_388_608)
        );
        assert_eq!(
            one(Kind::Uint, int(3, true), &[0, 0, 0x80]).unwrap(),
            Value::Uint(8_388_608)
        );
        assert_eq!(
            one(Kind::Int, int(1, false), &[0x80]).unwrap(),
            Value::Int(-128)
        );
        assert_eq!(
            one(Kind::Uint, Codec::Bit { bytes: 2 }, &[0x02, 0x0a]).unwrap(),
            Value::Uint(522)
        );
        assert_eq!(one(Kind::Year, Codec::Year, &[0]).unwrap(), Value::Uint(0));
        assert_eq!(
            one(Kind::Year, Codec::Year, &[124]).unwrap(),
            Value::Uint(2024)
        );
    }

    #[test]
    fn floats_read_back_as_their_shortest_decimal() {
        assert_eq!(
            one(Kind::Float, Codec::Float, &0.1f32.to_le_bytes()).unwrap(),
            Value::Float(0.1)
        );
        assert_eq!(
            one(Kind::Double, Codec::Double, &(-1e300f64).to_le_bytes()).unwrap(),
            Value::Float(-1e300)
        );
    }

    #[test]
    fn decimals_from_the_mysql_manual() {
        // DECIMAL(14,4) 1234567890.1234 and its negative, as given in the MySQL manual.
        let d = Codec::Decimal {
            precision: 14,
            scale: 4,
        };
        assert_eq!(
            text(d, &[0x81, 0x0d, 0xfb, 0x38, 0xd2, 0x04, 0xd2]),
            "1234567890.1234"
        );
        assert_eq!(
            text(d, &[0x7e, 0xf2, 0x04, 0xc7, 0x2d, 0xfb, 0x2d]),
            "-1234567890.1234"
        );
        // DECIMAL(20,4) -12.3400 and 0.0000.
        let d = Codec::Decimal {
            precision: 20,
            scale: 4,
        };
        let negative = [0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf3, 0xf2, 0xb7];
        assert_eq!(text(d, &negative), "-12.3400");
        assert_eq!(
            text(d, &[0x80, 0, 0, 0, 0, 0, 0, 12, 0x0d, 0x48]),
            "12.3400"
        );
        assert_eq!(text(d, &[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0]), "0.0000");
        // DECIMAL(3,0).
        assert_eq!(
            text(
                Codec::Decimal {
                    precision: 3,
                    scale: 0
                },
                &[0x80, 0x7b]
            ),
            "123"
        );
        assert!(
            one(
                Kind::Decimal,
                Codec::Decimal {
                    precision: 14,
                    scale: 4
                },
                &[0x81]
            )
            .is_err()
        );
    }

    #[test]
    fn temporal_values_keep_their_fractions() {
        // 2024-01-02 03:04:05.123456 as DATETIME(6).
        let ym = 2024 * 13 + 1;
        let packed: u64 = ((ym << 5 | 2) << 17 | (3 << 12 | 4 << 6 | 5)) + 0x80_0000_0000;
        let mut bytes = packed.to_be_bytes()[3..].to_vec();
        bytes.extend_from_slice(&123_456u32.to_be_bytes()[1..]);
        assert_eq!(
            text(Codec::Datetime2 { dec: 6 }, &bytes),
            "2024-01-02 03:04:05.123456"
        );
        // The same second as DATETIME(3) with .5.
        let mut bytes = packed.to_be_bytes()[3..].to_vec();
        bytes.extend_from_slice(&5000u16.to_be_bytes());
        assert_eq!(
            text(Codec::Datetime2 { dec: 3 }, &bytes),
            "2024-01-02 03:04:05.500"
        );
        // TIMESTAMP(3) 2024-01-02 03:04:05.5 UTC, and the zero timestamp.
        let mut bytes = 1_704_164_645u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&5000u16.to_be_bytes());
        assert_eq!(
            text(Codec::Timestamp2 { dec: 3 }, &bytes),
            "2024-01-02 03:04:05.500"
        );
        assert_eq!(
            text(Codec::Timestamp2 { dec: 0 }, &[0; 4]),
            "0000-00-00 00:00:00"
        );
        // DATE 2024-02-29.
        let v: u32 = 29 | 2 << 5 | 2024 << 9;
        assert_eq!(text(Codec::Date, &v.to_le_bytes()[..3]), "2024-02-29");
    }

    #[test]
    fn negative_times_borrow_from_the_integer_part() {
        let time = |hours: i64, minutes: i64, seconds: i64, micros: i64, dec: u8| -> Vec<u8> {
            // my_time.cc: the packed value, then its binary form.
            let sign = if hours < 0 { -1 } else { 1 };
            let hms = (hours.abs() << 12 | minutes << 6 | seconds) << 24;
            let packed = sign * (hms + micros);
            match dec {
                0 => ((packed >> 24) + 0x80_0000).to_be_bytes()[5..].to_vec(),
                1..=4 => {
                    let (unit, frac_bytes, wrap) = if dec <= 2 {
                        (10_000, 1, 0x100)
                    } else {
                        (100, 2, 0x1_0000)
                    };
                    // C's shift floors and its remainder truncates: a negative fraction is
                    // stored as its two's complement byte(s) under a floored integer part.
                    let int = packed >> 24;
                    let mut frac = (packed % (1 << 24)) / unit;
                    if frac < 0 {
                        frac += wrap;
                    }
                    let mut out = (int + 0x80_0000).to_be_bytes()[5..].to_vec();
                    out.extend_from_slice(&frac.to_be_bytes()[8 - frac_bytes..]);
                    out
                }
                _ => (packed + 0x8000_0000_0000).to_be_bytes()[2..].to_vec(),
            }
        };
        assert_eq!(
            text(Codec::Time2 { dec: 2 }, &time(-12, 0, 1, 500_000, 2)),
            "-12:00:01.50"
        );
        assert_eq!(
            text(Codec::Time2 { dec: 2 }, &time(12, 0, 1, 500_000, 2)),
            "12:00:01.50"
        );
        assert_eq!(
            text(Codec::Time2 { dec: 4 }, &time(-838, 59, 58, 999_900, 4)),
            "-838:59:58.9999"
        );
        assert_eq!(
            text(Codec::Time2 { dec: 6 }, &time(-1, 2, 3, 4, 6)),
            "-01:02:03.000004"
        );
        assert_eq!(
            text(Codec::Time2 { dec: 0 }, &time(-100, 0, 0, 0, 0)),
            "-100:00:00"
        );
    }

    #[test]
    fn strings_and_images() {
        let table = TableSchema {
            schema: "app".into(),
            table: "t".into(),
            columns: vec![
                column(
                    Kind::Uint,
                    Codec::Int {
                        bytes: 8,
                        unsigned: true,
                    },
                ),
                column(Kind::Text, Codec::Bytes { len_bytes: 1 }),
                column(Kind::Binary, Codec::Bytes { len_bytes: 2 }),
            ],
            key: vec![0],
            kinds: Default::default(),
            contract: Default::default(),
        };
        let full = [true, true, true];
        // Two rows: (7, "😀", NULL) and (8, NULL, 0x00ff).
        let mut data = vec![0b100];
        data.extend_from_slice(&7u64.to_le_bytes());
        data.push(4);
        data.extend_from_slice("😀".as_bytes());
        data.push(0b010);
        data.extend_from_slice(&8u64.to_le_bytes());
        data.extend_from_slice(&[2, 0, 0x00, 0xff]);
        let images = decode_images(&table, &[&full], &data).unwrap();
        assert_eq!(
            images,
            [
                vec![Some(Value::Uint(7)), Some(Value::Text("😀".into())), None],
                vec![
                    Some(Value::Uint(8)),
                    None,
                    Some(Value::Bytes(vec![0, 0xff]))
                ],
            ]
        );
        // A truncated event, a partial image and invalid UTF-8 are errors, not panics.
        assert!(decode_images(&table, &[&full], &data[..data.len() - 1]).is_err());
        assert!(decode_images(&table, &[&[true, false, true]], &data).is_err());
        let nulls = [0b110, 7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            decode_images(&table, &[&full], &nulls).unwrap(),
            [vec![Some(Value::Uint(7)), None, None]]
        );
        let bad_utf8 = [0b100, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0xff];
        assert!(decode_images(&table, &[&full], &bad_utf8).is_err());
    }
}
