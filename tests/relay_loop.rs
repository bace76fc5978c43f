//! The loop filters across restarts: a change applied here is never sent back to its origin,
//! whether the relay process is killed or only capture's binlog connection is, in every
//! loop-filter mode. And a message that cannot be applied stops only its applier.

mod support;

use std::time::Duration;

use mysql_async::prelude::Queryable;

use logstamp::relay::change::Change;
use logstamp::relay::settings::LoopFilterMode;
use support::http::{get, sample};
use support::relay::*;

const COUNTER: &str =
    "CREATE TABLE app.counter (id INT NOT NULL PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB";

/// How capture is interrupted after it read a change applied here.
#[derive(Debug, Clone, Copy)]
enum Interruption {
    /// SIGKILL of the relay process, then a new one.
    KillRelay,
    /// `KILL` of capture's binlog connection: capture starts again inside the process.
    KillBinlogConnection,
}

/// B sets v=1, A applies it, A's capture is interrupted before it records its position, B sets
/// v=2, A's capture reads the applied change again: it must drop it again, so that both end
/// with v=2 and A's topic stays empty (A never wrote anything itself).
async fn an_applied_change_read_again_is_not_sent_back(interruption: Interruption) {
    let mut dcs = two_dcs(COUNTER).await;
    // Checkpoints far apart: the interruption leaves A's checkpoint before the applied change.
    start_relays(&mut dcs, LoopFilterMode::Cache, "1h").await;
    let mut b = dcs[1].conn().await;
    b.query_drop("INSERT INTO app.counter VALUES (1, 0)")
        .await
        .unwrap();
    b.query_drop("UPDATE app.counter SET v = 1 WHERE id = 1")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 2).await;
    // A's capture has read (and dropped) what was applied before it is interrupted.
    wait_capture_read(&dcs[0], 2).await;
    match interruption {
        Interruption::KillRelay => {
            dcs[0].kill_relay();
            b.query_drop("UPDATE app.counter SET v = 2 WHERE id = 1")
                .await
                .unwrap();
            dcs[0].start_relay();
        }
        Interruption::KillBinlogConnection => {
            kill_binlog_connection(&dcs[0]).await;
            b.query_drop("UPDATE app.counter SET v = 2 WHERE id = 1")
                .await
                .unwrap();
        }
    }
    dcs[0].wait_applied("b", 3).await;
    // Read again: the insert and v=1 since the checkpoint (by a new process, or the same one
    // whose counts go on), then v=2.
    let read = match interruption {
        Interruption::KillRelay => 3,
        Interruption::KillBinlogConnection => 5,
    };
    wait_capture_read(&dcs[0], read).await;
    dcs[1].wait_appliers_caught_up().await;
    assert_eq!(
        dcs[0].published().len(),
        0,
        "a sent back changes it applied ({interruption:?})"
    );
    for dc in &dcs {
        let v: Option<i32> = dc
            .conn()
            .await
            .query_first("SELECT v FROM app.counter WHERE id = 1")
            .await
            .unwrap();
        assert_eq!(v, Some(2), "v in {} ({interruption:?})", dc.name);
    }
}

/// Waits until the running relay's capture has read `changes` relayed changes (published or
/// dropped by the loop filter), from its own counters (an applier may have put several source
/// transactions in one): with checkpoints an hour apart, `relay status` cannot tell.
async fn wait_capture_read(dc: &Dc, changes: u64) {
    let address = dc.telemetry().await;
    wait_until(
        &format!("capture of {} reads {changes} changes", dc.name),
        || async {
            let (_, metrics) = get(&address, "/metrics");
            let count = |name: &str| {
                let name = format!("{name}{{dc=\"{}\"}}", dc.name);
                sample(&metrics, &name).unwrap_or(0.0) as u64
            };
            let read = count("logstamp_relay_published_changes_total")
                + count("logstamp_relay_loop_dropped_changes_total");
            if read >= changes {
                Ok(())
            } else {
                Err(format!("{read} read"))
            }
        },
    )
    .await;
}

