//! The SQL an applier runs for a change, and the kinds of a local table's columns to compare
//! with a message's. Pure, so every statement is tested without a server.
//!
//! Statements are text with literals, so a whole transaction goes to the server in a few
//! round trips. Literals assume the applier's session: `sql_mode` without
//! `NO_BACKSLASH_ESCAPES`, utf8mb4, `time_zone='+00:00'` (TIMESTAMP values travel in UTC).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::change::{ChangeKind, Kind, Row, RowChange, Value};
use super::contract::LocalColumn;
use crate::mysql::encode::push_sql_string;

/// A name quoted with backticks (doubled inside), for any name the server allows.
pub fn push_ident(out: &mut String, name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('\0') {
        return Err(format!("{name:?} is not a usable SQL name"));
    }
    out.push('`');
    out.push_str(&name.replace('`', "``"));
    out.push('`');
    Ok(())
}

/// A value as a literal that reads back exactly into a column of its kind.
pub fn push_literal(out: &mut String, value: Option<&Value>) {
    match value {
        None => out.push_str("NULL"),
        // Writing to a String cannot fail.
        Some(Value::Int(n)) => {
            let _ = write!(out, "{n}");
        }
        Some(Value::Uint(n)) => {
            let _ = write!(out, "{n}");
        }
        // Exponent form: an approximate-value literal with the shortest digits that read back
        // as the same double (and, for FLOAT columns, the same float).
        Some(Value::Float(f)) => {
            let _ = write!(out, "{f:e}");
        }
        Some(Value::Text(s)) => push_sql_string(out, s),
        Some(Value::Bytes(b)) => {
            out.push_str("X'");
            for byte in b {
                let _ = write!(out, "{byte:02X}");
            }
            out.push('\'');
        }
    }
}

/// A statement and whether it must find its change's row: an UPDATE or DELETE changes exactly
/// the row of its before image, or the row here differs from the source's (a conflict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub finds_row: bool,
}

/// The statement that applies `change`: an upsert for an insert (a replay after a crash finds
/// the row already there), and an update or delete of the row that matches the before image
/// exactly (see [`push_matches`]). `None` for an update that changes nothing.
pub fn statement(change: &RowChange) -> Result<Option<Statement>, String> {
    let mut sql = String::with_capacity(128);
    match change.kind {
        ChangeKind::Insert => {
            return Ok(Some(Statement {
                sql: upsert(&[change], 0)?.0,
                finds_row: false,
            }));
        }
        ChangeKind::Update => {
            if change.values.is_empty() {
                return Ok(None);
            }
            sql.push_str("UPDATE ");
            push_table(&mut sql, change)?;
            sql.push_str(" SET ");
            push_assignments(&mut sql, &change.values, ", ")?;
        }
        ChangeKind::Delete => {
            sql.push_str("DELETE FROM ");
            push_table(&mut sql, change)?;
        }
    }
    push_where(&mut sql, &change.key)?;
    push_matches(&mut sql, change)?;
    Ok(Some(Statement {
        sql,
        finds_row: true,
    }))
}

/// The statements for a transaction's changes, in order. Consecutive inserts into the same
/// table with the same columns become multi-row upserts (the effect is the same, in fewer
/// statements) of at most `max_bytes` each; a single row's statement may be longer.
pub fn statements(changes: &[&RowChange], max_bytes: usize) -> Result<Vec<Statement>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < changes.len() {
        let first = changes[i];
        if first.kind == ChangeKind::Insert {
            let mut end = i + 1;
            while end < changes.len() && same_insert(first, changes[end]) {
                end += 1;
            }
            let (sql, rows) = upsert(&changes[i..end], max_bytes)?;
            out.push(Statement {
                sql,
                finds_row: false,
            });
            i += rows;
        } else {
            if let Some(statement) = statement(first)? {
                out.push(statement);
            }
            i += 1;
        }
    }
    Ok(out)
}

