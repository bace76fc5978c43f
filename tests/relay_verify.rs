//! `logstamp relay verify` against two private MariaDB data centres whose relays run: equal
//! tables, rows changed behind the relay's back, and tables written on both sides meanwhile.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::Value as Sql;
use mysql_async::prelude::Queryable;

use logstamp::relay::settings::LoopFilterMode;
use support::relay::*;

/// Rows per chunk in these tests: small, so that a few hundred rows make many chunks.
const CHUNK_ROWS: &str = "7";

/// `table`'s rows from a full scan, by `key` of each.
async fn rows_by<K: Ord>(dc: &Dc, table: &str, key: impl Fn(&[Sql]) -> K) -> BTreeMap<K, Vec<Sql>> {
    dc.rows(table)
        .await
        .into_iter()
        .map(|row| (key(&row), row))
        .collect()
}

/// A value as the text protocol sends it: its bytes.
fn bytes(value: &Sql) -> Vec<u8> {
    match value {
        Sql::Bytes(b) => b.clone(),
        other => panic!("not bytes: {other:?}"),
    }
}

fn id_of(row: &[Sql]) -> u64 {
    String::from_utf8(bytes(&row[0])).unwrap().parse().unwrap()
}

/// The keys whose rows differ between `a` and `b` (row by row), with the data centre that
/// lacks the row, if one does.
fn row_differences<K: Ord + Clone>(
    a: &BTreeMap<K, Vec<Sql>>,
    b: &BTreeMap<K, Vec<Sql>>,
) -> BTreeMap<K, Option<&'static str>> {
    a.keys()
        .chain(b.keys())
        .filter_map(|k| match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) if x == y => None,
            (Some(_), Some(_)) => Some((k.clone(), None)),
            (None, _) => Some((k.clone(), Some("a"))),
            (_, None) => Some((k.clone(), Some("b"))),
        })
        .collect()
}

/// A value as verify shows it (text, or `{"hex": ...}`), back to its bytes.
fn shown_bytes(value: &serde_json::Value) -> Vec<u8> {
    match value.as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => {
            let hex = value["hex"].as_str().unwrap();
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect()
        }
    }
}

/// The summary line of a verify run, checked to be the only one.
fn summary(verified: &Verified) -> &serde_json::Value {
    let summaries = verified.with_status("summary");
    assert_eq!(
        summaries.len(),
        1,
        "{:?} {}",
        verified.lines,
        verified.stderr
    );
    summaries[0]
}

/// The `id` of a `diverged` line's key (a text, as every shown value).
fn key_id(line: &serde_json::Value) -> u64 {
    line["key"]["id"].as_str().unwrap().parse().unwrap()
}

fn diverged_row(verified: &Verified, id: u64) -> &serde_json::Value {
    verified
        .with_status("diverged")
        .into_iter()
        .find(|l| key_id(l) == id)
        .unwrap_or_else(|| panic!("no line for {id}: {:?}", verified.lines))
}

