//! Histograms answered from the line counts every table keeps (see
//! `crate::store::line_count_plan`): by ID time or by event time, whole minutes from the
//! counts and only the partial minutes at either end from the table, so every count is exact
//! and a day costs a read of its count rows, not of its lines.

use mysql_async::Conn;

use super::db_error;
use super::request::{ApiError, Params, parts};
use crate::id::Layout;
use crate::mysql::Ident;
use crate::store::event_histogram;
use crate::store::filter_language::{Condition, Literal, Op};
use crate::store::line_count_plan::{MINUTE, level_index};
use crate::store::line_counts::{self, Time};
use crate::store::log_table::TableSpec;
use crate::store::query::{self, Count, TimeQuery};
use crate::time::format_utc;

/// The request's `time`: `id` (the default) or `event`, which the table must have.
pub fn time_of(params: &Params, spec: &TableSpec) -> Result<Time, ApiError> {
    match params.get("time") {
        None | Some("id") => Ok(Time::Id),
        Some("event") => {
            query::event_column(spec).map_err(|e| ApiError::bad("time", e))?;
            Ok(Time::Event)
        }
        Some(other) => Err(ApiError::bad(
            "time",
            format!("{other:?}: use id (the stamp's time) or event"),
        )),
    }
}

/// The levels a histogram by `by` filtered by `filter` counts, when the line counts hold its
/// answer: `by` is the table's counted level column and the filter is at most one `level =
/// 'text'` (not empty text, which the table holds as NULL and no `=` matches). Empty: every
/// level.
pub fn levels_counted(spec: &TableSpec, by: &Ident, filter: &[Condition]) -> Option<Vec<String>> {
    let level = spec.columns.get(level_index(&spec.columns)?)?;
    if !level.name.eq_ignore_ascii_case(by.as_str()) {
        return None;
    }
    match filter {
        [] => Some(Vec::new()),
        [c] if c.op == Op::Eq && c.column == *by => match &c.value {
            Literal::Text(text) if !text.is_empty() => Some(vec![text.clone()]),
            _ => None,
        },
        _ => None,
    }
}

/// The histogram's counts and where each part came from; `None` for a histogram by ID time
/// that the counts cannot answer (the caller then tries rollups and the table). By event time
/// it always answers: from the counts where they can, the rest from the rows the zone map
/// points at.
pub async fn histogram(
    conn: &mut Conn,
    (spec, layout): (&TableSpec, &Layout),
    time: Time,
    (by, filter): (&Ident, &[Condition]),
    interval: u64,
    range: (u64, u64),
) -> Result<Option<(Vec<Count>, Vec<String>)>, ApiError> {
    let levels = levels_counted(spec, by, filter);
    if time == Time::Id && (levels.is_none() || !interval.is_multiple_of(MINUTE)) {
        return Ok(None);
    }
    let candidates: &[(usize, u64)] = if levels.is_some() {
        &[(0, MINUTE)]
    } else {
        &[]
    };
    let table = spec.table.as_str();
    let mut counts = Vec::new();
    let mut sources = Vec::new();
    for part in parts(range.0, range.1, interval, candidates) {
        let span = (part.from, part.to);
        let what = |source: &str| {
            format!(
                "{source} {} to {}",
                format_utc(part.from),
                format_utc(part.to)
            )
        };
        let counted = match (part.rollup, time, &levels) {
            (Some(_), _, Some(levels)) => {
                sources.push(what(&format!("line counts of {table}")));
                line_counts::histogram(conn, &spec.table, time, levels, interval, span).await
            }
            (_, Time::Event, _) => {
                sources.push(what(&format!("table {table} by event time")));
                event_histogram::histogram(conn, spec, (by, filter), interval, span).await
            }
            (_, Time::Id, _) => {
                sources.push(what(&format!("table {table}")));
                let seconds = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
                let query = TimeQuery {
                    range: layout
                        .id_range(seconds(part.from), seconds(part.to))
                        .map_err(|e| ApiError::bad("from", e))?,
                    filter: filter.to_vec(),
                    limit: None,
                };
                query::histogram(conn, spec, &query, by, interval).await
            }
        };
        counts.extend(counted.map_err(db_error)?);
    }
    Ok(Some((counts, sources)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{ColumnSpec, ColumnType};

    fn spec(level_length: u32) -> TableSpec {
        let column = |name: &str, length| ColumnSpec {
            name: name.into(),
            pointer: format!("/{name}"),
            column_type: ColumnType::String,
            length: Some(length),
            truncate: false,
        };
        let sources = crate::config::Sources {
            env: Some(Default::default()),
            ..Default::default()
        };
        let mut spec = crate::config::Settings::load(&sources).unwrap().log_table();
        spec.columns = vec![column("service", 32), column("level", level_length)];
        spec
    }

    fn eq(column: &str, text: &str) -> Condition {
        Condition {
            column: Ident::new(column).unwrap(),
            op: Op::Eq,
            value: Literal::Text(text.into()),
        }
    }

    #[test]
    fn the_counts_answer_by_level_unfiltered_or_for_one_level() {
        let level = Ident::new("level").unwrap();
        let service = Ident::new("service").unwrap();
        let s = spec(16);
        assert_eq!(levels_counted(&s, &level, &[]), Some(vec![]));
        assert_eq!(
            levels_counted(&s, &level, &[eq("level", "error")]),
            Some(vec!["error".to_string()])
        );
        assert_eq!(levels_counted(&s, &level, &[eq("level", "")]), None);
        assert_eq!(levels_counted(&s, &level, &[eq("service", "a")]), None);
        assert_eq!(
            levels_counted(&s, &level, &[eq("level", "a"), eq("level", "b")]),
            None
        );
        assert_eq!(levels_counted(&s, &service, &[]), None);
        assert_eq!(levels_counted(&spec(1_000), &level, &[]), None);
    }
}