/// What makes `change` win over a row here that differs from its before image: the row at its
/// key goes, and an update's after image takes its place. Changes without a before image, so
/// their statements ([`statement`]) go by key alone.
pub fn forced(change: &RowChange) -> Vec<RowChange> {
    let delete = RowChange {
        kind: ChangeKind::Delete,
        values: Row::new(),
        before: None,
        ..change.clone()
    };
    if change.kind != ChangeKind::Update {
        return vec![delete];
    }
    let mut after = change.before.clone().unwrap_or_default();
    after.extend(change.values.clone());
    let key = change
        .key
        .keys()
        .map(|name| (name.clone(), after.get(name).cloned().flatten()))
        .collect();
    let insert = RowChange {
        kind: ChangeKind::Insert,
        key,
        values: after,
        before: None,
        ..change.clone()
    };
    vec![delete, insert]
}

/// The row at `change`'s key as one JSON object written the way messages write values (ENUM,
/// SET and BIT as numbers, binary strings in base64), for the conflict record.
pub fn found_row(change: &RowChange) -> Result<String, String> {
    let mut sql = String::from("SELECT JSON_OBJECT(");
    for (i, (name, kind)) in change.columns.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        push_sql_string(&mut sql, name);
        sql.push_str(", ");
        let (open, close) = match kind {
            Kind::Enum | Kind::Set | Kind::Bit => ("", " + 0"),
            Kind::Binary => ("TO_BASE64(", ")"),
            _ => ("", ""),
        };
        sql.push_str(open);
        push_ident(&mut sql, name)?;
        sql.push_str(close);
    }
    sql.push_str(") FROM ");
    push_table(&mut sql, change)?;
    push_where(&mut sql, &change.key)?;
    Ok(sql)
}

fn same_insert(a: &RowChange, b: &RowChange) -> bool {
    b.kind == ChangeKind::Insert
        && a.schema == b.schema
        && a.table == b.table
        && a.values.keys().eq(b.values.keys())
}

/// `INSERT ... VALUES (..), (..) ON DUPLICATE KEY UPDATE` for inserts with the same columns,
/// as many of them as fit in `max_bytes` (at least one); returns how many it took.
fn upsert(inserts: &[&RowChange], max_bytes: usize) -> Result<(String, usize), String> {
    let first = inserts[0];
    let mut sql = String::with_capacity(256);
    sql.push_str("INSERT INTO ");
    push_table(&mut sql, first)?;
    sql.push_str(" (");
    for (i, name) in first.values.keys().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        push_ident(&mut sql, name)?;
    }
    sql.push_str(") VALUES ");
    let mut tail = String::new();
    push_on_duplicate(&mut tail, first)?;
    let mut row = String::new();
    let mut taken = 0;
    for change in inserts {
        row.clear();
        if taken > 0 {
            row.push_str(", ");
        }
        row.push('(');
        for (i, value) in change.values.values().enumerate() {
            if i > 0 {
                row.push_str(", ");
            }
            push_literal(&mut row, value.as_ref());
        }
        row.push(')');
        if taken > 0 && sql.len() + row.len() + tail.len() > max_bytes {
            break;
        }
        sql.push_str(&row);
        taken += 1;
    }
    sql.push_str(&tail);
    Ok((sql, taken))
}

/// ` ON DUPLICATE KEY UPDATE` every non-key column from the new row (a replayed insert finds
/// its row there).
fn push_on_duplicate(sql: &mut String, change: &RowChange) -> Result<(), String> {
    sql.push_str(" ON DUPLICATE KEY UPDATE ");
    let mut others = change
        .values
        .keys()
        .filter(|name| !change.key.contains_key(*name))
        .peekable();
    if others.peek().is_none() {
        // Only key columns: nothing to update, but the statement needs an assignment.
        let Some(first) = change.key.keys().next() else {
            return Err("no primary key".into());
        };
        push_ident(sql, first)?;
        sql.push_str(" = ");
        return push_ident(sql, first);
    }
    for (i, name) in others.enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        push_ident(sql, name)?;
        sql.push_str(" = VALUES(");
        push_ident(sql, name)?;
        sql.push(')');
    }
    Ok(())
}

fn push_table(sql: &mut String, change: &RowChange) -> Result<(), String> {
    push_ident(sql, &change.schema)?;
    sql.push('.');
    push_ident(sql, &change.table)
}

