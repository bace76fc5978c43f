//! The relay end to end: private MariaDB servers (one per data centre, with a binlog), an
//! Apache Kafka broker process per data centre, and `logstamp relay run` as a child process
//! per data centre, so a test can kill it.

mod support;

use std::process::Command;
use std::time::Duration;

use mysql_async::Value as Sql;
use mysql_async::prelude::Queryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use logstamp::relay::gtid::Gtid;
use logstamp::relay::settings::LoopFilterMode;
use support::dev_broker::DevBroker;
use support::http::{get, poll, readiness_becomes, sample};
use support::mariadb::MariaDb;
use support::relay::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_converge_with_the_marker_filter() {
    two_dcs_writing_at_once(LoopFilterMode::Marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_converge_with_the_skip_replication_filter() {
    two_dcs_writing_at_once(LoopFilterMode::SkipReplication).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_converge_with_the_cache_filter() {
    two_dcs_writing_at_once(LoopFilterMode::Cache).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_data_centres_converge() {
    let mut dcs = vec![
        Dc::new("a", 1, &[ITEMS]).await,
        Dc::new("b", 2, &[ITEMS]).await,
        Dc::new("c", 3, &[ITEMS]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let local = write_everywhere(&dcs, 60).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    assert_exactly_once(&dcs, &local).await;
}

/// Two data centres' relays on one `logstamp dev-broker`, their topics not created beforehand:
/// each capture creates its own with one partition (the broker would give a topic it creates
/// by itself 4), and the two converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_share_one_dev_broker_that_had_no_topics_for_them() {
    let broker = DevBroker::start(&[]);
    let mut dcs = Vec::new();
    for (name, server_id) in [("a", 1), ("b", 2)] {
        let server = MariaDb::start(server_id, &[]).await;
        dcs.push(Dc::with_kafka(name, server, &[ITEMS], broker.address.clone(), None).await);
    }
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let local = write_everywhere(&dcs, 40).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    assert_exactly_once(&dcs, &local).await;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .unwrap();
    for dc in &dcs {
        let metadata = consumer
            .fetch_metadata(Some(&topic(&dc.name)), Duration::from_secs(10))
            .unwrap();
        assert_eq!(metadata.topics()[0].partitions().len(), 1, "{}", dc.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_killed_at_random_points_lose_and_repeat_nothing() {
    let mut dcs = two_dcs(ITEMS).await;
    // Checkpoints far apart: a killed capture leaves its checkpoint behind what it published.
    start_relays(&mut dcs, LoopFilterMode::Marker, "1s").await;
    let urls: Vec<String> = dcs.iter().map(|d| d.server.url("app")).collect();
    let writers: Vec<_> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let pace = Some(Duration::from_millis(4));
            tokio::spawn(writer(url.clone(), i as u32 + 1, 600, 7 + i as u64, pace))
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(42);
    // Kill a relay at a random moment and start it again, while the writers run.
    let mut kills = 0;
    while kills < 4 || !writers.iter().all(|w| w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
        let dc = &mut dcs[rng.random_range(0..2)];
        dc.kill_relay();
        dc.start_relay();
        kills += 1;
    }
    let mut local = Vec::new();
    for w in writers {
        local.push(w.await.unwrap());
    }
    wait_in_sync(&dcs, &local, "app.items").await;
    // Capture went on after the last transaction in its topic, not from its older checkpoint;
    // a transaction cut off by a kill is published again, and applied once.
    let resumed_from_the_topic: usize = dcs
        .iter()
        .map(|dc| {
            dc.log()
                .matches("capture resumes after the last message of the topic")
                .count()
        })
        .sum();
    assert!(
        resumed_from_the_topic > 0,
        "no kill left a checkpoint behind the topic: the test proved nothing"
    );
    assert_exactly_once(&dcs, &local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_a_hundred_times_never_goes_back() {
    let table =
        "CREATE TABLE app.counter (id INT NOT NULL PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB";
    let mut dcs = two_dcs(table).await;
    // B records every state its copy of the row goes through, in order.
    let mut b = dcs[1].conn().await;
    for statement in [
        "CREATE TABLE audit.history (seq INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
        "CREATE TRIGGER app.counter_i AFTER INSERT ON app.counter FOR EACH ROW \
         INSERT INTO audit.history (v) VALUES (NEW.v)",
        "CREATE TRIGGER app.counter_u AFTER UPDATE ON app.counter FOR EACH ROW \
         INSERT INTO audit.history (v) VALUES (NEW.v)",
        "CREATE TRIGGER app.counter_d AFTER DELETE ON app.counter FOR EACH ROW \
         INSERT INTO audit.history (v) VALUES (-1)",
    ] {
        b.query_drop(statement).await.unwrap();
    }
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    a.query_drop("INSERT INTO app.counter VALUES (1, 0)")
        .await
        .unwrap();
    for _ in 0..100 {
        a.query_drop("UPDATE app.counter SET v = v + 1 WHERE id = 1")
            .await
            .unwrap();
    }
    a.query_drop("DELETE FROM app.counter WHERE id = 1")
        .await
        .unwrap();
    let expected: Vec<i32> = (0..=100).chain([-1]).collect();
    wait_until("B has seen every state", || async {
        let mut b = dcs[1].conn().await;
        let n: Option<usize> = b
            .query_first("SELECT COUNT(*) FROM audit.history")
            .await
            .map_err(|e| e.to_string())?;
        if n >= Some(102) {
            Ok(())
        } else {
            Err(format!("{n:?} states"))
        }
    })
    .await;
    let states: Vec<i32> = b
        .query("SELECT v FROM audit.history ORDER BY seq")
        .await
        .unwrap();
    assert_eq!(states, expected, "each state once, in order");
    let left: Option<u64> = b
        .query_first("SELECT COUNT(*) FROM app.counter")
        .await
        .unwrap();
    assert_eq!(left, Some(0), "the row ends deleted");
    assert_eq!(dcs[1].applied("a").await, (102, 102));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_survive_exactly() {
    let mut dcs = two_dcs(EVERY_KIND).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    // TIMESTAMP values are read and written in UTC by the relay; this session too.
    a.query_drop("SET time_zone = '+00:00'").await.unwrap();
    insert_every_kind(&mut a, u64::MAX - 5).await;
    a.exec_drop(
        "INSERT INTO app.vals (id) VALUES (?)",
        (i64::MAX as u64 + 1,),
    )
    .await
    .unwrap();
    a.exec_drop(
        "UPDATE app.vals SET y = 0, tm = '00:00:00.0001', s = NULL, d = 0, dt0 = '0000-00-00 00:00:00' WHERE id = ?",
        (i64::MAX as u64 + 1,),
    )
    .await
    .unwrap();
    a.exec_drop("INSERT INTO app.vals (id, s) VALUES (1, 'gone')", ())
        .await
        .unwrap();
    a.exec_drop("DELETE FROM app.vals WHERE id = 1", ())
        .await
        .unwrap();
    let local = [5, 0];
    wait_in_sync(&dcs, &local, "app.vals").await;
    // Compared through text too, so no client-side conversion hides a difference.
    let as_text = "SELECT id, HEX(b), HEX(vb), HEX(bn), HEX(l1), CAST(d AS CHAR), CAST(dt AS CHAR), \
                   CAST(tm AS CHAR), CAST(ts AS CHAR), j, s, t, CAST(f AS CHAR), CAST(g AS CHAR), \
                   HEX(bt), CAST(e AS CHAR), CAST(st AS CHAR), y, dt0 FROM app.vals ORDER BY id";
    let mut b = dcs[1].conn().await;
    let there: Vec<mysql_async::Row> = b.query(as_text).await.unwrap();
    let here: Vec<mysql_async::Row> = a.query(as_text).await.unwrap();
    let unwrap = |rows: Vec<mysql_async::Row>| -> Vec<Vec<Sql>> {
        rows.into_iter().map(|r| r.unwrap()).collect()
    };
    assert_eq!(unwrap(there), unwrap(here));
    // The message shows each value in its exact type.
    let insert = dcs[0]
        .published()
        .into_iter()
        .find(|c| {
            c.row
                .key
                .values()
                .any(|v| *v == Some(logstamp::relay::change::Value::Uint(u64::MAX - 5)))
        })
        .expect("the insert was published");
    let json: serde_json::Value = serde_json::from_slice(&insert.to_json()).unwrap();
    let values = &json["values"];
    assert_eq!(values["id"].as_u64(), Some(u64::MAX - 5));
    assert_eq!(values["u"].as_u64(), Some(4_294_967_295));
    assert_eq!(
        values["d"],
        "-12345678901234567890123456789012345.123456789012345678901234567890"
    );
    assert_eq!(values["dt"], "2038-01-19 03:14:08.123456");
    assert_eq!(values["ts"], "2024-02-29 23:59:59.999");
    assert_eq!(values["tm"], "-838:59:58.9999");
    assert_eq!(values["f"].to_string(), "0.1");
    assert_eq!(values["y"], 2155);
    assert_eq!(values["s"], "😀 4-byte");
    assert_eq!(values["j"], r#"{"a": [1, 2.50, "\u00e9"], "b": null}"#);
    assert_eq!(values["vb"], "AAEC");
    assert_eq!(values["l1"], "6Q==", "latin1 travels as its bytes");
    assert_eq!(
        values["b"].as_str().map(str::len),
        Some(344),
        "256 bytes in base64"
    );
    assert_eq!(values["i"], -128);
    assert_eq!(json["columns"]["id"], "uint");
    assert_eq!(json["columns"]["d"], "decimal");
    assert_eq!(json["columns"]["b"], "binary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_full_row_metadata_is_refused() {
    let server = MariaDb::start(1, &["--binlog-row-metadata=MINIMAL"]).await;
    let dc = Dc::with_server("a", server, &[ITEMS]).await;
    dc.configure(&[], LoopFilterMode::Marker, "100ms");
    let (code, stderr) = dc.run_until_exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("binlog_row_metadata is MINIMAL, needs FULL"),
        "{stderr}"
    );
    assert!(
        stderr.contains("BIGINT UNSIGNED decodes signed"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_two_partitions_is_refused() {
    let broker = DevBroker::start(&["--topic", &topic("a"), "--partitions", "2"]);
    let server = MariaDb::start(1, &[]).await;
    let dc = Dc::with_kafka("a", server, &[ITEMS], broker.address.clone(), None).await;
    dc.configure(&[], LoopFilterMode::Marker, "100ms");
    let output = Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .arg("--config")
        .arg(dc.dir.path().join("relay.toml"))
        .args(["relay", "run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("topic logstamp-relay-a has 2 partitions; the relay needs exactly one"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_whose_columns_differ_waits_until_they_agree() {
    let mut dcs = two_dcs(ITEMS).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut a = dcs[0].conn().await;
    a.query_drop("ALTER TABLE app.items ADD COLUMN extra INT NULL")
        .await
        .unwrap();
    a.query_drop(
        "INSERT INTO app.items (id, service, v, note, seen, extra) VALUES (1, 1, 0, 'new', NOW(6), 5)",
    )
    .await
    .unwrap();
    wait_until("b refuses the changed table", || async {
        let mut b = dcs[1].conn().await;
        let error: Option<Option<String>> = b
            .query_first("SELECT last_error FROM logstamp.relay_applied WHERE source_dc = 'a'")
            .await
            .map_err(|e| e.to_string())?;
        match error.flatten() {
            Some(e) if e.contains("column extra (int) is in a but not here") => Ok(()),
            other => Err(format!("last_error {other:?}")),
        }
    })
    .await;
    assert!(dcs[1].rows("app.items").await.is_empty(), "nothing applied");
    assert!(dcs[0].log().contains("DDL in the binlog, not relayed"));
    let b_telemetry = dcs[1].telemetry().await;
    let mismatch = "logstamp_relay_apply_schema_mismatch{dc=\"b\",remote=\"a\"}";
    let (_, metrics) = get(&b_telemetry, "/metrics");
    assert_eq!(sample(&metrics, mismatch), Some(1.0), "{metrics}");
    // The waiting transaction grows older.
    let lag = "logstamp_relay_apply_lag_seconds{dc=\"b\",remote=\"a\"}";
    poll(
        &b_telemetry,
        "/metrics",
        Duration::from_secs(30),
        |_, body| sample(body, lag).is_some_and(|lag| lag >= 1.0),
    )
    .await;
    // The same DDL here, by hand: applying goes on.
    let mut b = dcs[1].conn().await;
    b.query_drop("ALTER TABLE app.items ADD COLUMN extra INT NULL")
        .await
        .unwrap();
    wait_in_sync(&dcs, &[1, 0], "app.items").await;
    let (_, metrics) = get(&b_telemetry, "/metrics");
    assert_eq!(sample(&metrics, mismatch), Some(0.0), "{metrics}");
    assert_eq!(sample(&metrics, lag), Some(0.0), "{metrics}");
    let error: Option<Option<String>> = b
        .query_first("SELECT last_error FROM logstamp.relay_applied WHERE source_dc = 'a'")
        .await
        .unwrap();
    assert_eq!(error, Some(None), "the error is cleared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_relay_serves_what_it_relayed_and_readiness_follows_kafka() {
    // b's Kafka is stopped below: its own.
    let mut dcs = vec![
        Dc::new("a", 1, &[ITEMS]).await,
        Dc::with_own_kafka("b", 2, &[ITEMS]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let mut addresses = Vec::new();
    for dc in &dcs {
        let address = dc.telemetry().await;
        assert_eq!(get(&address, "/health/live"), (200, "live\n".into()));
        readiness_becomes(&address, 200).await;
        // DDL is counted, not relayed.
        let mut conn = dc.conn().await;
        conn.query_drop("CREATE TABLE audit.notes (id INT PRIMARY KEY)")
            .await
            .unwrap();
        addresses.push(address);
    }
    let local = write_everywhere(&dcs, 60).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    // Messages in each topic: one per change, one offset each.
    let messages: Vec<u64> = dcs.iter().map(|dc| dc.published().len() as u64).collect();

    for (i, dc) in dcs.iter().enumerate() {
        let j = 1 - i;
        let (name, remote) = (&dc.name, &dcs[j].name);
        let capture = |metric: &str| format!("{metric}{{dc=\"{name}\"}}");
        let apply = |metric: &str| format!("{metric}{{dc=\"{name}\",remote=\"{remote}\"}}");
        let address = &addresses[i];
        // Polled: the last counts and the checkpoint follow Kafka's acknowledgements, and lag
        // returns to 0 once each part has done all it was given.
        wait_until(&format!("the metrics of {name} agree"), || {
            let (capture, apply, local, messages) = (&capture, &apply, &local, &messages);
            async move {
                let mut conn = dc.conn().await;
                let checkpoint: Option<(String, u64)> = conn
                    .exec_first(
                        "SELECT binlog_file, binlog_pos FROM logstamp.relay_checkpoints \
                         WHERE dc = ?",
                        (name,),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let (file, pos) = checkpoint.ok_or("no checkpoint")?;
                let file_number: u64 = file.rsplit_once('.').unwrap().1.parse().unwrap();
                let (_, body) = get(address, "/metrics");
                let value = |name: &str| sample(&body, name);
                let expected = [
                    (
                        capture("logstamp_relay_published_transactions_total"),
                        local[i],
                    ),
                    (
                        capture("logstamp_relay_published_changes_total"),
                        messages[i],
                    ),
                    (capture("logstamp_relay_checkpoint_file"), file_number),
                    (capture("logstamp_relay_checkpoint_position"), pos),
                    (capture("logstamp_relay_capture_lag_seconds"), 0),
                    (apply("logstamp_relay_applied_transactions_total"), local[j]),
                    (apply("logstamp_relay_applied_changes_total"), messages[j]),
                    // After the changes and capture's resume message.
                    (apply("logstamp_relay_apply_offset"), messages[j] + 1),
                    (apply("logstamp_relay_apply_lag_seconds"), 0),
                ];
                let wrong: Vec<String> = expected
                    .iter()
                    .filter(|(metric, want)| value(metric) != Some(*want as f64))
                    .map(|(metric, want)| format!("{metric} {:?}, not {want}", value(metric)))
                    .collect();
                if wrong.is_empty() {
                    Ok(())
                } else {
                    Err(wrong.join("; "))
                }
            }
        })
        .await;
        let (_, metrics) = get(address, "/metrics");
        let value = |name: &str| {
            sample(&metrics, name).unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
        };
        assert_eq!(value(&capture("logstamp_relay_ddl_skipped_total")), 1.0);
        // The marker filter dropped every change applied here when capture read it back, in
        // the local transactions that applied them (several source transactions may share one).
        assert_eq!(
            value(&capture("logstamp_relay_loop_dropped_changes_total")),
            messages[j] as f64
        );
        let dropped = value(&capture("logstamp_relay_loop_dropped_transactions_total"));
        assert!(
            dropped >= 1.0 && dropped <= local[j] as f64,
            "{dropped} transactions dropped"
        );
        assert_eq!(value(&capture("logstamp_relay_capture_connected")), 1.0);
        assert_eq!(value(&apply("logstamp_relay_apply_running")), 1.0);
        assert_eq!(value(&apply("logstamp_relay_apply_schema_mismatch")), 0.0);
        assert!(metrics.contains("# TYPE logstamp_relay_apply_lag_seconds gauge"));
    }

    // b's Kafka away: b cannot publish and a cannot read b's changes, so neither is ready,
    // and what b writes meanwhile keeps b's capture behind.
    let kafka_b = dcs[1].kafka.as_ref().unwrap();
    tokio::task::block_in_place(|| kafka_b.stop(0));
    for address in &addresses {
        let body = readiness_becomes(address, 503).await;
        assert!(body.contains("Kafka of b does not answer"), "{body}");
    }
    let late = local[1] + 1;
    writer(dcs[1].server.url("app"), 99, 1, 99, None).await;
    let b_lag = "logstamp_relay_capture_lag_seconds{dc=\"b\"}";
    let within = Duration::from_secs(30);
    poll(&addresses[1], "/metrics", within, |_, body| {
        sample(body, b_lag).is_some_and(|lag| lag >= 1.0)
    })
    .await;
    tokio::task::block_in_place(|| kafka_b.restart(0));
    for address in &addresses {
        readiness_becomes(address, 200).await;
    }
    // Published and applied once Kafka is back, and nobody is behind.
    let a_applied = "logstamp_relay_applied_transactions_total{dc=\"a\",remote=\"b\"}";
    poll(&addresses[0], "/metrics", DEADLINE, |_, body| {
        sample(body, a_applied) == Some(late as f64)
    })
    .await;
    poll(&addresses[1], "/metrics", within, |_, body| {
        sample(body, b_lag) == Some(0.0)
    })
    .await;
    for dc in &mut dcs {
        dc.stop_relay().await;
    }
}

/// Servers in GTID replication: a replica logs what it applies under the original GTIDs, and
/// every server refuses GTIDs out of order.
const GTID_SERVER: &[&str] = &["--log-slave-updates", "--gtid-strict-mode=1"];

/// Data centre a is a primary a1 with a GTID replica a2, b is b1. Writers run in both while
/// a1's binlog rotates twice (so binlog positions differ between a1 and a2), then a2 takes over
/// and a's relay reads a2. `hard`: a's relay and then a1 are killed while a1 is written to, so
/// a2 holds transactions nobody published; otherwise a1's writers finish, a2 catches up, and
/// the relay and a1 stop cleanly. Either way b ends with a2's rows, every transaction applied
/// once.
async fn failover_to_the_replica(hard: bool) {
    let a1 = MariaDb::start(1, GTID_SERVER).await;
    let a2 = MariaDb::start(3, GTID_SERVER).await;
    a2.replicate_from(&a1).await;
    let b1 = MariaDb::start(2, GTID_SERVER).await;
    let mut dcs = vec![
        Dc::with_server("a", a1, &[ITEMS]).await,
        Dc::with_server("b", b1, &[ITEMS]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let pace = Some(Duration::from_millis(10));
    let on_a1: Vec<_> = [1u32, 2]
        .into_iter()
        .map(|w| {
            let url = dcs[0].server.url("app");
            tokio::spawn(write_until_error(url, w, 600, u64::from(w), pace))
        })
        .collect();
    let on_b1: Vec<_> = [11u32, 12]
        .into_iter()
        .map(|w| tokio::spawn(writer(dcs[1].server.url("app"), w, 600, u64::from(w), pace)))
        .collect();
    for applied in [40, 80] {
        dcs[1].wait_applied("a", applied).await;
        let mut a1 = dcs[0].conn().await;
        a1.query_drop("FLUSH BINARY LOGS").await.unwrap();
    }
    dcs[1].wait_applied("a", 120).await;
    // Transactions of a1 after this one were never published by a1's capture.
    let mut unpublished_after = None;
    if hard {
        // Capture dies first: with asynchronous replication a primary that dies first may take
        // transactions that capture published with it, and capture then refuses to go on from
        // a2. a1 writes on, and a2 receives what no capture published.
        dcs[0].kill_relay();
        let published = dcs[0].server.gtid_binlog_pos().await;
        a2.wait_replicated(&published).await;
        let beyond = seq_of(&published) + 100;
        wait_until("a2 receives transactions nobody published", || async {
            let there = seq_of(&a2.gtid_binlog_pos().await);
            if there >= beyond {
                Ok(())
            } else {
                Err(format!("a2 at {there}"))
            }
        })
        .await;
        unpublished_after = Some(seq_of(&published));
        dcs[0].server.kill();
        for w in on_a1 {
            // Stopped by the kill, or done just before it.
            let _ = w.await.unwrap();
        }
    } else {
        for w in on_a1 {
            w.await.unwrap().unwrap();
        }
        a2.wait_replicated(&dcs[0].server.gtid_binlog_pos().await)
            .await;
        dcs[0].stop_relay().await;
        dcs[0].server.stop().await;
    }
    a2.promote().await;
    let _a1 = std::mem::replace(&mut dcs[0].server, a2);
    let b_brokers = dcs[1].brokers.clone();
    dcs[0].configure(&[("b", b_brokers)], LoopFilterMode::Marker, "100ms");
    dcs[0].start_relay();
    let on_a2: Vec<_> = [3u32, 4]
        .into_iter()
        .map(|w| tokio::spawn(writer(dcs[0].server.url("app"), w, 300, u64::from(w), pace)))
        .collect();
    for w in on_a2.into_iter().chain(on_b1) {
        w.await.unwrap();
    }
    wait_same_rows(&dcs[0], &dcs[1], "app.items").await;
    // Each side applied each transaction of the other once, however often it was published:
    // the counts are kept in the transactions that apply.
    let mut gtids = Vec::new();
    for (here, source) in [(0, 1), (1, 0)] {
        let published: std::collections::HashSet<Gtid> = dcs[source]
            .published()
            .iter()
            .map(|c| c.position.gtid().expect("every message has its GTID"))
            .collect();
        let (applied, _) = dcs[here].applied(&dcs[source].name).await;
        assert_eq!(
            applied,
            published.len() as u64,
            "{} applied from {}",
            dcs[here].name,
            dcs[source].name
        );
        gtids.push(published);
    }
    if let Some(after) = unpublished_after {
        // a2's capture published what a1 wrote after a1's capture died.
        assert!(
            gtids[1].iter().any(|g| g.server == 1 && g.seq > after),
            "no transaction of a1 after {after} was published"
        );
    }
    // And a2's own, numbered on from a1's.
    assert!(gtids[1].iter().any(|g| g.server == 3));
    dcs[0].stop_relay().await;
    dcs[1].stop_relay().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_failover_to_a_gtid_replica_loses_and_repeats_nothing() {
    failover_to_the_replica(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_failover_to_a_gtid_replica_loses_and_repeats_nothing() {
    failover_to_the_replica(true).await;
}

/// A replica promoted without transactions that capture already published (and b applied):
/// capture refuses to go on from it, naming where it must resume and the way back, instead of
/// publishing the replica's own transactions under those sequence numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_that_lacks_published_transactions_is_refused() {
    let a1 = MariaDb::start(1, GTID_SERVER).await;
    let a2 = MariaDb::start(3, GTID_SERVER).await;
    a2.replicate_from(&a1).await;
    let mut dcs = vec![
        Dc::with_server("a", a1, &[ITEMS]).await,
        Dc::new("b", 2, &[ITEMS]).await,
    ];
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    writer(dcs[0].server.url("app"), 1, 30, 1, None).await;
    dcs[1].wait_applied("a", 30).await;
    a2.wait_replicated(&dcs[0].server.gtid_binlog_pos().await)
        .await;
    // a2 falls behind; what a1 writes now is published and applied, and never reaches a2.
    let mut replica = a2.conn().await;
    replica.query_drop("STOP SLAVE").await.unwrap();
    writer(dcs[0].server.url("app"), 2, 20, 2, None).await;
    dcs[1].wait_applied("a", 50).await;
    dcs[0].kill_relay();
    dcs[0].server.kill();
    a2.promote().await;
    let _a1 = std::mem::replace(&mut dcs[0].server, a2);
    let b_brokers = dcs[1].brokers.clone();
    dcs[0].configure(&[("b", b_brokers)], LoopFilterMode::Marker, "100ms");
    let (code, stderr) = dcs[0].run_until_exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    for part in [
        "capture resumes after the last message of the topic",
        "cannot send its binlog from where capture resumes (GTID state 0-1-",
        "a promoted replica that lacks them",
        "run `logstamp relay reset` here",
    ] {
        assert!(stderr.contains(part), "{part} not in {stderr}");
    }
    let (applied, _) = dcs[1].applied("a").await;
    assert_eq!(applied, 50, "b applied nothing else");
}

/// The README's procedure for a data centre whose capture lost its place ("Starting a stream
/// anew"), followed after `RESET MASTER` while both data centres write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_reset_master_the_documented_procedure_ends_with_identical_tables() {
    let mut dcs = two_dcs(ITEMS).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    let local = write_everywhere(&dcs, 60).await;
    wait_in_sync(&dcs, &local, "app.items").await;
    dcs[0].stop_relay().await;
    let mut a = dcs[0].conn().await;
    a.query_drop("RESET MASTER").await.unwrap();
    // Written while capture cannot follow: a's are lost to the relay, b's wait in its topic.
    tokio::join!(
        writer(dcs[0].server.url("app"), 5, 40, 5, None),
        writer(dcs[1].server.url("app"), 15, 40, 15, None)
    );
    let (code, stderr) = dcs[0].run_until_exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    for part in [
        "cannot send its binlog from where capture resumes (GTID state 0-1-",
        "run `logstamp relay reset` here",
        "Starting a stream anew",
    ] {
        assert!(stderr.contains(part), "{part} not in {stderr}");
    }

    // 1. Writing stopped (the writers are done). 2. `relay reset` in a.
    let reset = dcs[0].reset();
    assert_eq!(reset["action"], "stream_started_anew", "{reset}");
    // 3. a's relay runs again and applies what b wrote meanwhile.
    dcs[0].start_relay();
    dcs[0].wait_appliers_caught_up().await;
    // 4. a's tables copied over b's; b relays the rows back to a, where they change nothing.
    copy_table(&dcs[0], &dcs[1], "app.items").await;
    dcs[1].wait_capture_caught_up().await;
    dcs[0].wait_appliers_caught_up().await;
    // 5. Writing resumes.
    tokio::join!(
        writer(dcs[0].server.url("app"), 6, 60, 6, None),
        writer(dcs[1].server.url("app"), 16, 60, 16, None)
    );
    wait_same_rows(&dcs[0], &dcs[1], "app.items").await;
    let mut b = dcs[1].conn().await;
    let lost_to_the_relay: Option<u64> = b
        .query_first("SELECT COUNT(*) FROM app.items WHERE service = 5")
        .await
        .unwrap();
    assert!(
        lost_to_the_relay > Some(0),
        "b has what a wrote after RESET MASTER"
    );
    for dc in &mut dcs {
        dc.stop_relay().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_in_a_purged_binlog_stops_capture_with_the_way_back() {
    let mut dc = Dc::new("a", 1, &[ITEMS]).await;
    dc.configure(&[], LoopFilterMode::Marker, "100ms");
    dc.start_relay();
    dc.wait_capture_started().await;
    writer(dc.server.url("app"), 1, 30, 1, None).await;
    dc.wait_capture_caught_up().await;
    dc.stop_relay().await;
    let mut conn = dc.conn().await;
    let checkpoint: Option<String> = conn
        .query_first("SELECT gtid_state FROM logstamp.relay_checkpoints WHERE dc = 'a'")
        .await
        .unwrap();
    let checkpoint = checkpoint.unwrap();
    writer(dc.server.url("app"), 2, 20, 2, None).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let status: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await.unwrap();
    let current: String = status.unwrap().get(0).unwrap();
    // The server keeps a file until its transactions are durable in the engine: try again.
    wait_until("the older binlogs are purged", || async {
        let mut conn = dc.conn().await;
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current}'"))
            .await
            .map_err(|e| e.to_string())?;
        let logs: Vec<mysql_async::Row> = conn
            .query("SHOW BINARY LOGS")
            .await
            .map_err(|e| e.to_string())?;
        if logs.len() == 1 {
            Ok(())
        } else {
            Err(format!("{} binlogs", logs.len()))
        }
    })
    .await;
    let (code, stderr) = dc.run_until_exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    for part in [
        format!("cannot send its binlog from where capture resumes (GTID state {checkpoint})"),
        "purged".to_string(),
        "run `logstamp relay reset` here".to_string(),
    ] {
        assert!(stderr.contains(&part), "{part} not in {stderr}");
    }
    assert_eq!(
        stderr.matches("capture started").count(),
        1,
        "tried more than once: {stderr}"
    );
}

/// An applier that cannot place a transaction after what it applied (here: it was made to
/// forget the last ones it applied, as if messages had been lost) stops applying that source,
/// says so in health, metrics and `relay status`, and goes on once the source's stream is
/// started anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_that_cannot_place_a_transaction_stops_visibly() {
    let mut dcs = two_dcs(ITEMS).await;
    start_relays(&mut dcs, LoopFilterMode::Marker, "100ms").await;
    writer(dcs[0].server.url("app"), 1, 30, 1, None).await;
    wait_in_sync(&dcs, &[30, 0], "app.items").await;
    dcs[1].stop_relay().await;
    let mut b = dcs[1].conn().await;
    let applied: Option<String> = b
        .query_first("SELECT applied FROM logstamp.relay_applied_gtids WHERE source_dc = 'a'")
        .await
        .unwrap();
    let applied: Gtid = applied.unwrap().parse().unwrap();
    let forgotten = Gtid {
        seq: applied.seq - 5,
        ..applied
    };
    b.exec_drop(
        "UPDATE logstamp.relay_applied_gtids SET applied = ? WHERE source_dc = 'a'",
        (forgotten.to_string(),),
    )
    .await
    .unwrap();
    dcs[1].start_relay();
    writer(dcs[0].server.url("app"), 2, 10, 2, None).await;
    let telemetry = dcs[1].telemetry().await;
    poll(&telemetry, "/health/ready", DEADLINE, |status, body| {
        status == 503 && body.contains("applying from a stopped")
    })
    .await;
    let stopped = "logstamp_relay_apply_stopped{dc=\"b\",remote=\"a\"}";
    let lag = "logstamp_relay_apply_lag_seconds{dc=\"b\",remote=\"a\"}";
    poll(
        &telemetry,
        "/metrics",
        Duration::from_secs(30),
        |_, body| {
            sample(body, stopped) == Some(1.0) && sample(body, lag).is_some_and(|lag| lag >= 1.0)
        },
    )
    .await;
    let status = dcs[1].status();
    let error = status[1]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("but {forgotten} was applied here"))
            && error.contains("never reached this applier")
            && error.contains("logstamp relay reset"),
        "{status:?}"
    );
    assert_ne!(
        dcs[0].rows("app.items").await,
        dcs[1].rows("app.items").await
    );

    // The procedure: a's stream starts anew, the tables are made equal, writing resumes.
    dcs[0].stop_relay().await;
    dcs[0].reset();
    dcs[0].start_relay();
    dcs[0].wait_appliers_caught_up().await;
    copy_table(&dcs[0], &dcs[1], "app.items").await;
    dcs[1].wait_capture_caught_up().await;
    dcs[0].wait_appliers_caught_up().await;
    writer(dcs[0].server.url("app"), 3, 10, 3, None).await;
    wait_same_rows(&dcs[0], &dcs[1], "app.items").await;
    readiness_becomes(&telemetry, 200).await;
    let (_, metrics) = get(&telemetry, "/metrics");
    assert_eq!(sample(&metrics, stopped), Some(0.0), "{metrics}");
    for dc in &mut dcs {
        dc.stop_relay().await;
    }
}

/// Lines written into a data centre's log table are found by `contains` and `icontains` in the
/// other, as a plain LIKE over its table finds them: the applier adds them to the text filter
/// there with the rows, so no `search rebuild` is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_lines_are_found_by_text_search() {
    let mut dcs = two_dcs(ITEMS).await;
    configure_all(&mut dcs, LoopFilterMode::Marker, "100ms");
    for dc in dcs.iter_mut() {
        let path = dc.dir.path().join("relay.toml");
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "tables = [\"app.*\"]",
            "tables = [\"app.*\", \"logstamp.logs\"]",
        );
        std::fs::write(&path, text).unwrap();
        // The log table with its partitions and its text filter's cover, as `migrate` makes it.
        let out = Command::new(env!("CARGO_BIN_EXE_logstamp"))
            .arg("--config")
            .arg(&path)
            .arg("migrate")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        dc.start_relay();
    }
    for dc in &dcs {
        dc.wait_capture_started().await;
    }
    let layout = logstamp::config::Settings::defaults().unwrap().id.layout;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let lines = [
        "GET /api/v1/orders/6878 200 in 12ms",
        "GET /api/v1/orders/6879 404",
        "disk full on /var, user=İstanbul",
        "TimeOut after 30s talking to db-2",
    ];
    let mut a = dcs[0].conn().await;
    // Over three minutes, in three transactions.
    for round in 0..3u32 {
        let mut tx = a.start_transaction(Default::default()).await.unwrap();
        for (n, line) in lines.iter().enumerate() {
            let id = layout
                .encode(now - 150 + 60 * u64::from(round), 1, n as u32)
                .unwrap();
            tx.exec_drop(
                "INSERT INTO logstamp.logs (id, level, host, service, message) \
                 VALUES (?, 'info', 'h', 's', ?)",
                (id, format!("{line} #{round}")),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
    wait_same_rows(&dcs[0], &dcs[1], "logstamp.logs").await;
    let mut b = dcs[1].conn().await;
    let relayed_filter_rows: Option<u64> = b
        .query_first(
            "SELECT COUNT(*) FROM logstamp.logstamp_text_filter \
             WHERE table_name = 'logs' AND service_id >= 2147483648",
        )
        .await
        .unwrap();
    assert!(relayed_filter_rows.unwrap() > 0);
    let config = dcs[1].dir.path().join("relay.toml");
    for needle in [
        "orders/6878",
        "ORDERS/687",
        "İstanbul",
        "timeout after",
        "#2",
        "db-3",
    ] {
        for ignore_case in [false, true] {
            let sql = if ignore_case {
                "SELECT id FROM logstamp.logs WHERE LOWER(message) LIKE LOWER(?) ORDER BY id"
            } else {
                "SELECT id FROM logstamp.logs WHERE message LIKE ? ORDER BY id"
            };
            let expected: Vec<u64> = b.exec(sql, (format!("%{needle}%"),)).await.unwrap();
            let mut search = Command::new(env!("CARGO_BIN_EXE_logstamp"));
            search
                .arg("--config")
                .arg(&config)
                .args(["query", "--since", "1h", "--grep", needle]);
            if ignore_case {
                search.arg("-i");
            }
            let out = search.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let mut got: Vec<u64> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|line| {
                    let row: serde_json::Value = serde_json::from_str(line).unwrap();
                    match &row["id"] {
                        serde_json::Value::String(id) => id.parse().unwrap(),
                        id => id.as_u64().unwrap(),
                    }
                })
                .collect();
            got.sort_unstable();
            assert_eq!(got, expected, "{needle:?} (ignore case: {ignore_case})");
        }
    }
    assert_eq!(
        b.exec::<u64, _, _>(
            "SELECT id FROM logstamp.logs WHERE message LIKE '%orders/6878%'",
            ()
        )
        .await
        .unwrap()
        .len(),
        3
    );
}
