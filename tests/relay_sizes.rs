//! Transactions and rows of any size through the relay: a source transaction is published and
//! applied part by part, whole or not at all, within the applier's memory bound; a row too large
//! for one message stops capture with an error that names it.

mod support;

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use logstamp::relay::settings::LoopFilterMode;
use support::http::{get, sample};
use support::relay::*;

const TABLE: &str = "CREATE TABLE app.t (id INT UNSIGNED NOT NULL PRIMARY KEY, v INT NOT NULL) \
                     ENGINE=InnoDB";
const BLOBS: &str = "CREATE TABLE app.blobs (id INT UNSIGNED NOT NULL PRIMARY KEY, \
                     doc LONGBLOB NOT NULL) ENGINE=InnoDB";
const MIB: u64 = 1 << 20;
/// Parts of a 64th of `apply_memory_bytes`, 32 KiB of messages: a few hundred rows each.
const SMALL_PARTS: &str = "apply_memory_bytes = 2097152\nmax_message_bytes = 65536";

/// The peak resident memory of a running relay, from the kernel (`VmHWM`), in bytes.
fn peak_memory(dc: &Dc) -> u64 {
    let pid = dc.relay.as_ref().expect("a running relay").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    kib * 1024
}

/// `CHECKSUM TABLE` of `table`: the oracle that two copies hold the same rows.
async fn checksum(dc: &Dc, table: &str) -> u64 {
    let mut conn = dc.conn().await;
    let row: Option<(String, Option<u64>)> = conn
        .query_first(format!("CHECKSUM TABLE {table}"))
        .await
        .unwrap();
    row.and_then(|(_, sum)| sum)
        .unwrap_or_else(|| panic!("no checksum of {table}"))
}

/// Samples the row count of `table` in `dc` until it reaches `whole`; every sample must be
/// `before` or `whole`: another session never sees a part of the transaction applied.
async fn wait_whole(dc: &Dc, table: &str, before: u64, whole: u64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let seen = count(dc, table).await;
        assert!(
            seen == before || seen == whole,
            "{} shows {seen} rows of {table}: part of a transaction (before {before}, whole \
             {whole})",
            dc.name
        );
        if seen == whole {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not apply the transaction",
            dc.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Messages in a data centre's topic: its end offset.
fn topic_end(dc: &Dc) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &dc.brokers)
        .create()
        .unwrap();
    let (_, end) = consumer
        .fetch_watermarks(&dc.topic(), 0, Duration::from_secs(10))
        .unwrap();
    end
}

/// One transaction inserting `rows` rows into app.t, from id `from` on.
async fn insert_rows(dc: &Dc, from: u64, rows: u64) {
    let mut conn = dc.conn().await;
    conn.query_drop(format!(
        "INSERT INTO app.t (id, v) SELECT seq + {from}, seq % 1000 FROM mysql.seq_1_to_{rows}"
    ))
    .await
    .unwrap();
}

/// What b's capture published of app.t: the changes that would loop back to a.
fn looped(b: &Dc) -> usize {
    b.published().iter().filter(|c| c.row.table == "t").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200000_row_transaction_is_applied_whole_within_the_memory_bound() {
    let memory = 16 * MIB;
    let mut dcs = two_dcs(TABLE).await;
    start_relays_with(
        &mut dcs,
        LoopFilterMode::Marker,
        "1s",
        // Messages of at most 128 KiB (its rows are small): one fetch then asks for a sixteenth
        // of the fetch queue, which decompressed stays within the bound.
        &format!("apply_memory_bytes = {memory}\nmax_message_bytes = 131072"),
    )
    .await;
    let (a, b) = (&dcs[0], &dcs[1]);
    // A small transaction first: b's relay has started all its parts when it is applied.
    insert_rows(a, 0, 10).await;
    wait_whole(b, "app.t", 0, 10).await;
    let started = peak_memory(b);

    let rows = 200_000;
    let clock = Instant::now();
    insert_rows(a, 10, rows).await;
    wait_whole(b, "app.t", 10, 10 + rows).await;
    let took = clock.elapsed();
    assert_eq!(checksum(a, "app.t").await, checksum(b, "app.t").await);
    let grew = peak_memory(b).saturating_sub(started);
    eprintln!(
        "{rows} rows applied in {took:?}; the applying relay's peak memory grew by {grew} bytes \
         (relay.apply_memory_bytes {memory})"
    );
    // What the applier holds is bounded by the setting; the process's peak also holds the
    // allocator's slack, capture's and the Kafka clients' buffers and the tables' contracts.
    // Before transactions were split, the same rows grew it by 679 MB.
    assert!(
        grew < 2 * memory,
        "the applying relay's peak memory grew by {grew} bytes, more than twice \
         relay.apply_memory_bytes ({memory})"
    );
    // Published in several parts, and applied as one local transaction, once.
    assert!(topic_end(a) > 10 + rows as i64 - 1);
    assert_eq!(b.applied("a").await, (2, 10 + rows));
    // Every part applied gives its bytes back (just after the commit is seen).
    let address = b.telemetry().await;
    wait_until("b's applier holds nothing", || async {
        let (_, metrics) = get(&address, "/metrics");
        match sample(
            &metrics,
            "logstamp_relay_apply_held_bytes{dc=\"b\",remote=\"a\"}",
        ) {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?} held")),
        }
    })
    .await;

    // The marker: b's capture read the 200,000 rows b applied and sent none back.
    b.wait_capture_caught_up().await;
    assert_eq!(looped(b), 0);
    assert_eq!(count(a, "app.t").await, 10 + rows);
}