fn push_assignments(sql: &mut String, row: &Row, separator: &str) -> Result<(), String> {
    for (i, (name, value)) in row.iter().enumerate() {
        if i > 0 {
            sql.push_str(separator);
        }
        push_ident(sql, name)?;
        sql.push_str(" = ");
        push_literal(sql, value.as_ref());
    }
    Ok(())
}

fn push_where(sql: &mut String, key: &Row) -> Result<(), String> {
    if key.is_empty() || key.values().any(Option::is_none) {
        return Err("the primary key is missing or NULL".into());
    }
    sql.push_str(" WHERE ");
    push_assignments(sql, key, " AND ")
}

/// ` AND` every column of the before image equals its value exactly: strings byte for byte
/// (not by collation, which may take `a` for `A`), DECIMAL as an exact literal (a quoted one
/// would be compared as a double), FLOAT at float precision.
fn push_matches(sql: &mut String, change: &RowChange) -> Result<(), String> {
    let Some(before) = &change.before else {
        return Ok(());
    };
    for (name, value) in before {
        sql.push_str(" AND ");
        let Some(value) = value else {
            push_ident(sql, name)?;
            sql.push_str(" IS NULL");
            continue;
        };
        match (change.columns.get(name), value) {
            (Some(Kind::Text), _) => {
                sql.push_str("CAST(");
                push_ident(sql, name)?;
                sql.push_str(" AS BINARY) = CAST(");
                push_literal(sql, Some(value));
                sql.push_str(" AS BINARY)");
            }
            (Some(Kind::Float), _) => {
                push_ident(sql, name)?;
                sql.push_str(" = CAST(");
                push_literal(sql, Some(value));
                sql.push_str(" AS FLOAT)");
            }
            (Some(Kind::Binary), _) if let Some(length) = padded_binary(change, name) => {
                // The binlog leaves out BINARY(n)'s trailing zero bytes; the column has them.
                push_ident(sql, name)?;
                sql.push_str(" = CAST(");
                push_literal(sql, Some(value));
                let _ = write!(sql, " AS BINARY({length}))");
            }
            (Some(Kind::Decimal), Value::Text(digits)) => {
                if digits.is_empty()
                    || !digits
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b'-' || b == b'.')
                {
                    return Err(format!("column {name}: {digits:?} is not a decimal"));
                }
                push_ident(sql, name)?;
                sql.push_str(" = ");
                sql.push_str(digits);
            }
            _ => {
                push_ident(sql, name)?;
                sql.push_str(" = ");
                push_literal(sql, Some(value));
            }
        }
    }
    Ok(())
}

/// The length of `name` when the source's contract says it is a BINARY(n) column.
fn padded_binary(change: &RowChange, name: &str) -> Option<u32> {
    super::contract::binary_length(change.contract.as_ref()?.types.get(name)?)
}

/// The kind capture would give a column of this type (see [`super::table`]), `None` for a
/// type the relay does not carry.
pub fn local_kind(column: &LocalColumn) -> Option<Kind> {
    let utf8 = column.charset.as_deref().is_some_and(|c| {
        super::table::Charsets::UTF8_NAMES
            .iter()
            .any(|n| n.eq_ignore_ascii_case(c))
    });
    let unsigned = column.column_type.to_ascii_lowercase().contains("unsigned");
    Some(match column.data_type.to_ascii_lowercase().as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" if unsigned => Kind::Uint,
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => Kind::Int,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "decimal" => Kind::Decimal,
        "date" => Kind::Date,
        "datetime" => Kind::Datetime,
        "timestamp" => Kind::Timestamp,
        "time" => Kind::Time,
        "year" => Kind::Year,
        "bit" => Kind::Bit,
        "enum" => Kind::Enum,
        "set" => Kind::Set,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if utf8 => Kind::Text,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "binary"
        | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "geometry" | "point"
        | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
        | "geometrycollection" => Kind::Binary,
        _ => return None,
    })
}

