//! Signed relay messages against a forger with kafka-python: with `relay.keys` set, a message
//! written to a relay topic without the source's key changes nothing, nor does one signed by a
//! key past its `until`, while the genuine traffic goes on, and each is reported with its offset.

mod support;

use mysql_async::prelude::Queryable;

use logstamp::relay::change::Change;
use logstamp::relay::settings::LoopFilterMode;
use support::http::{get, sample};
use support::relay::*;

const COUNTER: &str =
    "CREATE TABLE app.counter (id INT NOT NULL PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB";

const KA: &str = "a-secret-a-secret-a-secret-a-secret-a-secret";
const K1: &str = "b-old-secret-b-old-secret-b-old-secret-b-old";
const K2: &str = "b-new-secret-b-new-secret-b-new-secret-b-new";
/// An `until` long past.
const RETIRED: &str = "2000-01-01T00:00:00Z";

fn key(dc: &str, id: &str, secret: &str, until: Option<&str>) -> String {
    let until = until.map_or(String::new(), |u| format!(", until = \"{u}\""));
    format!("{{ dc = \"{dc}\", id = \"{id}\", secret = \"{secret}\"{until} }}")
}

/// The `relay.keys` line of both data centres, before and after b's rotation from k1 to k2.
fn keys_line(rotated: bool) -> String {
    let b = if rotated {
        [key("b", "k2", K2, None), key("b", "k1", K1, Some(RETIRED))].join(", ")
    } else {
        key("b", "k1", K1, None)
    };
    format!("keys = [{}, {b}]", key("a", "ka", KA, None))
}

/// A message of a relay topic: its offset, value and signature header.
#[derive(Debug, Clone)]
struct Read {
    offset: i64,
    value: String,
    signature: Option<String>,
}

/// Every message of `dc`'s topic, its value as text.
fn read(dc: &Dc) -> Vec<Read> {
    dc.topic_messages()
        .into_iter()
        .map(|m| Read {
            offset: m.offset,
            value: String::from_utf8(m.value).unwrap(),
            signature: m.signature,
        })
        .collect()
}