/// Kills capture's binlog connection on the server and waits until capture, started again
/// inside the same process, reads through a new one.
async fn kill_binlog_connection(dc: &Dc) {
    let before = binlog_dump_connection(dc).await.expect("capture reads");
    dc.conn()
        .await
        .query_drop(format!("KILL {before}"))
        .await
        .unwrap();
    wait_until(&format!("capture of {} reconnects", dc.name), || async {
        match binlog_dump_connection(dc).await {
            Some(id) if id != before => Ok(()),
            other => Err(format!("binlog connection {other:?}")),
        }
    })
    .await;
    assert!(
        dc.log()[dc.log_from..].contains("relay capture failed, starting again"),
        "capture of {} did not start again inside its process",
        dc.name
    );
}

/// The id of the connection the server streams its binlog to (capture's), if there is one.
async fn binlog_dump_connection(dc: &Dc) -> Option<u64> {
    dc.conn()
        .await
        .query_first(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump' \
             ORDER BY ID DESC LIMIT 1",
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_filter_does_not_send_back_after_a_killed_relay() {
    an_applied_change_read_again_is_not_sent_back(Interruption::KillRelay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_filter_does_not_send_back_after_a_killed_binlog_connection() {
    an_applied_change_read_again_is_not_sent_back(Interruption::KillBinlogConnection).await;
}

/// Both data centres write at once while A's relay is SIGKILLed, B's capture loses its binlog
/// connection, and B's relay is SIGKILLed: each side applies exactly the transactions the
/// other's writers committed, once, each topic holds only its own data centre's transactions,
/// and the tables end the same.
async fn concurrent_writers_survive_kills(mode: LoopFilterMode) {
    let mut dcs = two_dcs(ITEMS).await;
    // Checkpoints apart: a kill leaves a range to read again.
    start_relays(&mut dcs, mode, "1s").await;
    let writers: Vec<_> = dcs
        .iter()
        .enumerate()
        .map(|(i, dc)| {
            let pace = Some(Duration::from_millis(4));
            let url = dc.server.url("app");
            tokio::spawn(writer(url, i as u32 + 1, 400, 11 + i as u64, pace))
        })
        .collect();
    // Each interruption once the other side's applied changes are flowing into it.
    dcs[0].wait_applied("b", 50).await;
    dcs[0].kill_relay();
    dcs[0].start_relay();
    dcs[1].wait_applied("a", 150).await;
    kill_binlog_connection(&dcs[1]).await;
    dcs[1].wait_applied("a", 250).await;
    dcs[1].kill_relay();
    dcs[1].start_relay();
    let mut local = Vec::new();
    for w in writers {
        local.push(w.await.unwrap());
    }
    wait_in_sync(&dcs, &local, "app.items").await;
    assert_exactly_once(&dcs, &local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_survive_kills_with_the_cache_filter() {
    concurrent_writers_survive_kills(LoopFilterMode::Cache).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_survive_kills_with_the_marker_filter() {
    concurrent_writers_survive_kills(LoopFilterMode::Marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_survive_kills_with_the_skip_replication_filter() {
    concurrent_writers_survive_kills(LoopFilterMode::SkipReplication).await;
}

/// A message the applier of A from B cannot apply, and how B's topic comes to hold it.
#[derive(Debug, Clone, Copy)]
enum BadMessage {
    /// Bytes that are no change message, produced by hand.
    Unparseable,
    /// A change without its primary key columns, produced by hand.
    NoPrimaryKey,
    /// A change of a table B relays and A does not.
    TableNotRelayed,
    /// A value A's table refuses (a CHECK constraint only A has).
    RefusedByTheTable,
}

/// With `relay.on_bad_message = "stop"` (the default), a bad message from B stops A's applier
/// of B, visibly (`relay status`, the stopped metric), and nothing of B's after it is applied;
/// A's capture and its applier of C go on.
async fn a_bad_message_stops_only_its_applier(bad: BadMessage) {
    let mut dcs = vec![
        Dc::new("a", 1, &[COUNTER]).await,
        Dc::new(
            "b",
            2,
            &[COUNTER, "CREATE TABLE audit.t (id INT PRIMARY KEY)"],
        )
        .await,
        Dc::new("c", 3, &[COUNTER]).await,
    ];
    dcs[0]
        .conn()
        .await
        .query_drop("ALTER TABLE app.counter ADD CONSTRAINT small CHECK (v < 100)")
        .await
        .unwrap();
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    if let BadMessage::TableNotRelayed = bad {
        // B relays audit.* too.
        dcs[1].stop_relay().await;
        let settings = dcs[1].dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&settings).unwrap();
        std::fs::write(
            &settings,
            text.replace("[\"app.*\"]", "[\"app.*\", \"audit.*\"]"),
        )
        .unwrap();
        dcs[1].start_relay();
    }
    let mut b = dcs[1].conn().await;
    b.query_drop("INSERT INTO app.counter VALUES (1, 1)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 1).await;
    let reason = match bad {
        BadMessage::Unparseable => {
            dcs[1].produce(b"{not a change".to_vec());
            // After b's capture's resume message (offset 0) and the insert (1).
            "offset 2"
        }
        BadMessage::NoPrimaryKey => {
            let mut change: serde_json::Value =
                serde_json::from_slice(&dcs[1].published()[0].to_json()).unwrap();
            change["key"] = serde_json::json!({});
            dcs[1].produce(serde_json::to_vec(&change).unwrap());
            "no primary key"
        }
        BadMessage::TableNotRelayed => {
            b.query_drop("INSERT INTO audit.t VALUES (1)")
                .await
                .unwrap();
            "audit.t"
        }
        BadMessage::RefusedByTheTable => {
            b.query_drop("UPDATE app.counter SET v = 1000 WHERE id = 1")
                .await
                .unwrap();
            "small"
        }
    };
    // B goes on writing; none of it reaches A past the bad message.
    b.query_drop("INSERT INTO app.counter VALUES (2, 2)")
        .await
        .unwrap();
    let a = &dcs[0];
    wait_until(&format!("a stops applying b ({bad:?})"), || async {
        let lines = a.status();
        let from_b = lines
            .iter()
            .find(|l| l["part"] == "apply" && l["source_dc"] == "b");
        match from_b.and_then(|l| l["last_error"].as_str()) {
            Some(error) if error.contains(reason) => Ok(()),
            _ => Err(format!("{lines:?}")),
        }
    })
    .await;
    let address = a.telemetry().await;
    let (_, metrics) = get(&address, "/metrics");
    assert_eq!(
        sample(
            &metrics,
            "logstamp_relay_apply_stopped{dc=\"a\",remote=\"b\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // A's applier of C and A's capture go on.
    dcs[2]
        .conn()
        .await
        .query_drop("INSERT INTO app.counter VALUES (3, 3)")
        .await
        .unwrap();
    a.conn()
        .await
        .query_drop("INSERT INTO app.counter VALUES (4, 4)")
        .await
        .unwrap();
    wait_until("c's and a's rows arrive", || async {
        let here = dcs[0].ids_of("app.counter").await;
        let at_c = dcs[2].ids_of("app.counter").await;
        if here.contains(&3) && at_c.contains(&4) {
            Ok(())
        } else {
            Err(format!("a has {here:?}, c has {at_c:?}"))
        }
    })
    .await;
    assert_eq!(
        a.applied("b").await.0,
        1,
        "a applied b's after the bad message"
    );
    assert!(!a.ids_of("app.counter").await.contains(&2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparseable_message_stops_only_its_applier() {
    a_bad_message_stops_only_its_applier(BadMessage::Unparseable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_without_its_primary_key_stops_only_its_applier() {
    a_bad_message_stops_only_its_applier(BadMessage::NoPrimaryKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_a_table_not_relayed_here_stops_only_its_applier() {
    a_bad_message_stops_only_its_applier(BadMessage::TableNotRelayed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_local_table_refuses_stops_only_its_applier() {
    a_bad_message_stops_only_its_applier(BadMessage::RefusedByTheTable).await;
}

/// A row of `relay_dead_letters`.
type DeadLetter = (String, i64, String, Option<u64>, Vec<u8>, String);

/// With `relay.on_bad_message = "dead_letter"`, a message that does not parse is recorded with
/// its bytes and skipped alone; a transaction that A's table refuses for good is recorded
/// whole, each of its messages with its bytes, and none of its changes is applied; applying
/// from B goes on, also after A's relay starts again, which records nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_go_to_the_dead_letters_and_applying_goes_on() {
    let mut dcs = two_dcs(COUNTER).await;
    dcs[0]
        .conn()
        .await
        .query_drop("ALTER TABLE app.counter ADD CONSTRAINT small CHECK (v < 100)")
        .await
        .unwrap();
    start_relays_with(
        &mut dcs,
        LoopFilterMode::Marker,
        "100ms",
        "on_bad_message = \"dead_letter\"",
    )
    .await;
    let mut b = dcs[1].conn().await;
    b.query_drop("INSERT INTO app.counter VALUES (1, 1)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 1).await;
    // Offset 0: capture's resume message, 1: the first insert. Offset 2: not a change. Offsets
    // 3 to 5: one transaction of three changes, the second of which A's CHECK refuses. Offset
    // 6: the next transaction.
    let garbage = b"{not a change".to_vec();
    dcs[1].produce(garbage.clone());
    b.query_drop(
        "START TRANSACTION; INSERT INTO app.counter VALUES (5, 5); \
         UPDATE app.counter SET v = 1000 WHERE id = 1; INSERT INTO app.counter VALUES (6, 6); \
         COMMIT",
    )
    .await
    .unwrap();
    b.query_drop("INSERT INTO app.counter VALUES (2, 2)")
        .await
        .unwrap();
    let a = &dcs[0];
    a.wait_applied("b", 2).await;
    assert_eq!(
        a.ids_of("app.counter").await,
        [1, 2],
        "a applied part of the refused transaction"
    );
    let v: Option<i32> = a
        .conn()
        .await
        .query_first("SELECT v FROM app.counter WHERE id = 1")
        .await
        .unwrap();
    assert_eq!(v, Some(1));

    let topic = dcs[1].topic();
    let payloads = dcs[1].published_payloads();
    assert_eq!(payloads.len(), 7, "b's topic");
    assert_eq!(payloads[2], garbage);
    let refused: Vec<Change> = payloads[3..6]
        .iter()
        .map(|payload| Change::from_json(payload).unwrap())
        .collect();
    let expect_letters = || {
        let mut rows: Vec<DeadLetter> = vec![(
            topic.clone(),
            2,
            String::new(),
            None,
            garbage.clone(),
            "bad change message".to_string(),
        )];
        for (offset, change) in (3..).zip(&refused) {
            rows.push((
                topic.clone(),
                offset,
                change.position.gtid.clone().unwrap(),
                Some(change.txn.seq),
                payloads[offset as usize].clone(),
                "small".to_string(),
            ));
        }
        rows
    };
    let check_letters = |found: Vec<DeadLetter>| {
        let expected = expect_letters();
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for (found, expected) in found.iter().zip(&expected) {
            assert_eq!(found.0, expected.0);
            assert_eq!(found.1, expected.1);
            assert_eq!(found.2, expected.2, "gtid at offset {}", found.1);
            assert_eq!(found.3, expected.3, "seq at offset {}", found.1);
            assert_eq!(found.4, expected.4, "bytes at offset {}", found.1);
            assert!(
                found.5.contains(&expected.5),
                "reason at offset {}: {}",
                found.1,
                found.5
            );
        }
    };
    check_letters(dead_letters(a).await);
    // Seen in `relay status` and the metrics; the applier is not stopped.
    let status = a.status();
    let from_b = status
        .iter()
        .find(|l| l["part"] == "apply" && l["source_dc"] == "b")
        .unwrap();
    assert_eq!(from_b["dead_letters"], 4, "{status:?}");
    let (_, metrics) = get(&a.telemetry().await, "/metrics");
    let labels = "{dc=\"a\",remote=\"b\"}";
    assert_eq!(
        sample(
            &metrics,
            &format!("logstamp_relay_dead_letters_total{labels}")
        ),
        Some(4.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, &format!("logstamp_relay_apply_stopped{labels}")),
        Some(0.0),
        "{metrics}"
    );

    // Started again, A's relay records nothing twice and goes on.
    dcs[0].stop_relay().await;
    dcs[0].start_relay();
    b.query_drop("INSERT INTO app.counter VALUES (7, 7)")
        .await
        .unwrap();
    dcs[0].wait_applied("b", 3).await;
    assert_eq!(dcs[0].ids_of("app.counter").await, [1, 2, 7]);
    check_letters(dead_letters(&dcs[0]).await);
}

/// The rows of `relay_dead_letters` in `dc`, by offset.
async fn dead_letters(dc: &Dc) -> Vec<DeadLetter> {
    dc.conn()
        .await
        .query(
            "SELECT topic, kafka_offset, source_gtid, source_seq, message, reason \
             FROM logstamp.relay_dead_letters ORDER BY topic, kafka_offset",
        )
        .await
        .unwrap()
}
