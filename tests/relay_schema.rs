//! The relay's integrity checks end to end, on private MariaDB servers: a table whose primary
//! key or exact column types differ between data centres holds its changes back, and an UPDATE
//! or DELETE that does not find its before image is a conflict, recorded and resolved as
//! `relay.on_conflict` says.

mod support;

use mysql_async::prelude::Queryable;

use logstamp::relay::settings::LoopFilterMode;
use support::http::{get, readiness_becomes, sample};
use support::relay::*;

const MISMATCH: &str = "logstamp_relay_apply_schema_mismatch{dc=\"b\",remote=\"a\"}";
const CONFLICTS: &str = "logstamp_relay_conflicts_total{dc=\"b\",remote=\"a\"}";
const CONFLICT_STOPPED: &str = "logstamp_relay_apply_conflict_stopped{dc=\"b\",remote=\"a\"}";

/// `relay_applied.last_error` of `source` in `dc`.
async fn last_error(dc: &Dc, source: &str) -> Option<String> {
    let mut conn = dc.conn().await;
    let error: Option<Option<String>> = conn
        .exec_first(
            "SELECT last_error FROM logstamp.relay_applied WHERE source_dc = ?",
            (source,),
        )
        .await
        .unwrap();
    error.flatten()
}

/// Waits until `dc`'s applier of a records an error containing every one of `parts`.
async fn wait_error(dc: &Dc, parts: &[&str]) {
    wait_until(&format!("{} records why it waits", dc.name), || async {
        match last_error(dc, "a").await {
            Some(e) if parts.iter().all(|p| e.contains(p)) => Ok(()),
            other => Err(format!("last_error {other:?}")),
        }
    })
    .await;
}

async fn metric(dc: &Dc, name: &str) -> Option<f64> {
    let (_, metrics) = get(&dc.telemetry().await, "/metrics");
    sample(&metrics, name)
}

/// Runs `statements` in `dc`, in one session.
async fn run(dc: &Dc, statements: &[&str]) {
    let mut conn = dc.conn().await;
    for statement in statements {
        conn.query_drop(*statement).await.unwrap();
    }
}

/// Runs `statements` in `dc` without writing them to its binlog: a divergence its capture
/// never sees.
async fn diverge(dc: &Dc, statements: &[&str]) {
    run(dc, &[&["SET SESSION sql_log_bin = 0"], statements].concat()).await;
}

/// `a` applies `b` and the other way round, with `on_conflict` in b.
async fn start_pair(dcs: &mut [Dc], mode: LoopFilterMode, on_conflict: &str) {
    let brokers: Vec<(String, String)> = dcs
        .iter()
        .map(|d| (d.name.clone(), d.brokers.clone()))
        .collect();
    for (i, dc) in dcs.iter_mut().enumerate() {
        let (name, other) = &brokers[1 - i];
        dc.configure(&[(name, other.clone())], mode, "100ms");
        let path = dc.dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "[relay]\n",
            &format!("[relay]\non_conflict = \"{on_conflict}\"\n"),
        );
        std::fs::write(&path, text).unwrap();
        dc.start_relay();
    }
    for dc in dcs.iter() {
        dc.wait_capture_started().await;
    }
}

/// A row of `relay_conflicts`, its images read as JSON.
#[derive(Debug)]
struct Conflict {
    kind: String,
    key: serde_json::Value,
    expected: serde_json::Value,
    found: Option<serde_json::Value>,
    resolution: String,
}

/// Every conflict `dc` recorded, all of them of `app.items` from a.
async fn conflicts(dc: &Dc) -> Vec<Conflict> {
    let mut conn = dc.conn().await;
    let rows: Vec<mysql_async::Row> = conn
        .query(
            "SELECT source_dc, CONCAT(table_schema, '.', table_name), change_type, row_key, \
             expected, found, resolution FROM logstamp.relay_conflicts ORDER BY id",
        )
        .await
        .unwrap();
    let json = |text: String| serde_json::from_str::<serde_json::Value>(&text).unwrap();
    rows.into_iter()
        .map(|row| {
            let text = |i: usize| -> Option<String> { row.get(i).unwrap() };
            assert_eq!(
                (text(0).unwrap().as_str(), text(1).unwrap().as_str()),
                ("a", "app.items")
            );
            Conflict {
                kind: text(2).unwrap(),
                key: json(text(3).unwrap()),
                expected: json(text(4).unwrap()),
                found: text(5).map(json),
                resolution: text(6).unwrap(),
            }
        })
        .collect()
}

