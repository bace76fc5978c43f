//! docs/grafana.md's panel SQL, run on MariaDB with Grafana's macros replaced by a range's
//! values: only the range's partitions are read (`EXPLAIN PARTITIONS`), and the answers are
//! the plain counts of the range.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use support::explorer::{lines_between, loaded};

/// The page's ```sql blocks.
fn panels() -> Vec<String> {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana.md")).unwrap();
    let mut panels = Vec::new();
    let mut rest = page.as_str();
    while let Some(at) = rest.find("```sql\n") {
        let block = &rest[at + 7..];
        let end = block.find("```").unwrap();
        panels.push(block[..end].to_string());
        rest = &block[end..];
    }
    panels
}

/// What Grafana sends for a range from `from` to `to` (Unix seconds, `to` included) at an
/// interval of `interval_ms`.
fn substitute(sql: &str, from: u64, to: u64, interval_ms: u64) -> String {
    sql.replace("$__unixEpochFrom()", &from.to_string())
        .replace("$__unixEpochTo()", &to.to_string())
        .replace("$__interval_ms", &interval_ms.to_string())
}

#[tokio::test]
async fn panel_sql_reads_only_the_ranges_partitions_and_counts_its_lines() {
    let loaded = loaded("grafana").await;
    let panels = panels();
    assert_eq!(panels.len(), 3, "docs/grafana.md's SQL blocks");
    let mut conn = loaded.db.conn().await;
    // Whole minutes inside the loaded lines, as a dashboard's range would be; `to` included.
    let (from, to) = (loaded.start + 600, loaded.start + 3_600 - 1);
    let expected = lines_between(&loaded.db, from, to + 1).await;
    let mut per_minute: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for (id, level) in &expected {
        *per_minute
            .entry(((id >> 32) / 60 * 60, level.clone()))
            .or_default() += 1;
    }

    // The partitions whose ID bounds meet the range, from the catalog.
    let bounds: Vec<(String, Option<u64>)> = conn
        .exec(
            "SELECT PARTITION_NAME, IF(PARTITION_DESCRIPTION = 'MAXVALUE', NULL, \
             CAST(PARTITION_DESCRIPTION AS UNSIGNED)) FROM information_schema.PARTITIONS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'logs' \
             ORDER BY PARTITION_ORDINAL_POSITION",
            (),
        )
        .await
        .unwrap();
    let (low, high) = (from << 32, (to + 1) << 32);
    let mut previous = 0u64;
    let mut meeting = BTreeSet::new();
    for (name, bound) in &bounds {
        let end = bound.unwrap_or(u64::MAX);
        if previous < high && low < end {
            meeting.insert(name.clone());
        }
        previous = end;
    }
    assert!(meeting.len() < bounds.len(), "{bounds:?}");

    for (i, panel) in panels.iter().enumerate() {
        let sql = substitute(panel, from, to, 60_000);
        let explained: Vec<Row> = conn
            .query(format!("EXPLAIN PARTITIONS {sql}"))
            .await
            .unwrap();
        let column = explained[0]
            .columns_ref()
            .iter()
            .position(|c| c.name_str() == "partitions")
            .unwrap();
        let read: BTreeSet<String> = explained
            .iter()
            .filter_map(|row| row.get::<Option<String>, _>(column).flatten())
            .flat_map(|listed| {
                listed
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        if sql.contains("FROM logs") {
            assert_eq!(read, meeting, "panel {i} reads other partitions:\n{sql}");
        }
        let rows: Vec<Row> = conn.query(&sql).await.unwrap();
        match i {
            // The histograms, from the table and from the rollup: SQL's counts per minute.
            0 | 1 => {
                let got: BTreeMap<(u64, String), u64> = rows
                    .into_iter()
                    .map(|row| {
                        let (time, level, n): (u64, String, u64) = mysql_async::from_row(row);
                        ((time, level), n)
                    })
                    .collect();
                assert_eq!(got, per_minute, "panel {i}");
            }
            // The lines: the newest thousand of the range, the ID exact as text.
            _ => {
                let ids: Vec<u64> = rows
                    .into_iter()
                    .map(|row| row.get::<String, _>(1).unwrap().parse().unwrap())
                    .collect();
                let mut want: Vec<u64> = expected.iter().map(|(id, _)| *id).collect();
                want.reverse();
                want.truncate(1_000);
                assert_eq!(ids, want);
            }
        }
    }
    conn.disconnect().await.unwrap();
}