/// A transaction of several parts applied in `mode`: whole, once, and not sent back.
async fn a_split_transaction_does_not_loop(mode: LoopFilterMode) {
    let mut dcs = two_dcs(TABLE).await;
    start_relays_with(&mut dcs, mode, "1s", SMALL_PARTS).await;
    let (a, b) = (&dcs[0], &dcs[1]);
    let rows = 20_000;
    insert_rows(a, 0, rows).await;
    wait_whole(b, "app.t", 0, rows).await;
    assert_eq!(checksum(a, "app.t").await, checksum(b, "app.t").await);
    assert_eq!(b.applied("a").await, (1, rows));
    // Written in b after the applied transaction: b's capture has read past it when this one
    // arrives in a.
    insert_rows(b, rows, 1).await;
    wait_whole(a, "app.t", rows, rows + 1).await;
    assert_eq!(looped(b), 1, "b sent back what it applied");
    assert_eq!(a.applied("b").await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_transaction_does_not_loop_with_the_skip_replication_filter() {
    a_split_transaction_does_not_loop(LoopFilterMode::SkipReplication).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_transaction_does_not_loop_with_the_cache_filter() {
    a_split_transaction_does_not_loop(LoopFilterMode::Cache).await;
}

/// With the cache filter, what a trigger in b writes while b applies a split transaction from a
/// is b's own change: b's capture sends it on, in one transaction, and none of the applied rows,
/// whichever part of the transaction they are in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_change_in_a_split_applied_transaction_is_sent_on_with_the_cache_filter() {
    let seen = "CREATE TABLE app.seen (id INT UNSIGNED NOT NULL PRIMARY KEY) ENGINE=InnoDB";
    let mut dcs = vec![
        Dc::new("a", 1, &[TABLE, seen]).await,
        Dc::new("b", 2, &[TABLE, seen]).await,
    ];
    dcs[1]
        .conn()
        .await
        .query_drop(
            "CREATE TRIGGER app.every_thousandth AFTER INSERT ON app.t FOR EACH ROW \
             INSERT INTO app.seen (id) SELECT NEW.id FROM DUAL WHERE NEW.id % 1000 = 0",
        )
        .await
        .unwrap();
    start_relays_with(&mut dcs, LoopFilterMode::Cache, "1s", SMALL_PARTS).await;
    let (a, b) = (&dcs[0], &dcs[1]);
    let rows = 20_000;
    insert_rows(a, 0, rows).await;
    wait_whole(b, "app.t", 0, rows).await;
    assert_eq!(count(b, "app.seen").await, rows / 1000);
    // The trigger's rows come back to a, once, as one transaction of b's; the applied ones
    // do not.
    wait_whole(a, "app.seen", 0, rows / 1000).await;
    assert_eq!(checksum(a, "app.seen").await, checksum(b, "app.seen").await);
    b.wait_capture_caught_up().await;
    assert_eq!(looped(b), 0, "b sent back what it applied");
    let sent = b.published();
    assert_eq!(sent.len() as u64, rows / 1000);
    assert!(sent.iter().all(|c| c.txn.seq == sent[0].txn.seq));
    assert!(sent.last().is_some_and(|c| c.txn.is_last()));
    assert_eq!(a.applied("b").await, (1, rows / 1000));
    assert_eq!(count(a, "app.t").await, rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_killed_in_the_middle_of_a_transaction_apply_it_once() {
    let mut dcs = two_dcs(TABLE).await;
    start_relays_with(&mut dcs, LoopFilterMode::Marker, "1s", SMALL_PARTS).await;
    let rows = 20_000;
    insert_rows(&dcs[0], 0, rows).await;
    // a's capture killed while it publishes: its checkpoint is before the transaction, so it
    // publishes it again from its first message.
    wait_until("a publishes part of the transaction", || async {
        match topic_end(&dcs[0]) {
            0 => Err("nothing published".to_string()),
            n if n >= rows as i64 => Err(format!("all {n} published: too late")),
            _ => Ok(()),
        }
    })
    .await;
    dcs[0].kill_relay();
    let cut_at = topic_end(&dcs[0]);
    dcs[0].start_relay();
    // b's applier killed with part of it applied in its open local transaction: that rolls
    // back, and applying starts again from the transaction's first message.
    let b = &dcs[1];
    wait_until("b applies part of the transaction", || async {
        let mut conn = b.conn().await;
        let modified: Option<u64> = conn
            .query_first(
                "SELECT COALESCE(MAX(trx_rows_modified), 0) FROM information_schema.INNODB_TRX",
            )
            .await
            .unwrap();
        match modified {
            Some(n) if n > 0 => Ok(()),
            _ => Err("no open transaction".to_string()),
        }
    })
    .await;
    assert_eq!(count(b, "app.t").await, 0);
    dcs[1].kill_relay();
    dcs[1].start_relay();
    let (a, b) = (&dcs[0], &dcs[1]);
    wait_whole(b, "app.t", 0, rows).await;
    assert_eq!(checksum(a, "app.t").await, checksum(b, "app.t").await);
    // The topic holds the cut-off start and the whole transaction after it; b applied it once.
    assert!(cut_at < rows as i64, "the kill came after the last message");
    assert!(topic_end(a) >= cut_at + rows as i64);
    assert_eq!(b.applied("a").await, (1, rows));
    b.wait_capture_caught_up().await;
    assert_eq!(looped(b), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_larger_than_a_message_stops_capture_until_the_limit_is_raised() {
    let mut dcs = two_dcs(BLOBS).await;
    start_relays_with(
        &mut dcs,
        LoopFilterMode::Marker,
        "1s",
        "max_message_bytes = 1048576",
    )
    .await;
    let b = dcs.pop().unwrap();
    let mut a = dcs.pop().unwrap();
    let mut conn = a.conn().await;
    conn.query_drop("INSERT INTO app.blobs VALUES (1, 'small')")
        .await
        .unwrap();
    // 4 MiB of bytes, every one of them possible. They repeat every KiB: compressed, the
    // message fits the broker's message.max.bytes (1 MiB by default).
    conn.query_drop("INSERT INTO app.blobs VALUES (7, REPEAT(RANDOM_BYTES(1024), 4096))")
        .await
        .unwrap();
    wait_whole(&b, "app.blobs", 0, 1).await;
    // Capture stops for good, here and at every start: skipping the row would lose it.
    let exited = wait_exit(&mut a).await;
    assert!(!exited.success(), "{}", a.log());
    let (code, stderr) = a.run_until_exit().await;
    assert_ne!(code, Some(0), "{stderr}");
    for part in [
        "the insert of app.blobs key {\"id\":7} in transaction 0-1-",
        "more than relay.max_message_bytes (1048576)",
        "raise relay.max_message_bytes above",
        "the brokers' message.max.bytes",
        "relay.apply_memory_bytes",
    ] {
        assert!(stderr.contains(part), "{part:?} not in {stderr}");
    }
    assert_eq!(count(&b, "app.blobs").await, 1);

    // Raised here, and the applier's memory in b with it, the row goes through whole.
    let raised = "max_message_bytes = 8388608\napply_memory_bytes = 67108864";
    let mut b = b;
    b.stop_relay().await;
    for (dc, remote) in [(&a, &b), (&b, &a)] {
        dc.configure(
            &[(&remote.name, remote.brokers.clone())],
            LoopFilterMode::Marker,
            "1s",
        );
        add_relay_settings(dc, raised);
    }
    a.start_relay();
    b.start_relay();
    wait_whole(&b, "app.blobs", 1, 2).await;
    let mut conn = b.conn().await;
    let size: Option<u64> = conn
        .query_first("SELECT LENGTH(doc) FROM app.blobs WHERE id = 7")
        .await
        .unwrap();
    assert_eq!(size, Some(4 * MIB));
    assert_eq!(
        checksum(&a, "app.blobs").await,
        checksum(&b, "app.blobs").await
    );
}

/// Waits until the relay of `dc` exits by itself.
async fn wait_exit(dc: &mut Dc) -> std::process::ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    let mut child = dc.relay.take().expect("a running relay");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the relay of {} runs on",
            dc.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
