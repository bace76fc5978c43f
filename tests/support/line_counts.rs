//! The line counts checked against plain SQL over a table: `COUNT(*)` grouped by minute of ID
//! time, service ID and level, and by minute of event time and level, each formulated here with
//! date arithmetic rather than the product's statements.

use std::collections::BTreeMap;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

/// Minute text from seconds since 1970, in SQL.
fn minute_text(seconds: &str) -> String {
    format!(
        "DATE_FORMAT(TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ({seconds}) SECOND, '%Y-%m-%d %H:%i')"
    )
}

type Counts = BTreeMap<Vec<String>, u64>;

async fn grouped(conn: &mut Conn, sql: &str) -> Counts {
    let rows: Vec<(String, String, String, u64)> = conn.query(sql).await.unwrap();
    rows.into_iter()
        .map(|(a, b, c, n)| (vec![a, b, c], n))
        .collect()
}

/// Asserts that `table`'s line counts hold exactly its lines, by ID minute, service and level
/// and by event minute and level. `level` and `event` name its columns (`None`: it has none).
/// Returns the lines counted.
pub async fn assert_exact(
    conn: &mut Conn,
    (table, level, event): (&str, Option<&str>, Option<&str>),
    (epoch, counter_bits): (u64, u8),
    stage: &str,
) -> u64 {
    let level = level.map_or("''".to_string(), |l| format!("COALESCE({l}, '')"));
    let counted = grouped(
        conn,
        &format!(
            "SELECT {}, CAST(service_id AS CHAR), level, CAST(SUM(n) AS UNSIGNED) \
             FROM logstamp_line_counts WHERE table_name = '{table}' GROUP BY 1, 2, 3",
            minute_text("minute")
        ),
    )
    .await;
    let oracle = grouped(
        conn,
        &format!(
            "SELECT {}, CAST((id >> {counter_bits}) & {mask} AS CHAR), {level}, COUNT(*) \
             FROM {table} GROUP BY 1, 2, 3",
            minute_text(&format!("(id >> 32) + {epoch}")),
            mask = (1u64 << (32 - counter_bits)) - 1,
        ),
    )
    .await;
    assert_eq!(counted, oracle, "{table} by ID minute, {stage}");
    let Some(event) = event else {
        return oracle.values().sum();
    };
    let counted = grouped(
        conn,
        &format!(
            "SELECT {}, '', level, CAST(SUM(n) AS UNSIGNED) FROM logstamp_line_counts \
             WHERE table_name = '{table}' AND event_minute < 18446744073709551615 \
             GROUP BY 1, 2, 3",
            minute_text("event_minute")
        ),
    )
    .await;
    let by_event = grouped(
        conn,
        &format!(
            "SELECT DATE_FORMAT({event}, '%Y-%m-%d %H:%i'), '', {level}, COUNT(*) FROM {table} \
             WHERE {event} IS NOT NULL GROUP BY 1, 2, 3"
        ),
    )
    .await;
    assert_eq!(counted, by_event, "{table} by event minute, {stage}");
    oracle.values().sum()
}