/// `(id)` in a, `(id, region)` in b: one DELETE in a could delete several rows in b. The
/// table's changes wait, visibly, and none is applied until b's key is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_primary_key_holds_the_table_back_until_it_is_the_same() {
    let table = |key: &str| {
        format!(
            "CREATE TABLE app.keyed (id INT NOT NULL, region VARCHAR(8) NOT NULL, \
             v INT NOT NULL, PRIMARY KEY ({key})) ENGINE=InnoDB"
        )
    };
    let mut dcs = vec![
        Dc::new("a", 1, &[&table("id")]).await,
        Dc::new("b", 2, &[&table("id, region")]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    a.query_drop("INSERT INTO app.keyed VALUES (1, 'eu', 1), (2, 'us', 2)")
        .await
        .unwrap();
    a.query_drop("DELETE FROM app.keyed WHERE id = 1")
        .await
        .unwrap();
    wait_error(
        &dcs[1],
        &["the primary key is (id) in a but (id, region) here"],
    )
    .await;
    assert_eq!(metric(&dcs[1], MISMATCH).await, Some(1.0));
    assert!(dcs[1].rows("app.keyed").await.is_empty(), "nothing applied");
    assert_eq!(dcs[1].applied("a").await, (0, 0));
    let status = dcs[1].status();
    assert!(
        status[1]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("primary key")),
        "{status:?}"
    );
    let mut b = dcs[1].conn().await;
    b.query_drop("ALTER TABLE app.keyed DROP PRIMARY KEY, ADD PRIMARY KEY (id)")
        .await
        .unwrap();
    dcs[1].wait_applied("a", 2).await;
    assert_eq!(
        dcs[1].rows("app.keyed").await,
        dcs[0].rows("app.keyed").await
    );
    assert_eq!(dcs[1].rows("app.keyed").await.len(), 1);
    assert_eq!(last_error(&dcs[1], "a").await, None);
    assert_eq!(metric(&dcs[1], MISMATCH).await, Some(0.0));
}