/// Data centres a and b with their relays running, after two writers in each wrote
/// `per_writer` transactions and both hold the same rows.
async fn two_dcs_in_sync(per_writer: usize) -> Vec<Dc> {
    let mut dcs = two_dcs(ITEMS).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let local = write_everywhere(&dcs, per_writer).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    dcs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_equal_tables_and_finds_exactly_the_rows_changed_behind_the_relay() {
    let mut dcs = two_dcs_in_sync(40).await;
    let (a, b) = (&dcs[0], &dcs[1]);

    // Equal: exit 0, every row of a compared, nothing in flight.
    let equal = a.verify(&[b], &["--chunk-rows", CHUNK_ROWS]);
    assert_eq!(equal.code, Some(0), "{:?} {}", equal.lines, equal.stderr);
    let rows = count(a, "app.items").await;
    let s = summary(&equal);
    assert_eq!(s["rows"], rows);
    assert_eq!(s["diverged_rows"], 0);
    assert_eq!(s["in_flight_chunks"], 0);
    assert_eq!(s["tables"], 1);
    assert_eq!(
        s["chunks"],
        rows / 7 + 1,
        "chunks of 7 rows and a last open one"
    );
    assert_eq!(equal.lines.len(), 1, "{:?}", equal.lines);

    // In b, out of the relay's sight: change the first row, delete one in the middle, and add
    // one after the last of a's.
    let ids: Vec<u64> = rows_by(a, "app.items", id_of).await.into_keys().collect();
    let (changed, deleted) = (ids[0], ids[ids.len() / 2]);
    let inserted = ids[ids.len() - 1] + 1;
    let mut conn = b.conn().await;
    conn.query_drop("SET SESSION sql_log_bin = 0")
        .await
        .unwrap();
    conn.exec_drop(
        "UPDATE app.items SET note = 'changed in b', amount = NULL WHERE id = ?",
        (changed,),
    )
    .await
    .unwrap();
    conn.exec_drop("DELETE FROM app.items WHERE id = ?", (deleted,))
        .await
        .unwrap();
    conn.exec_drop(
        "INSERT INTO app.items (id, service, v, note, amount, seen) \
         VALUES (?, 99, 0, '', NULL, NOW(6))",
        (inserted,),
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();

    // The oracle: a row-by-row comparison of full scans.
    let (rows_a, rows_b) = (
        rows_by(a, "app.items", id_of).await,
        rows_by(b, "app.items", id_of).await,
    );
    let expected = row_differences(&rows_a, &rows_b);
    assert_eq!(expected.len(), 3, "the oracle sees the three changes");

    let diverged = a.verify(
        &[b],
        &["--chunk-rows", CHUNK_ROWS, "--lag-wait-seconds", "10"],
    );
    assert_eq!(
        diverged.code,
        Some(1),
        "{:?} {}",
        diverged.lines,
        diverged.stderr
    );
    let found: BTreeMap<u64, Option<&str>> = diverged
        .with_status("diverged")
        .iter()
        .map(|l| (key_id(l), l["missing_in"].as_str()))
        .collect();
    assert_eq!(found, expected, "{:?}", diverged.lines);
    assert_eq!(summary(&diverged)["diverged_rows"], 3);
    assert_eq!(diverged.with_status("diverged").len(), 3);
    // Both images of the changed row, as each server holds it.
    let line = diverged_row(&diverged, changed);
    let note = |row: &Vec<Sql>| match &row[3] {
        Sql::Bytes(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("a note of {other:?}"),
    };
    assert_eq!(line["local"]["note"], note(&rows_a[&changed]));
    assert_eq!(line["remote"]["note"], "changed in b");
    assert!(line["remote"]["amount"].is_null());
    assert!(!line["local"]["seen"].is_null());
    // The added row: '' is shown as '' and NULL as null.
    let line = diverged_row(&diverged, inserted);
    assert!(line["local"].is_null());
    assert_eq!(line["remote"]["note"], "");
    assert!(line["remote"]["amount"].is_null());

    // The same as a table for people: a header, a row per diverged row naming the columns
    // that differ, and the summary.
    let output = a.verify_output(
        &[b],
        &[
            "--chunk-rows",
            CHUNK_ROWS,
            "--lag-wait-seconds",
            "10",
            "--format",
            "table",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let table = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[0].starts_with("status"), "{table}");
    let changed_line = lines
        .iter()
        .find(|l| l.contains(&format!("id={changed} ")))
        .unwrap_or_else(|| panic!("{table}"));
    // The amount was set to NULL too, which it may have been already.
    let differing = if rows_a[&changed][4] == Sql::NULL {
        "columns note"
    } else {
        "columns amount, note"
    };
    assert!(changed_line.ends_with(differing), "{table}");
    assert!(lines[4].starts_with("summary"), "{table}");

    // --table names what is compared; an unknown one is a usage mistake.
    let other = a.verify(&[b], &["--table", "app.nothing"]);
    assert_eq!(other.code, Some(2), "{}", other.stderr);
    // So is a remote without a url: there is nothing to compare with.
    let no_url = a.verify(&[], &[]);
    assert_eq!(no_url.code, Some(2), "{}", no_url.stderr);
    assert!(
        no_url.stderr.contains("no entry has a url"),
        "{}",
        no_url.stderr
    );

    // b's relay stopped with a transaction of b not captured: the first wait for the lag runs
    // out, and verify stops waiting instead of waiting again for each differing chunk.
    dcs[1].stop_relay().await;
    let mut conn = dcs[1].conn().await;
    conn.query_drop("CREATE TABLE audit.notes (id INT PRIMARY KEY)")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let stuck = dcs[0].verify(
        &[&dcs[1]],
        &["--chunk-rows", CHUNK_ROWS, "--lag-wait-seconds", "1"],
    );
    assert_eq!(stuck.code, Some(1), "{:?} {}", stuck.lines, stuck.stderr);
    assert_eq!(summary(&stuck)["diverged_rows"], 3);
    assert_eq!(
        stuck.stderr.matches("did not drain").count(),
        1,
        "{}",
        stuck.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_while_both_sides_write_finds_changes_in_flight_not_divergence() {
    let dcs = two_dcs_in_sync(30).await;
    // Writers in both data centres, for longer than verify takes (they are stopped after).
    let writers: Vec<_> = dcs
        .iter()
        .enumerate()
        .map(|(i, dc)| {
            let pace = Some(Duration::from_millis(10));
            let service_id = 50 + i as u32;
            tokio::spawn(writer(
                dc.server.url("app"),
                service_id,
                1_000_000,
                11 + i as u64,
                pace,
            ))
        })
        .collect();
    let verified = {
        let (a, b) = (&dcs[0], &dcs[1]);
        a.verify(&[b], &["--chunk-rows", "10", "--lag-wait-seconds", "30"])
    };
    let writing = writers.iter().filter(|w| !w.is_finished()).count();
    assert_eq!(
        writing, 2,
        "the writers stopped before verify did: it proved nothing"
    );
    assert_eq!(
        verified.code,
        Some(0),
        "{:?} {}",
        verified.lines,
        verified.stderr
    );
    let s = summary(&verified);
    assert_eq!(s["diverged_rows"], 0);
    assert!(verified.with_status("diverged").is_empty());
    // How much was in flight, for the README.
    eprintln!("while writing: {s}");
    for w in writers {
        w.abort();
    }
    wait_same_rows(&dcs[0], &dcs[1], "app.items").await;
    let after = dcs[0].verify(&[&dcs[1]], &["--chunk-rows", CHUNK_ROWS]);
    assert_eq!(after.code, Some(0), "{:?} {}", after.lines, after.stderr);
    assert_eq!(summary(&after)["in_flight_chunks"], 0);
}

const KINDS: &str = "CREATE TABLE app.kinds (
  a INT UNSIGNED NOT NULL,
  b VARBINARY(8) NOT NULL,
  t VARCHAR(16) NULL,
  d DECIMAL(30,10) NULL,
  ts DATETIME(6) NULL,
  PRIMARY KEY (a, b)
) ENGINE=InnoDB";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_tells_null_from_empty_and_the_last_digits_apart_under_a_binary_composite_key() {
    let mut dcs = vec![
        Dc::new("a", 1, &[KINDS]).await,
        Dc::new("b", 2, &[KINDS]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let (a, b) = (&dcs[0], &dcs[1]);
    let mut conn = a.conn().await;
    for i in 0u8..20 {
        conn.exec_drop(
            "INSERT INTO app.kinds VALUES (?, ?, ?, '1.0000000001', '2026-01-01 00:00:00.000001')",
            (u32::from(i / 4), vec![0xff, i], (i != 0).then_some("x")),
        )
        .await
        .unwrap();
    }
    conn.disconnect().await.unwrap();
    wait_same_rows(a, b, "app.kinds").await;

    // In b, out of the relay's sight: NULL to '', and the last digit of a DECIMAL and of a
    // DATETIME(6), each in another row.
    let mut conn = b.conn().await;
    conn.query_drop("SET SESSION sql_log_bin = 0")
        .await
        .unwrap();
    for (change, a, i) in [
        ("t = ''", 0u32, 0u8),
        ("d = '1.0000000002'", 1, 5),
        ("ts = '2026-01-01 00:00:00.000002'", 2, 9),
    ] {
        conn.exec_drop(
            format!("UPDATE app.kinds SET {change} WHERE a = ? AND b = ?"),
            (a, vec![0xff, i]),
        )
        .await
        .unwrap();
    }
    conn.disconnect().await.unwrap();

    let key_of = |row: &[Sql]| (bytes(&row[0]), bytes(&row[1]));
    let expected = row_differences(
        &rows_by(a, "app.kinds", key_of).await,
        &rows_by(b, "app.kinds", key_of).await,
    );
    assert_eq!(expected.len(), 3, "the oracle sees the three changes");
    let verified = a.verify(&[b], &["--chunk-rows", "3", "--lag-wait-seconds", "10"]);
    assert_eq!(
        verified.code,
        Some(1),
        "{:?} {}",
        verified.lines,
        verified.stderr
    );
    let found: BTreeMap<(Vec<u8>, Vec<u8>), Option<&str>> = verified
        .with_status("diverged")
        .iter()
        .map(|l| {
            let key = (shown_bytes(&l["key"]["a"]), shown_bytes(&l["key"]["b"]));
            (key, l["missing_in"].as_str())
        })
        .collect();
    assert_eq!(found, expected, "{:?}", verified.lines);
    assert_eq!(summary(&verified)["diverged_rows"], 3);
    let first = verified.with_status("diverged")[0];
    assert_eq!(first["key"]["b"]["hex"], "ff00");
    assert!(first["local"]["t"].is_null());
    assert_eq!(first["remote"]["t"], "");
}