/// How the source's columns differ from the local table's, one line per column; empty when
/// they agree.
pub fn column_differences(
    source: &BTreeMap<String, Kind>,
    local: &[LocalColumn],
    source_dc: &str,
) -> Vec<String> {
    let mut differences = Vec::new();
    let local_kinds: BTreeMap<&str, Option<Kind>> = local
        .iter()
        .map(|c| (c.name.as_str(), local_kind(c)))
        .collect();
    for (name, kind) in source {
        match local_kinds.get(name.as_str()) {
            None => differences.push(format!(
                "column {name} ({kind}) is in {source_dc} but not here"
            )),
            Some(Some(local)) if local == kind => {}
            Some(Some(local)) => differences.push(format!(
                "column {name} is {kind} in {source_dc} but {local} here"
            )),
            Some(None) => differences.push(format!(
                "column {name} has a type here the relay does not carry"
            )),
        }
    }
    for name in local_kinds.keys() {
        if !source.contains_key(*name) {
            differences.push(format!("column {name} is here but not in {source_dc}"));
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, Option<Value>)]) -> Row {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    }

    fn change(kind: ChangeKind, values: Row, key: Row) -> RowChange {
        RowChange {
            schema: "app".into(),
            table: "t`x".into(),
            kind,
            columns: BTreeMap::new(),
            key,
            values,
            before: None,
            contract: None,
        }
    }

    #[test]
    fn literals_read_back_exactly() {
        let lit = |v: Option<Value>| {
            let mut s = String::new();
            push_literal(&mut s, v.as_ref());
            s
        };
        assert_eq!(lit(None), "NULL");
        assert_eq!(lit(Some(Value::Uint(u64::MAX))), "18446744073709551615");
        assert_eq!(lit(Some(Value::Int(i64::MIN))), "-9223372036854775808");
        assert_eq!(lit(Some(Value::Float(0.1))), "1e-1");
        assert_eq!(
            lit(Some(Value::Text("it's \\ 😀".into()))),
            r"'it\'s \\ 😀'"
        );
        assert_eq!(lit(Some(Value::Bytes(vec![0, 0xff, b'\'']))), "X'00FF27'");
        assert_eq!(lit(Some(Value::Bytes(vec![]))), "X''");
    }

    #[test]
    fn statements_by_kind() {
        let key = row(&[("id", Some(Value::Uint(7)))]);
        let insert = change(
            ChangeKind::Insert,
            row(&[("id", Some(Value::Uint(7))), ("v", None)]),
            key.clone(),
        );
        assert_eq!(
            statement(&insert).unwrap().unwrap().sql,
            "INSERT INTO `app`.`t``x` (`id`, `v`) VALUES (7, NULL) ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)"
        );
        let only_key = change(ChangeKind::Insert, key.clone(), key.clone());
        assert_eq!(
            statement(&only_key).unwrap().unwrap().sql,
            "INSERT INTO `app`.`t``x` (`id`) VALUES (7) ON DUPLICATE KEY UPDATE `id` = `id`"
        );
        let update = change(
            ChangeKind::Update,
            row(&[
                ("v", Some(Value::Text("x".into()))),
                ("w", Some(Value::Int(-1))),
            ]),
            row(&[
                ("a", Some(Value::Int(1))),
                ("b", Some(Value::Text("k".into()))),
            ]),
        );
        assert_eq!(
            statement(&update).unwrap().unwrap().sql,
            "UPDATE `app`.`t``x` SET `v` = 'x', `w` = -1 WHERE `a` = 1 AND `b` = 'k'"
        );
        assert_eq!(
            statement(&change(ChangeKind::Update, Row::new(), key.clone())).unwrap(),
            None::<Statement>
        );
        assert_eq!(
            statement(&change(ChangeKind::Delete, Row::new(), key))
                .unwrap()
                .unwrap()
                .sql,
            "DELETE FROM `app`.`t``x` WHERE `id` = 7"
        );
        let null_key = row(&[("id", None)]);
        assert!(statement(&change(ChangeKind::Delete, Row::new(), null_key)).is_err());
        assert!(statement(&change(ChangeKind::Delete, Row::new(), Row::new())).is_err());
    }

    #[test]
    fn consecutive_inserts_with_the_same_columns_become_one_statement() {
        let insert = |id: u64, table: &str| RowChange {
            table: table.into(),
            ..change(
                ChangeKind::Insert,
                row(&[("id", Some(Value::Uint(id))), ("v", Some(Value::Int(1)))]),
                row(&[("id", Some(Value::Uint(id)))]),
            )
        };
        let delete = change(
            ChangeKind::Delete,
            Row::new(),
            row(&[("id", Some(Value::Uint(1)))]),
        );
        let (a, b, c, d) = (
            insert(1, "t"),
            insert(2, "t"),
            insert(3, "u"),
            insert(4, "t"),
        );
        let statements = statements(&[&a, &b, &c, &delete, &d], 1 << 20).unwrap();
        let finds: Vec<bool> = statements.iter().map(|s| s.finds_row).collect();
        assert_eq!(finds, [false, false, true, false]);
        let statements: Vec<String> = statements.into_iter().map(|s| s.sql).collect();
        assert_eq!(
            statements,
            [
                "INSERT INTO `app`.`t` (`id`, `v`) VALUES (1, 1), (2, 1) ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)",
                "INSERT INTO `app`.`u` (`id`, `v`) VALUES (3, 1) ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)",
                "DELETE FROM `app`.`t``x` WHERE `id` = 1",
                "INSERT INTO `app`.`t` (`id`, `v`) VALUES (4, 1) ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)",
            ]
        );
    }

    #[test]
    fn a_multi_row_upsert_stops_at_the_size_limit() {
        let inserts: Vec<RowChange> = (0..1000u64)
            .map(|id| {
                change(
                    ChangeKind::Insert,
                    row(&[("id", Some(Value::Uint(id))), ("v", Some(Value::Int(-1)))]),
                    row(&[("id", Some(Value::Uint(id)))]),
                )
            })
            .collect();
        let refs: Vec<&RowChange> = inserts.iter().collect();
        let limit = 1000;
        let statements: Vec<String> = statements(&refs, limit)
            .unwrap()
            .into_iter()
            .map(|s| s.sql)
            .collect();
        assert!(statements.len() > 1, "{statements:?}");
        assert!(
            statements.iter().all(|s| s.len() <= limit),
            "{statements:?}"
        );
        // Every row once, in order.
        let values: String = statements
            .iter()
            .map(|s| {
                let (_, rest) = s.split_once(" VALUES ").unwrap();
                let (values, _) = rest.split_once(" ON DUPLICATE").unwrap();
                values.to_string()
            })
            .collect::<Vec<_>>()
            .join(", ");
        let expected: Vec<String> = (0..1000).map(|id| format!("({id}, -1)")).collect();
        assert_eq!(values, expected.join(", "));
        // A row longer than the limit still gets its statement.
        assert_eq!(statements_of_one(&inserts[0], 10).len(), 1);
    }

    fn statements_of_one(change: &RowChange, limit: usize) -> Vec<Statement> {
        statements(&[change], limit).unwrap()
    }

    /// An update or delete finds its row only where every column equals the before image
    /// exactly; the conflict's resolution replaces the row at the key with the after image.
    #[test]
    fn updates_and_deletes_match_the_whole_before_image() {
        let columns: BTreeMap<String, Kind> = [
            ("id", Kind::Uint),
            ("note", Kind::Text),
            ("price", Kind::Decimal),
            ("ratio", Kind::Float),
            ("raw", Kind::Binary),
            ("state", Kind::Enum),
        ]
        .into_iter()
        .map(|(n, k)| (n.to_string(), k))
        .collect();
        let before = row(&[
            ("id", Some(Value::Uint(7))),
            ("note", Some(Value::Text("A".into()))),
            ("price", Some(Value::Text("-1.50".into()))),
            ("ratio", Some(Value::Float(0.1))),
            ("raw", None),
            ("state", Some(Value::Uint(2))),
        ]);
        let update = RowChange {
            columns,
            before: Some(before),
            ..change(
                ChangeKind::Update,
                row(&[("note", Some(Value::Text("b".into())))]),
                row(&[("id", Some(Value::Uint(7)))]),
            )
        };
        let where_before = " WHERE `id` = 7 AND `id` = 7 AND CAST(`note` AS BINARY) = \
             CAST('A' AS BINARY) AND `price` = -1.50 AND `ratio` = CAST(1e-1 AS FLOAT) AND `raw` \
             IS NULL AND `state` = 2";
        let applied = statement(&update).unwrap().unwrap();
        assert!(applied.finds_row);
        assert_eq!(
            applied.sql,
            format!("UPDATE `app`.`t``x` SET `note` = 'b'{where_before}")
        );
        let delete = RowChange {
            kind: ChangeKind::Delete,
            values: Row::new(),
            ..update.clone()
        };
        assert_eq!(
            statement(&delete).unwrap().unwrap().sql,
            format!("DELETE FROM `app`.`t``x`{where_before}")
        );
        let forced_sql = |change: &RowChange| -> Vec<String> {
            forced(change)
                .iter()
                .map(|c| statement(c).unwrap().unwrap().sql)
                .collect()
        };
        assert_eq!(
            forced_sql(&update),
            [
                "DELETE FROM `app`.`t``x` WHERE `id` = 7",
                "INSERT INTO `app`.`t``x` (`id`, `note`, `price`, `ratio`, `raw`, `state`) VALUES \
                 (7, 'b', '-1.50', 1e-1, NULL, 2) ON DUPLICATE KEY UPDATE `note` = VALUES(`note`), \
                 `price` = VALUES(`price`), `ratio` = VALUES(`ratio`), `raw` = VALUES(`raw`), \
                 `state` = VALUES(`state`)",
            ]
        );
        assert_eq!(
            forced_sql(&delete),
            ["DELETE FROM `app`.`t``x` WHERE `id` = 7"]
        );
        assert_eq!(
            found_row(&update).unwrap(),
            "SELECT JSON_OBJECT('id', `id`, 'note', `note`, 'price', `price`, 'ratio', `ratio`, \
             'raw', TO_BASE64(`raw`), 'state', `state` + 0) FROM `app`.`t``x` WHERE `id` = 7"
        );
        // A decimal is written as an exact literal, so it must be one.
        let mut bad = update.clone();
        if let Some(before) = &mut bad.before {
            before.insert("price".into(), Some(Value::Text("1) OR (1".into())));
        }
        assert!(statement(&bad).is_err());
    }

    fn local(name: &str, data_type: &str, column_type: &str, charset: Option<&str>) -> LocalColumn {
        LocalColumn {
            name: name.into(),
            data_type: data_type.into(),
            column_type: column_type.into(),
            charset: charset.map(str::to_string),
            ..LocalColumn::default()
        }
    }

    #[test]
    fn local_columns_get_the_kinds_capture_gives() {
        assert_eq!(
            local_kind(&local("a", "bigint", "bigint(20) unsigned", None)),
            Some(Kind::Uint)
        );
        assert_eq!(
            local_kind(&local("a", "int", "int(11)", None)),
            Some(Kind::Int)
        );
        assert_eq!(
            local_kind(&local("a", "longtext", "longtext", Some("utf8mb4"))),
            Some(Kind::Text)
        );
        assert_eq!(
            local_kind(&local("a", "varchar", "varchar(9)", Some("latin1"))),
            Some(Kind::Binary)
        );
        assert_eq!(
            local_kind(&local("a", "blob", "blob", None)),
            Some(Kind::Binary)
        );
        assert_eq!(local_kind(&local("a", "inet6", "inet6", None)), None);
    }

    #[test]
    fn differences_name_each_column() {
        let source: BTreeMap<String, Kind> = [
            ("id".to_string(), Kind::Uint),
            ("v".to_string(), Kind::Int),
            ("new".to_string(), Kind::Text),
        ]
        .into();
        let here = [
            local("id", "bigint", "bigint unsigned", None),
            local("v", "bigint", "bigint unsigned", None),
            local("old", "int", "int", None),
        ];
        let differences = column_differences(&source, &here, "dc1");
        assert_eq!(
            differences,
            [
                "column new (text) is in dc1 but not here",
                "column v is int in dc1 but uint here",
                "column old is here but not in dc1",
            ]
        );
        assert!(
            column_differences(
                &source,
                &[
                    local("id", "bigint", "bigint unsigned", None),
                    local("v", "int", "int", None),
                    local("new", "text", "text", Some("utf8mb4")),
                ],
                "dc1"
            )
            .is_empty()
        );
    }
}