/// ENUM members in another order, another DECIMAL scale and another DATETIME precision would
/// each store other values than the source's without an error: each is named, and nothing is
/// applied until the table is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enum_order_decimal_scale_and_datetime_precision_are_each_refused() {
    let table = |states: &str, scale: u8, precision: u8| {
        format!(
            "CREATE TABLE app.typed (id INT NOT NULL PRIMARY KEY, state ENUM({states}) NOT NULL, \
             price DECIMAL(10,{scale}) NOT NULL, seen DATETIME({precision}) NOT NULL) ENGINE=InnoDB"
        )
    };
    let mut dcs = vec![
        Dc::new("a", 1, &[&table("'new','done'", 2, 6)]).await,
        Dc::new("b", 2, &[&table("'done','new'", 3, 3)]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    a.query_drop("INSERT INTO app.typed VALUES (1, 'new', 12.34, '2024-05-01 10:00:00.123456')")
        .await
        .unwrap();
    wait_error(
        &dcs[1],
        &[
            "column state is enum('new','done') in a but enum('done','new') here",
            "column price is decimal(10,2) in a but decimal(10,3) here",
            "column seen is datetime(6) in a but datetime(3) here",
        ],
    )
    .await;
    assert_eq!(metric(&dcs[1], MISMATCH).await, Some(1.0));
    assert!(dcs[1].rows("app.typed").await.is_empty(), "nothing applied");
    let mut b = dcs[1].conn().await;
    b.query_drop(
        "ALTER TABLE app.typed MODIFY state ENUM('new','done') NOT NULL, \
         MODIFY price DECIMAL(10,2) NOT NULL, MODIFY seen DATETIME(6) NOT NULL",
    )
    .await
    .unwrap();
    dcs[1].wait_applied("a", 1).await;
    let checksum = "CHECKSUM TABLE app.typed";
    let (mut a, mut b) = (dcs[0].conn().await, dcs[1].conn().await);
    let here: Option<(String, u64)> = b.query_first(checksum).await.unwrap();
    let there: Option<(String, u64)> = a.query_first(checksum).await.unwrap();
    assert_eq!(here, there);
    assert_eq!(last_error(&dcs[1], "a").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_recorded_and_by_default_the_change_wins() {
    conflicts_are_recorded_and_the_change_wins(LoopFilterMode::Marker).await;
}

/// The cache filter must also drop what resolving a conflict wrote, or it would go back to a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_resolved_under_the_cache_filter_do_not_go_back() {
    conflicts_are_recorded_and_the_change_wins(LoopFilterMode::Cache).await;
}

/// Rows changed and deleted in b behind the relay's back, then updated and deleted in a: each
/// such change is a conflict with both images recorded and counted, the change wins, and the
/// tables end the same.
async fn conflicts_are_recorded_and_the_change_wins(mode: LoopFilterMode) {
    let mut dcs = two_dcs(ITEMS).await;
    start_pair(&mut dcs, mode, "apply").await;
    let mut a = dcs[0].conn().await;
    a.query_drop(
        "INSERT INTO app.items (id, service, v, note, amount, seen) VALUES \
         (1, 1, 0, 'one', 1.5, NOW(6)), (2, 1, 0, 'two', NULL, NOW(6)), \
         (3, 1, 0, 'three', 3.25, NOW(6)), (4, 1, 0, 'four', 4, NOW(6))",
    )
    .await
    .unwrap();
    dcs[1].wait_applied("a", 1).await;
    diverge(
        &dcs[1],
        &[
            "UPDATE app.items SET v = 99 WHERE id = 1",
            "DELETE FROM app.items WHERE id = 2",
            "UPDATE app.items SET note = 'THREE' WHERE id = 3",
        ],
    )
    .await;
    run(
        &dcs[0],
        &[
            "UPDATE app.items SET v = v + 1, note = 'one again' WHERE id = 1",
            "UPDATE app.items SET v = v + 1 WHERE id = 2",
            "DELETE FROM app.items WHERE id = 3",
            // No conflict: the row is the same in both.
            "UPDATE app.items SET v = v + 1 WHERE id = 4",
        ],
    )
    .await;
    dcs[1].wait_applied("a", 5).await;
    assert_eq!(
        dcs[1].rows("app.items").await,
        dcs[0].rows("app.items").await
    );
    assert_eq!(dcs[1].rows("app.items").await.len(), 3);
    let found = conflicts(&dcs[1]).await;
    assert_eq!(found.len(), 3, "{found:?}");
    let first = &found[0];
    assert_eq!(
        (first.kind.as_str(), first.resolution.as_str()),
        ("update", "applied")
    );
    assert_eq!(first.key, serde_json::json!({"id": 1}));
    let expected = &first.expected;
    assert_eq!(
        (expected["v"].as_i64(), expected["note"].as_str()),
        (Some(0), Some("one"))
    );
    let row = first.found.as_ref().expect("the row found");
    assert_eq!(
        (row["v"].as_i64(), row["note"].as_str()),
        (Some(99), Some("one"))
    );
    assert_eq!(found[1].kind, "update");
    assert_eq!(found[1].key, serde_json::json!({"id": 2}));
    assert!(found[1].found.is_none(), "row 2 was missing");
    assert_eq!(found[2].kind, "delete");
    assert_eq!(found[2].expected["note"].as_str(), Some("three"));
    assert_eq!(
        found[2].found.as_ref().unwrap()["note"].as_str(),
        Some("THREE")
    );
    assert_eq!(metric(&dcs[1], CONFLICTS).await, Some(3.0));
    assert_eq!(dcs[1].status()[1]["conflicts"], 3);
    // What resolving wrote in b is not sent back to a: once a applied all b published, a has
    // no conflict of its own and the tables are still the same.
    dcs[1].wait_capture_caught_up().await;
    dcs[0].wait_appliers_caught_up().await;
    assert!(conflicts(&dcs[0]).await.is_empty());
    assert_eq!(
        dcs[0].rows("app.items").await,
        dcs[1].rows("app.items").await
    );
}

/// With `on_conflict = "stop"` the applier waits at the conflict, applying nothing after it,
/// until the operator makes b's row what a's change expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stop_a_conflict_holds_everything_after_it_until_the_row_is_repaired() {
    let mut dcs = two_dcs(ITEMS).await;
    start_pair(&mut dcs, LoopFilterMode::Marker, "stop").await;
    let mut a = dcs[0].conn().await;
    a.query_drop(
        "INSERT INTO app.items (id, service, v, note, amount, seen) VALUES \
         (1, 1, 0, 'one', 1.5, '2024-05-01 10:00:00')",
    )
    .await
    .unwrap();
    dcs[1].wait_applied("a", 1).await;
    diverge(&dcs[1], &["UPDATE app.items SET v = 99 WHERE id = 1"]).await;
    a.query_drop("UPDATE app.items SET note = 'changed' WHERE id = 1")
        .await
        .unwrap();
    a.query_drop(
        "INSERT INTO app.items (id, service, v, note, amount, seen) VALUES \
         (2, 1, 0, 'two', NULL, NOW(6))",
    )
    .await
    .unwrap();
    wait_error(&dcs[1], &["relay.on_conflict is stop"]).await;
    let address = dcs[1].telemetry().await;
    readiness_becomes(&address, 503).await;
    assert_eq!(metric(&dcs[1], CONFLICT_STOPPED).await, Some(1.0));
    assert_eq!(metric(&dcs[1], CONFLICTS).await, Some(1.0));
    assert_eq!(dcs[1].applied("a").await.0, 1, "nothing after the conflict");
    let rows = dcs[1].rows("app.items").await;
    assert_eq!(rows.len(), 1, "row 2 is not applied");
    let found = conflicts(&dcs[1]).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].resolution, "stopped");
    assert_eq!(found[0].found.as_ref().unwrap()["v"].as_i64(), Some(99));
    // The operator puts back the row a's change expects: applying goes on.
    diverge(&dcs[1], &["UPDATE app.items SET v = 0 WHERE id = 1"]).await;
    dcs[1].wait_applied("a", 3).await;
    assert_eq!(
        dcs[1].rows("app.items").await,
        dcs[0].rows("app.items").await
    );
    readiness_becomes(&address, 200).await;
    assert_eq!(metric(&dcs[1], CONFLICT_STOPPED).await, Some(0.0));
    assert_eq!(last_error(&dcs[1], "a").await, None);
    // Tried again while it waited, recorded once.
    assert_eq!(conflicts(&dcs[1]).await.len(), 1);
}