/// The signature headers kafka-python's script computes for `values` published to `dc`'s
/// topic with key `id`.
fn python_signatures(dc: &Dc, id: &str, secret: &str, values: &[String]) -> Vec<String> {
    let python = support::python::python_with("kafka");
    let values = serde_json::to_string(values).unwrap();
    let output = support::python::run(
        &python,
        "relay_forge.py",
        &["sign", &dc.topic(), &dc.name, id, secret, &values],
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn produce(dc: &Dc, messages: serde_json::Value) -> Vec<i64> {
    let python = support::python::python_with("kafka");
    let topic = dc.topic();
    let spec = messages.to_string();
    let output = support::python::run(
        &python,
        "relay_forge.py",
        &["produce", &dc.brokers, &topic, &spec],
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A change of b's in the right shape that a's applier would apply, were it not for its
/// signature: `genuine` (b's latest) with another row and the next GTIDs after it.
fn forged(genuine: &Change, id: i64, ahead: u64) -> String {
    let mut change: serde_json::Value = serde_json::from_slice(&genuine.to_json()).unwrap();
    let gtid = genuine.position.gtid.clone().unwrap();
    let (prefix, seq) = gtid.rsplit_once('-').unwrap();
    let seq: u64 = seq.parse().unwrap();
    change["key"] = serde_json::json!({ "id": id });
    change["values"] = serde_json::json!({ "id": id, "v": id });
    change["gtid"] = serde_json::json!(format!("{prefix}-{}", seq + ahead));
    change["txn"]["seq"] = serde_json::json!(genuine.txn.seq + ahead);
    change["stream"]["published"] = serde_json::json!(gtid);
    change.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_retired_key_messages_change_nothing_and_are_reported() {
    let mut dcs = two_dcs(COUNTER).await;
    let settings = format!("on_bad_message = \"dead_letter\"\n{}", keys_line(false));
    start_relays_with(&mut dcs, LoopFilterMode::Marker, "100ms", &settings).await;
    let mut b = dcs[1].conn().await;
    b.query_drop("INSERT INTO app.counter VALUES (1, 1)")
        .await
        .unwrap();
    dcs[0]
        .conn()
        .await
        .query_drop("INSERT INTO app.counter VALUES (10, 10)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 1).await;
    dcs[1].wait_applied("a", 1).await;

    // Every message of both topics (resume messages included) carries the HMAC that
    // kafka-python's script computes with its data centre's key, as the README describes it.
    for (dc, id, secret) in [(&dcs[0], "ka", KA), (&dcs[1], "k1", K1)] {
        let messages = read(dc);
        assert_eq!(messages.len(), 2, "{messages:?}");
        let values: Vec<String> = messages.iter().map(|m| m.value.clone()).collect();
        let expected = python_signatures(dc, id, secret, &values);
        for (m, expected) in messages.iter().zip(expected) {
            assert_eq!(
                m.signature.as_ref(),
                Some(&expected),
                "{} offset {}",
                dc.name,
                m.offset
            );
        }
    }
    let old = read(&dcs[1]).pop().unwrap();
    assert!(old.signature.as_deref().unwrap().starts_with("k1:"));

    // b rotates to k2; k1 is past its until everywhere.
    for dc in dcs.iter_mut() {
        dc.stop_relay().await;
        let path = dc.dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(&keys_line(false), &keys_line(true))).unwrap();
        dc.start_relay();
    }
    for dc in &dcs {
        dc.wait_capture_started().await;
    }
    b.query_drop("INSERT INTO app.counter VALUES (2, 2)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 2).await;

    let genuine = dcs[1].published().pop().unwrap();
    let forgeries = serde_json::json!([
        // Right shape, no signature.
        { "value": forged(&genuine, 100, 100) },
        // Signed with b's current key id but another secret.
        { "value": forged(&genuine, 101, 101), "sign": { "dc": "b", "id": "k2", "secret": K1 } },
        // b's old message as it was, signed by k1, past its until.
        { "value": old.value, "signature": old.signature },
        // A new change signed with k1 itself (a leaked old key), past its until.
        { "value": forged(&genuine, 102, 102), "sign": { "dc": "b", "id": "k1", "secret": K1 } },
    ]);
    let offsets = produce(&dcs[1], forgeries);
    // The genuine traffic goes on after them.
    b.query_drop("INSERT INTO app.counter VALUES (3, 3)")
        .await
        .unwrap();
    let a = &dcs[0];
    a.wait_applied("b", 3).await;
    assert_eq!(a.ids_of("app.counter").await, [1, 2, 3, 10]);
    let v: Vec<(i32, i32)> = a
        .conn()
        .await
        .query("SELECT id, v FROM app.counter ORDER BY id")
        .await
        .unwrap();
    assert_eq!(v, [(1, 1), (2, 2), (3, 3), (10, 10)]);

    // Each is recorded with its offset and why, counted, and logged with what it claims.
    let letters: Vec<(i64, String)> = a
        .conn()
        .await
        .exec(
            "SELECT kafka_offset, reason FROM logstamp.relay_dead_letters \
             WHERE topic = ? ORDER BY kafka_offset",
            (dcs[1].topic(),),
        )
        .await
        .unwrap();
    let reasons = [
        "not signed",
        "by key b/k2 is wrong",
        "key b/k1, accepted until 2000-01-01",
        "key b/k1, accepted until 2000-01-01",
    ];
    assert_eq!(letters.len(), reasons.len(), "{letters:?}");
    for ((offset, reason), (expected_offset, expected)) in
        letters.iter().zip(offsets.iter().zip(reasons))
    {
        assert_eq!(offset, expected_offset, "{letters:?}");
        assert!(reason.contains(expected), "offset {offset}: {reason}");
    }
    let (_, metrics) = get(&a.telemetry().await, "/metrics");
    assert_eq!(
        sample(
            &metrics,
            "logstamp_relay_refused_signatures_total{dc=\"a\",remote=\"b\"}"
        ),
        Some(4.0),
        "{metrics}"
    );
    let log = a.log();
    for offset in &offsets {
        let line = format!(
            "refusing the message at offset {offset} of {}, which claims to come from b",
            dcs[1].topic()
        );
        assert!(log.contains(&line), "{line} not in the log of a");
    }
    // No secret reaches a log.
    for dc in &dcs {
        let log = dc.log();
        for secret in [KA, K1, K2] {
            assert!(!log.contains(secret), "a secret in the log of {}", dc.name);
        }
    }
}