/// Updates and deletes of rows holding every kind of value find their before image exactly:
/// no conflict is recorded where the rows are the same (FLOAT, DECIMAL(65,30), zero dates,
/// ENUM and SET by index, BIT, latin1 and binary strings, JSON, NULLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_every_kind_match_their_before_image() {
    let mut dcs = two_dcs(EVERY_KIND).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    a.query_drop("SET time_zone = '+00:00'").await.unwrap();
    for id in [10, 11] {
        insert_every_kind(&mut a, id).await;
    }
    a.query_drop("INSERT INTO app.vals (id) VALUES (12)")
        .await
        .unwrap();
    run(
        &dcs[0],
        &[
            // The next update finds a zero date in its before image.
            "UPDATE app.vals SET dt0 = '0000-00-00 00:00:00', s = 'Ab' WHERE id = 10",
            "UPDATE app.vals SET s = 'changed', f = 0.25 WHERE id = 10",
            "UPDATE app.vals SET s = 'set' WHERE id = 12",
            "DELETE FROM app.vals WHERE id = 11",
        ],
    )
    .await;
    dcs[1].wait_applied("a", 7).await;
    let checksum = "CHECKSUM TABLE app.vals";
    let mut b = dcs[1].conn().await;
    let here: Option<(String, u64)> = b.query_first(checksum).await.unwrap();
    let there: Option<(String, u64)> = a.query_first(checksum).await.unwrap();
    assert_eq!(here, there);
    assert_eq!(dcs[1].rows("app.vals").await.len(), 2);
    let recorded: Vec<String> = b
        .query("SELECT change_message FROM logstamp.relay_conflicts")
        .await
        .unwrap();
    assert!(recorded.is_empty(), "{recorded:?}");
    assert_eq!(metric(&dcs[1], CONFLICTS).await, Some(0.0));
}

/// Data centres writing their own rows at once never conflict: with `stop`, a conflict found
/// where there is none would hold the applier and the tables would not converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_their_own_rows_raise_no_conflict() {
    let mut dcs = two_dcs(ITEMS).await;
    start_pair(&mut dcs, LoopFilterMode::Marker, "stop").await;
    let local = write_everywhere(&dcs, 60).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    for dc in &dcs {
        assert!(conflicts(dc).await.is_empty(), "{}", dc.name);
    }
}
