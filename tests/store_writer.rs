//! The store writer against a real MariaDB: exactly-once offsets, races between writers, failures
//! inside the transaction, exact round trips of every type through every insert method, hostile
//! input, and rows the database refuses.

mod support;

use std::time::{Duration, Instant};

use chrono::{NaiveDate, NaiveDateTime};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use serde_json::json;

use logstamp::config::Settings;
use logstamp::id::Layout;
use logstamp::mysql::SqlValue;
use logstamp::mysql::{self, DbError, MysqlUrl};
use logstamp::store::rollup_plan::{Bucket, RollupPlan, RollupSettings, SourceTable};
use logstamp::store::schema::{ColumnSpec, ColumnType, create_log_table_sql};
use logstamp::store::settings::InsertMethod;
use logstamp::store::{
    Batch, Committed, DeadLetter, PartitionPlan, Period, Row, WriteOutcome, Writer, rollup,
};
use logstamp::time::Zone;
use logstamp::transform::Mapper;
use support::TestDb;

const GROUP: &str = "g";
const TOPIC: &str = "t";

// ---------------------------------------------------------------------------------------------
// Set-up
// ---------------------------------------------------------------------------------------------

/// The bookkeeping tables from the migrations, and the log table from the settings with
/// partitions around the test's fixed dates.
async fn create_store_tables(conn: &mut Conn, settings: &Settings) {
    logstamp::store::migrate::apply(conn, &logstamp::store::migrate::builtin().unwrap())
        .await
        .unwrap();
    let day = NaiveDate::from_ymd_opt(2024, 1, 1).unwrap();
    let plan = PartitionPlan::new(
        day,
        day.succ_opt().unwrap(),
        Period::Day,
        &Zone::UTC,
        &Layout::new(10, 0).unwrap(),
    )
    .unwrap();
    conn.query_drop(create_log_table_sql(
        &settings.store.table,
        &settings.store.columns,
        settings.store.payload.kept(),
        &plan,
    ))
    .await
    .unwrap();
}

fn column(name: &str, column_type: ColumnType, length: Option<u32>) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        pointer: format!("/{name}"),
        column_type,
        length,
        truncate: false,
    }
}

/// A column of every type, each read from the field of its name.
fn every_type() -> Vec<ColumnSpec> {
    vec![
        column("s", ColumnType::String, Some(16)),
        column("t", ColumnType::Text, None),
        column("i", ColumnType::Int, None),
        column("u", ColumnType::Uint, None),
        column("d", ColumnType::Double, None),
        column("b", ColumnType::Bool, None),
        column("at", ColumnType::Datetime, None),
        column("j", ColumnType::Json, None),
    ]
}

struct Fixture {
    db: TestDb,
    settings: Settings,
    writer: Writer,
    mapper: Mapper,
}

impl Fixture {
    async fn new(hint: &str, method: InsertMethod) -> Fixture {
        Fixture::with(hint, method, &[]).await
    }

    async fn with(hint: &str, method: InsertMethod, overrides: &[(&str, &str)]) -> Fixture {
        Fixture::with_rollups(hint, method, overrides, &[]).await
    }

    /// With rollups over the log table, their tables created.
    async fn with_rollups(
        hint: &str,
        method: InsertMethod,
        overrides: &[(&str, &str)],
        rollups: &[RollupSettings],
    ) -> Fixture {
        let db = TestDb::create(hint).await;
        let method_name = serde_json::to_value(method).unwrap();
        let mut all = vec![
            ("store.insert_method", method_name.as_str().unwrap()),
            ("store.give_up_after", "30s"),
            // The tests' IDs are of any time, most long past.
            ("store.commit_window", "off"),
        ];
        all.extend_from_slice(overrides);
        let mut settings = db.settings(&all);
        settings.store.columns = every_type();
        let source = SourceTable {
            name: &settings.store.table,
            columns: &settings.store.columns,
            event_time: "",
        };
        settings.rollup_plans = rollups
            .iter()
            .map(|r| RollupPlan::compile(r, std::slice::from_ref(&source)).unwrap())
            .collect();
        mysql::create_database(&db.mysql_url()).await.unwrap();
        let mut conn = db.conn().await;
        create_store_tables(&mut conn, &settings).await;
        for plan in &settings.rollup_plans {
            rollup::ensure_table(&mut conn, plan, true).await.unwrap();
        }
        let writer = support::writer(&settings);
        let mapper = Mapper::new(&settings.store.columns);
        Fixture {
            db,
            settings,
            writer,
            mapper,
        }
    }

    /// Messages (ID, offset, text) as a batch of partition `partition` from `start` to `next`:
    /// those that map become rows, the rest dead letters.
    fn batch(
        &self,
        partition: i32,
        start: i64,
        next: i64,
        messages: &[(u64, i64, &[u8])],
    ) -> Batch {
        let mut rows = Vec::new();
        let mut dead_letters = Vec::new();
        for &(id, offset, message) in messages {
            match self.mapper.map(message) {
                Ok(mapped) => rows.push(Row { id, offset, mapped }),
                Err(e) => dead_letters.push(DeadLetter {
                    offset,
                    record: None,
                    reason: e.to_string(),
                    raw: message.to_vec(),
                }),
            }
        }
        Batch {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            partition,
            start_offset: start,
            next_offset: next,
            rows,
            dead_letters,
        }
    }

    async fn conn(&self) -> Conn {
        self.db.conn().await
    }

    /// Every stored row as (id, values as the mapping made them, payload), by ID.
    async fn stored_rows(&self) -> Vec<(u64, Vec<SqlValue>, Option<String>)> {
        let rows: Vec<mysql_async::Row> = self
            .conn()
            .await
            .exec(
                "SELECT id, s, t, i, u, d, b, at, j, payload FROM logs ORDER BY id",
                (),
            )
            .await
            .unwrap();
        rows.into_iter()
            .map(|row| {
                let values = row.unwrap();
                let id = match &values[0] {
                    Value::UInt(id) => *id,
                    Value::Int(id) => u64::try_from(*id).unwrap(),
                    other => panic!("id read as {other:?}"),
                };
                let mapped = every_type()
                    .iter()
                    .zip(&values[1..9])
                    .map(|(c, v)| as_sql_value(v, c.column_type))
                    .collect();
                let payload = match &values[9] {
                    Value::NULL => None,
                    Value::Bytes(b) => Some(String::from_utf8(b.clone()).unwrap()),
                    other => panic!("payload read as {other:?}"),
                };
                (id, mapped, payload)
            })
            .collect()
    }

    async fn stored_ids(&self) -> Vec<u64> {
        self.conn()
            .await
            .query("SELECT id FROM logs ORDER BY id")
            .await
            .unwrap()
    }

    /// Dead letters as (partition, offset, reason, raw), by offset.
    async fn dead_letters(&self) -> Vec<(i32, i64, String, Option<Vec<u8>>)> {
        self.conn()
            .await
            .query(
                "SELECT kafka_partition, kafka_offset, reason, raw FROM dead_letters \
                 ORDER BY kafka_partition, kafka_offset",
            )
            .await
            .unwrap()
    }

    async fn stored_offset(&self, partition: i32) -> Option<i64> {
        self.writer
            .stored_offsets(GROUP, &[(TOPIC, partition)])
            .await
            .unwrap()[0]
    }
}

/// A value read back in binary protocol, in the mapping's terms.
fn as_sql_value(value: &Value, column_type: ColumnType) -> SqlValue {
    let text = |b: &Vec<u8>| String::from_utf8(b.clone()).unwrap();
    match (value, column_type) {
        (Value::NULL, _) => SqlValue::Null,
        (Value::Bytes(b), ColumnType::String | ColumnType::Text) => SqlValue::Text(text(b)),
        (Value::Bytes(b), ColumnType::Json) => SqlValue::Json(text(b)),
        (Value::Int(n), ColumnType::Int) => SqlValue::Int(*n),
        (Value::UInt(n), ColumnType::Uint) => SqlValue::Uint(*n),
        (Value::Int(n), ColumnType::Uint) => SqlValue::Uint(u64::try_from(*n).unwrap()),
        (Value::Double(f), ColumnType::Double) => SqlValue::Double(*f),
        (Value::Int(n), ColumnType::Bool) => SqlValue::Bool(*n != 0),
        (Value::Date(y, mo, d, h, mi, s, us), ColumnType::Datetime) => SqlValue::Datetime(
            NaiveDate::from_ymd_opt(i32::from(*y), u32::from(*mo), u32::from(*d))
                .unwrap()
                .and_hms_micro_opt(u32::from(*h), u32::from(*mi), u32::from(*s), *us)
                .unwrap(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

fn committed(outcome: WriteOutcome) -> Committed {
    match outcome {
        WriteOutcome::Committed(c) => c,
        other => panic!("not committed: {other:?}"),
    }
}

fn message(value: serde_json::Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// A usual log message with `n` in it.
fn log_message(n: i64) -> Vec<u8> {
    message(json!({
        "s": format!("host-{}", n % 7),
        "t": format!("request {n} served"),
        "i": n,
        "u": n as u64 * 3,
        "d": n as f64 / 4.0,
        "b": n % 2 == 0,
        "at": 1_704_067_200_000i64 + n,
        "j": {"n": n},
    }))
}

/// Messages with IDs `first_id..` at offsets `first_offset..`.
fn log_messages(first_id: u64, first_offset: i64, count: usize) -> Vec<(u64, i64, Vec<u8>)> {
    (0..count)
        .map(|k| {
            let offset = first_offset + k as i64;
            (first_id + k as u64, offset, log_message(offset))
        })
        .collect()
}

fn borrowed(messages: &[(u64, i64, Vec<u8>)]) -> Vec<(u64, i64, &[u8])> {
    messages
        .iter()
        .map(|(id, offset, m)| (*id, *offset, m.as_slice()))
        .collect()
}

/// Runs a test function once per insert method, each as its own test.
macro_rules! for_each_method {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn text() {
                super::$name(InsertMethod::Text).await
            }

            #[tokio::test]
            async fn prepared() {
                super::$name(InsertMethod::Prepared).await
            }

            #[tokio::test]
            async fn batch() {
                super::$name(InsertMethod::Batch).await
            }

            #[tokio::test]
            async fn load_data() {
                super::$name(InsertMethod::LoadData).await
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Offsets: exactly once
// ---------------------------------------------------------------------------------------------

async fn the_same_batch_twice_is_written_once(method: InsertMethod) {
    let f = Fixture::new("once", method).await;
    assert_eq!(f.stored_offset(0).await, None);
    let messages = log_messages(1000, 0, 50);
    let batch = f.batch(0, 0, 50, &borrowed(&messages));

    let first = committed(f.writer.write(&batch).await.unwrap());
    assert_eq!(
        first,
        Committed {
            rows: 50,
            dead_letters: 0,
            refused: vec![]
        }
    );
    assert_eq!(f.stored_offset(0).await, Some(50));

    let second = f.writer.write(&batch).await.unwrap();
    assert_eq!(second, WriteOutcome::OffsetMoved { stored: Some(50) });
    assert_eq!(f.stored_ids().await, (1000..1050).collect::<Vec<u64>>());
    assert_eq!(f.stored_offset(0).await, Some(50));

    // The next batch continues from the stored offset; a stale start is refused.
    let next = log_messages(2000, 50, 10);
    let stale = f.batch(0, 40, 60, &borrowed(&next));
    assert_eq!(
        f.writer.write(&stale).await.unwrap(),
        WriteOutcome::OffsetMoved { stored: Some(50) }
    );
    let fresh = f.batch(0, 50, 60, &borrowed(&next));
    assert_eq!(committed(f.writer.write(&fresh).await.unwrap()).rows, 10);
    assert_eq!(f.stored_offset(0).await, Some(60));
    assert_eq!(f.stored_ids().await.len(), 60);
}
for_each_method!(the_same_batch_twice_is_written_once);

/// With `client_found_rows=true` in `mysql.url`, MySQL would count the offset row an upsert
/// finds unchanged as affected, which the offset claim reads as its own. The writer's sessions
/// do without it: a stale owner (here one that read again from offset 0 and stamped new IDs)
/// still commits nothing.
#[tokio::test]
async fn client_found_rows_in_the_url_does_not_let_a_stale_owner_commit() {
    let f = Fixture::new("found_rows", InsertMethod::Prepared).await;
    let mut settings = f.settings.clone();
    settings.mysql.url =
        MysqlUrl::try_from(format!("{}?client_found_rows=true", f.db.url)).unwrap();
    let writer = support::writer(&settings);
    let first = log_messages(1000, 0, 10);
    committed(
        writer
            .write(&f.batch(0, 0, 10, &borrowed(&first)))
            .await
            .unwrap(),
    );
    let stale = log_messages(2000, 0, 7);
    assert_eq!(
        writer
            .write(&f.batch(0, 0, 7, &borrowed(&stale)))
            .await
            .unwrap(),
        WriteOutcome::OffsetMoved { stored: Some(10) }
    );
    writer.close().await.unwrap();
    let (rows, low, high, letters, offset): (u64, u64, u64, u64, i64) = f
        .conn()
        .await
        .query_first(
            "SELECT (SELECT COUNT(*) FROM logs), (SELECT MIN(id) FROM logs), \
             (SELECT MAX(id) FROM logs), (SELECT COUNT(*) FROM dead_letters), \
             (SELECT next_offset FROM ingest_offsets)",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((rows, low, high, letters, offset), (10, 1000, 1009, 0, 10));
}

/// A client-side `max_allowed_packet` in `mysql.url` below the server's bounds the statements
/// too: a batch larger than it is sent in smaller statements, not refused by the driver.
async fn a_lower_max_allowed_packet_in_the_url_splits_statements(method: InsertMethod) {
    let f = Fixture::with("url_packet", method, &[("store.give_up_after", "2s")]).await;
    let mut settings = f.settings.clone();
    settings.mysql.url =
        MysqlUrl::try_from(format!("{}?max_allowed_packet=262144", f.db.url)).unwrap();
    let writer = support::writer(&settings);
    let messages: Vec<(u64, i64, Vec<u8>)> = (0..300)
        .map(|k| {
            (
                1 + k as u64,
                k,
                message(json!({"t": "x".repeat(2_000), "i": k})),
            )
        })
        .collect();
    let done = committed(
        writer
            .write(&f.batch(0, 0, 300, &borrowed(&messages)))
            .await
            .unwrap(),
    );
    writer.close().await.unwrap();
    assert_eq!((done.rows, done.dead_letters), (300, 0));
    assert_eq!(f.stored_ids().await, (1..=300).collect::<Vec<u64>>());
}
for_each_method!(a_lower_max_allowed_packet_in_the_url_splits_statements);

#[tokio::test]
async fn offsets_are_kept_per_group_topic_and_partition() {
    let f = Fixture::new("offsetkeys", InsertMethod::Text).await;
    let messages = log_messages(1, 0, 3);
    for (partition, topic, group) in [(0, "t", "g"), (1, "t", "g"), (0, "u", "g"), (0, "t", "h")] {
        let mut batch = f.batch(partition, 0, 3, &borrowed(&messages));
        batch.topic = topic.into();
        batch.consumer_group = group.into();
        for row in &mut batch.rows {
            row.id += 100 * partition as u64
                + 1000 * u64::from(topic == "u")
                + 10_000 * u64::from(group == "h");
        }
        committed(f.writer.write(&batch).await.unwrap());
    }
    assert_eq!(
        f.writer
            .stored_offsets("g", &[("t", 1), ("t", 9)])
            .await
            .unwrap(),
        [Some(3), None]
    );
    assert_eq!(
        f.writer
            .stored_offsets("h", &[("u", 0), ("t", 0)])
            .await
            .unwrap(),
        [None, Some(3)]
    );
    assert_eq!(f.stored_ids().await.len(), 12);
}

#[tokio::test]
async fn two_writers_racing_for_one_partition_one_wins() {
    let f = Fixture::new("race", InsertMethod::Text).await;
    let other = support::writer(&f.settings);
    for partition in 0..8 {
        // Both start from the same offset: first on a partition with no stored offset yet, then
        // from the offset the winner stored.
        let mut start = 0;
        for round in 0..2u64 {
            let base = 1_000_000 * (partition as u64 + 1) + 10_000 * round;
            let a_messages = log_messages(base, start, 20);
            let b_messages = log_messages(base + 5_000, start, 20);
            let a = f.batch(partition, start, start + 20, &borrowed(&a_messages));
            let b = f.batch(partition, start, start + 20, &borrowed(&b_messages));
            let (ra, rb) = tokio::join!(f.writer.write(&a), other.write(&b));
            let (ra, rb) = (ra.unwrap(), rb.unwrap());
            let a_won = matches!(ra, WriteOutcome::Committed(_));
            let b_won = matches!(rb, WriteOutcome::Committed(_));
            assert!(a_won != b_won, "exactly one wins: {ra:?} {rb:?}");
            let loser = if a_won { rb } else { ra };
            assert_eq!(
                loser,
                WriteOutcome::OffsetMoved {
                    stored: Some(start + 20)
                }
            );
            start += 20;
        }
    }
    // Only the winners' rows: 8 partitions, 2 rounds, 20 rows.
    let ids = f.stored_ids().await;
    assert_eq!(ids.len(), 8 * 2 * 20);
    for partition in 0..8 {
        assert_eq!(f.stored_offset(partition).await, Some(40));
    }
    other.close().await.unwrap();
}

#[tokio::test]
async fn batches_of_different_partitions_are_written_at_once() {
    let f = Fixture::with(
        "parallel",
        InsertMethod::Text,
        &[("store.concurrency", "4")],
    )
    .await;
    let batches: Vec<Batch> = (0..16)
        .map(|p| {
            let messages = log_messages(100_000 * (p as u64 + 1), 0, 100);
            f.batch(p, 0, 100, &borrowed(&messages))
        })
        .collect();
    let mut tasks = Vec::new();
    for batch in batches {
        let writer = f.writer.clone();
        tasks.push(tokio::spawn(async move { writer.write(&batch).await }));
    }
    for task in tasks {
        assert_eq!(committed(task.await.unwrap().unwrap()).rows, 100);
    }
    assert_eq!(f.stored_ids().await.len(), 1600);
}

#[tokio::test]
async fn a_batch_that_does_not_advance_is_refused() {
    let f = Fixture::new("refusebatch", InsertMethod::Text).await;
    let messages = log_messages(1, 5, 1);
    let batch = f.batch(0, 5, 5, &borrowed(&messages));
    let e = f.writer.write(&batch).await.unwrap_err();
    assert!(matches!(e, DbError::Invariant(_)), "{e}");
    let outside = f.batch(0, 6, 9, &borrowed(&messages));
    let e = f.writer.write(&outside).await.unwrap_err();
    assert!(e.to_string().contains("outside the batch"), "{e}");
    assert_eq!(f.stored_offset(0).await, None);
}

// ---------------------------------------------------------------------------------------------
// Failures inside the transaction
// ---------------------------------------------------------------------------------------------

/// A trigger fails the transaction after the offset and the rows are written, when the dead
/// letters go in: nothing of the batch may be visible, and the same batch succeeds once the
/// failure is gone.
async fn a_failure_after_rows_and_offset_leaves_nothing(method: InsertMethod) {
    let f = Fixture::new("failafter", method).await;
    let mut conn = f.conn().await;
    conn.query_drop(
        "CREATE TRIGGER fail_dead_letters BEFORE INSERT ON dead_letters FOR EACH ROW \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure'",
    )
    .await
    .unwrap();
    let mut messages = log_messages(7, 0, 20);
    messages.push((99, 20, b"not json".to_vec()));
    let batch = f.batch(0, 0, 21, &borrowed(&messages));
    assert_eq!((batch.rows.len(), batch.dead_letters.len()), (20, 1));

    let e = f.writer.write(&batch).await.unwrap_err();
    assert!(e.to_string().contains("injected failure"), "{e}");
    assert!(!e.is_transient());
    assert_eq!(f.stored_ids().await, Vec::<u64>::new());
    assert_eq!(f.stored_offset(0).await, None);
    assert!(f.dead_letters().await.is_empty());

    conn.query_drop("DROP TRIGGER fail_dead_letters")
        .await
        .unwrap();
    let done = committed(f.writer.write(&batch).await.unwrap());
    assert_eq!((done.rows, done.dead_letters), (20, 1));
    assert_eq!(f.stored_offset(0).await, Some(21));
}
for_each_method!(a_failure_after_rows_and_offset_leaves_nothing);

/// A trigger on the log table fails a row for a reason that is not the row's data: the whole
/// batch fails and the offset it had already moved is rolled back.
#[tokio::test]
async fn a_failure_between_offset_and_rows_leaves_nothing() {
    let f = Fixture::new("failbetween", InsertMethod::Text).await;
    f.conn()
        .await
        .query_drop(
            "CREATE TRIGGER fail_rows BEFORE INSERT ON logs FOR EACH ROW \
             IF NEW.id = 12 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected'; END IF",
        )
        .await
        .unwrap();
    let first = log_messages(1, 0, 5);
    committed(
        f.writer
            .write(&f.batch(0, 0, 5, &borrowed(&first)))
            .await
            .unwrap(),
    );
    let second = log_messages(10, 5, 5);
    let e = f
        .writer
        .write(&f.batch(0, 5, 10, &borrowed(&second)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("injected"), "{e}");
    assert_eq!(f.stored_offset(0).await, Some(5));
    assert_eq!(f.stored_ids().await, vec![1, 2, 3, 4, 5]);
}

/// The writer's connection is killed while its transaction is open (offset claimed, rows being
/// inserted): the writer retries on a new connection and the batch ends up stored once.
async fn a_connection_killed_mid_transaction_is_retried_once(method: InsertMethod) {
    let f = Fixture::new("killed", method).await;
    let lock = format!("hook_{}", f.db.name);
    let mut control = f.conn().await;
    control
        .query_drop(format!(
            "CREATE TRIGGER hold_rows BEFORE INSERT ON logs FOR EACH ROW \
             IF NEW.id = 1003 THEN DO GET_LOCK('{lock}', 60); DO RELEASE_LOCK('{lock}'); END IF"
        ))
        .await
        .unwrap();
    let held: Option<i64> = control
        .query_first(format!("SELECT GET_LOCK('{lock}', 0)"))
        .await
        .unwrap();
    assert_eq!(held, Some(1));

    let messages = log_messages(1000, 0, 10);
    let batch = f.batch(0, 0, 10, &borrowed(&messages));
    let writer = f.writer.clone();
    let write = tokio::spawn(async move { writer.write(&batch).await });

    // Wait for the writer to be inside its transaction, held by the trigger.
    let waiting = Instant::now();
    let victim: u64 = loop {
        let found: Option<u64> = control
            .exec_first(
                "SELECT ID FROM information_schema.PROCESSLIST \
                 WHERE DB = ? AND STATE = 'User lock'",
                (f.db.name.as_str(),),
            )
            .await
            .unwrap();
        if let Some(id) = found {
            break id;
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "the writer never got to the rows"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    control
        .query_drop(format!("KILL CONNECTION {victim}"))
        .await
        .unwrap();
    control
        .query_drop(format!("DO RELEASE_LOCK('{lock}')"))
        .await
        .unwrap();

    let done = committed(write.await.unwrap().unwrap());
    assert_eq!(done.rows, 10);
    assert_eq!(f.stored_ids().await, (1000..1010).collect::<Vec<u64>>());
    assert_eq!(f.stored_offset(0).await, Some(10));
}
for_each_method!(a_connection_killed_mid_transaction_is_retried_once);

#[tokio::test]
async fn an_unreachable_server_is_given_up_after_the_setting() {
    let db = TestDb::create("giveup").await;
    let mut settings = db.settings(&[("store.give_up_after", "1s")]);
    settings.mysql.url = "mysql://root@127.0.0.1:1/nowhere"
        .to_string()
        .try_into()
        .unwrap();
    let writer = support::writer(&settings);
    let mapper = Mapper::new(&settings.store.columns);
    let batch = Batch {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        partition: 0,
        start_offset: 0,
        next_offset: 1,
        rows: vec![Row {
            id: 1,
            offset: 0,
            mapped: mapper.map(b"{}").unwrap(),
        }],
        dead_letters: vec![],
    };
    let started = Instant::now();
    let e = writer.write(&batch).await.unwrap_err();
    let took = started.elapsed();
    assert!(e.is_transient(), "{e}");
    assert!(took >= Duration::from_secs(1), "gave up after {took:?}");
    assert!(took < Duration::from_secs(10), "gave up after {took:?}");
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

fn at(text: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap()
}

/// Every type, at its edges, through every method: what the mapping made is what is stored.
async fn every_type_round_trips_exactly(method: InsertMethod) {
    let f = Fixture::new("roundtrip", method).await;
    let messages: Vec<serde_json::Value> = vec![
        json!({}),
        json!({"s": "", "t": "", "i": 0, "u": 0, "d": 0.0, "b": false, "at": 0, "j": {}}),
        json!({
            "s": "NULL", "t": "\\N", "i": i64::MIN, "u": u64::MAX, "d": f64::MAX, "b": true,
            "at": "1000-01-01T00:00:00Z", "j": [null, true, "\\N"],
        }),
        json!({
            "s": "tab\there\nnl\r\0", "t": "'\"\\`;--", "i": i64::MAX, "u": 1u64 << 63,
            "d": f64::MIN_POSITIVE, "b": 1, "at": "9999-12-31T23:59:59.999999Z",
            "j": "\u{0}\t😀",
        }),
        json!({
            "s": "😀".repeat(16), "t": "x".repeat(100_000), "i": "-42", "u": "18446744073709551615",
            "d": 5e-324, "b": "false", "at": 1_700_000_000_123u64, "j": 1.5,
        }),
        json!({"d": -1.0e-300, "at": "2024-02-29T23:59:59.5-01:00", "s": "\u{1a}\u{8}\u{7f}"}),
    ];
    let texts: Vec<Vec<u8>> = messages.iter().map(|m| message(m.clone())).collect();
    let ids = [
        u64::MAX,
        1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        1 << 32,
        12345,
    ];
    let input: Vec<(u64, i64, &[u8])> = texts
        .iter()
        .enumerate()
        .map(|(k, m)| (ids[k], k as i64, m.as_slice()))
        .collect();
    let batch = f.batch(3, 0, input.len() as i64, &input);
    assert!(batch.dead_letters.is_empty(), "{:?}", batch.dead_letters);
    assert_eq!(committed(f.writer.write(&batch).await.unwrap()).rows, 6);

    let mut expected: Vec<(u64, Vec<SqlValue>, Option<String>)> = batch
        .rows
        .iter()
        .map(|r| {
            (
                r.id,
                r.mapped.values.clone(),
                Some(r.mapped.document.clone()),
            )
        })
        .collect();
    expected.sort_by_key(|(id, _, _)| *id);
    assert_eq!(f.stored_rows().await, expected);

    // Spot checks against the mapping itself, for the values with edges of their own.
    let stored = f.stored_rows().await;
    let top = stored.iter().find(|(id, _, _)| *id == u64::MAX).unwrap();
    assert_eq!(top.1[0], SqlValue::Null);
    let edge = stored.iter().find(|(id, _, _)| *id == 1 << 63).unwrap();
    assert_eq!(edge.1[6], SqlValue::Datetime(at("9999-12-31 23:59:59.999")));
    let first = stored
        .iter()
        .find(|(id, _, _)| *id == i64::MAX as u64)
        .unwrap();
    assert_eq!(first.1[3], SqlValue::Uint(u64::MAX));
    assert_eq!(first.1[6], SqlValue::Datetime(at("1000-01-01 00:00:00")));
}
for_each_method!(every_type_round_trips_exactly);

async fn ids_above_i64_max_are_stored_exactly(method: InsertMethod) {
    let f = Fixture::new("bigids", method).await;
    let ids: Vec<u64> = vec![
        i64::MAX as u64 - 1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        (1 << 63) + (1 << 32) + 7,
        u64::MAX - 1,
        u64::MAX,
    ];
    let texts: Vec<Vec<u8>> = ids.iter().map(|id| message(json!({"u": id}))).collect();
    let input: Vec<(u64, i64, &[u8])> = ids
        .iter()
        .zip(&texts)
        .enumerate()
        .map(|(k, (id, m))| (*id, k as i64, m.as_slice()))
        .collect();
    committed(f.writer.write(&f.batch(0, 0, 6, &input)).await.unwrap());
    assert_eq!(f.stored_ids().await, ids);
    // As text too, straight from the server, so no client conversion can hide a sign.
    let as_text: Vec<String> = f
        .conn()
        .await
        .query("SELECT CAST(id AS CHAR) FROM logs ORDER BY id")
        .await
        .unwrap();
    assert_eq!(as_text, ids.iter().map(u64::to_string).collect::<Vec<_>>());
    let matching: Option<u64> = f
        .conn()
        .await
        .query_first("SELECT COUNT(*) FROM logs WHERE id = u")
        .await
        .unwrap();
    assert_eq!(matching, Some(6));
}
for_each_method!(ids_above_i64_max_are_stored_exactly);

/// Hostile messages: each is stored exactly or dead-lettered with a reason, and the writer goes
/// on (no SQL error, no stop).
async fn hostile_messages_are_stored_exactly_or_dead_lettered(method: InsertMethod) {
    let f = Fixture::new("hostile", method).await;
    let huge = "h".repeat(2 << 20);
    let stored_ok: Vec<Vec<u8>> = vec![
        message(json!({"s": "😀🚀\u{10FFFF}", "t": "nul \u{0} byte"})),
        message(json!({"s": "x';DROP TABLE t", "t": "'; DROP TABLE logs; -- \\'\\\\\"`"})),
        message(json!({"'; DROP TABLE logs; --": 1, "s\"": "k", "`": {"a`b": "'"}})),
        message(json!({"t": huge})),
        br#"{"t":"\u0000\t\n\r\\\"","j":{"\u0000":"\ud83d\ude00"}}"#.to_vec(),
        b"  {\"s\" : \"spaced\" }  ".to_vec(),
        br#"{"n": 123456789012345678901234567890.000}"#.to_vec(),
        message(json!({"j": {"x": "\\u0000"}})),
    ];
    let dead: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"s\":\"\xff\xfe\"}".to_vec(), "not valid UTF-8"),
        (b"{\"s\":\"\xf0\x9f\x98\"}".to_vec(), "not valid UTF-8"),
        (b"not json at all".to_vec(), "not JSON"),
        (b"{\"s\":\"raw \x00 nul\"}".to_vec(), "not JSON"),
        (br#"{"s":"\ud800"}"#.to_vec(), "not JSON"),
        (message(json!({"s": "x".repeat(17)})), "column s"),
        (message(json!({"u": -1})), "column u"),
        (
            message(json!({"at": "the day after tomorrow"})),
            "column at",
        ),
        (
            format!("{}{}", "[".repeat(40), "]".repeat(40)).into_bytes(),
            "nested",
        ),
        (b"1e400".to_vec(), "not JSON"),
    ];
    let mut input: Vec<(u64, i64, &[u8])> = Vec::new();
    let mut offset = 0;
    for m in &stored_ok {
        input.push((500 + offset as u64, offset, m));
        offset += 1;
    }
    for (m, _) in &dead {
        input.push((500 + offset as u64, offset, m));
        offset += 1;
    }
    let batch = f.batch(0, 0, offset, &input);
    let done = committed(f.writer.write(&batch).await.unwrap());
    assert_eq!(
        (done.rows, done.dead_letters, done.refused.len()),
        (stored_ok.len(), dead.len(), 0)
    );

    let stored = f.stored_rows().await;
    for (row, expected) in stored.iter().zip(&batch.rows) {
        assert_eq!(row.0, expected.id);
        assert_eq!(row.1, expected.mapped.values);
        assert_eq!(row.2.as_deref(), Some(expected.mapped.document.as_str()));
    }
    assert_eq!(stored.len(), stored_ok.len());
    let letters = f.dead_letters().await;
    assert_eq!(letters.len(), dead.len());
    for ((_, offset, reason, raw), (m, why)) in letters.iter().zip(&dead) {
        assert!(
            reason.contains(why),
            "offset {offset}: {reason:?} should say {why:?}"
        );
        assert_eq!(raw.as_deref(), Some(m.as_slice()));
    }
    let tables: Vec<String> = f.conn().await.query("SHOW TABLES").await.unwrap();
    assert!(tables.contains(&"logs".to_string()));
}
for_each_method!(hostile_messages_are_stored_exactly_or_dead_lettered);

/// More data than one packet holds (about 40 MB against MariaDB's 16 MiB default), and more rows
/// than one prepared statement has placeholders for: split into several statements, still one
/// transaction, every byte stored.
async fn batches_beyond_one_statement_are_split(method: InsertMethod) {
    let f = Fixture::new("split", method).await;
    let big: Vec<Vec<u8>> = (0..12)
        .map(|k| message(json!({"t": format!("{k}").repeat(1_500_000), "i": k})))
        .collect();
    let input: Vec<(u64, i64, &[u8])> = big
        .iter()
        .enumerate()
        .map(|(k, m)| (k as u64 + 1, k as i64, m.as_slice()))
        .collect();
    let batch = f.batch(0, 0, 12, &input);
    assert_eq!(committed(f.writer.write(&batch).await.unwrap()).rows, 12);
    let sizes: Vec<(u64, u64, u64)> = f
        .conn()
        .await
        .query("SELECT id, LENGTH(t), LENGTH(payload) FROM logs ORDER BY id")
        .await
        .unwrap();
    let expected: Vec<(u64, u64, u64)> = big
        .iter()
        .enumerate()
        .map(|(k, m)| {
            (
                k as u64 + 1,
                1_500_000 * (k.to_string().len() as u64),
                m.len() as u64,
            )
        })
        .collect();
    assert_eq!(sizes, expected);
    let same: Option<u64> = f
        .conn()
        .await
        .query_first("SELECT COUNT(*) FROM logs WHERE JSON_VALUE(payload, '$.t') = t")
        .await
        .unwrap();
    assert_eq!(same, Some(12));

    // 7,000 rows of 10 values: more than 65,535 placeholders.
    let many = log_messages(1_000, 12, 7_000);
    let batch = f.batch(0, 12, 7_012, &borrowed(&many));
    assert_eq!(committed(f.writer.write(&batch).await.unwrap()).rows, 7_000);
    assert_eq!(f.stored_ids().await.len(), 7_012);
    assert_eq!(f.stored_offset(0).await, Some(7_012));
}
for_each_method!(batches_beyond_one_statement_are_split);

// ---------------------------------------------------------------------------------------------
// Rows the database refuses
// ---------------------------------------------------------------------------------------------

/// Rows that map but that the table refuses (a narrower column than the mapping, a duplicate
/// ID, a CHECK constraint) are dead-lettered with the server's reason; the rest commits with the
/// offset.
async fn rows_the_database_refuses_are_dead_lettered(method: InsertMethod) {
    let f = Fixture::new("refused", method).await;
    let mut conn = f.conn().await;
    conn.query_drop("ALTER TABLE logs MODIFY s VARCHAR(8) NULL")
        .await
        .unwrap();
    conn.query_drop("ALTER TABLE logs ADD CONSTRAINT i_not_13 CHECK (i IS NULL OR i <> 13)")
        .await
        .unwrap();
    // ID 4242 is taken by another partition's batch.
    let taken = log_messages(4242, 0, 1);
    committed(
        f.writer
            .write(&f.batch(9, 0, 1, &borrowed(&taken)))
            .await
            .unwrap(),
    );

    let mut messages = log_messages(4000, 100, 60);
    messages[7].2 = message(json!({"s": "fifteen chars!!", "i": 7}));
    messages[21].2 = message(json!({"i": 13}));
    messages[42].0 = 4242;
    messages.push((9999, 160, b"{broken".to_vec()));
    let batch = f.batch(0, 100, 161, &borrowed(&messages));
    let done = committed(f.writer.write(&batch).await.unwrap());
    assert_eq!(
        (done.rows, done.dead_letters, done.refused.len()),
        (57, 4, 3)
    );
    let mut refused_offsets: Vec<i64> = done.refused.iter().map(|d| d.offset).collect();
    refused_offsets.sort_unstable();
    assert_eq!(refused_offsets, [107, 121, 142]);
    assert_eq!(f.stored_offset(0).await, Some(161));

    let mut expected: Vec<u64> = messages
        .iter()
        .enumerate()
        .filter(|(k, _)| ![7, 21, 42, 60].contains(k))
        .map(|(_, m)| m.0)
        .collect();
    expected.push(4242);
    expected.sort();
    assert_eq!(f.stored_ids().await, expected);

    let letters = f.dead_letters().await;
    let offsets: Vec<i64> = letters.iter().map(|l| l.1).collect();
    assert_eq!(offsets, vec![107, 121, 142, 160]);
    for (_, offset, reason, raw) in &letters[..3] {
        assert!(
            reason.starts_with("the database refused the row: "),
            "{reason}"
        );
        let k = (offset - 100) as usize;
        assert_eq!(raw.as_deref(), Some(messages[k].2.as_slice()));
    }
    assert!(letters[0].2.contains("'s'"), "{}", letters[0].2);
    assert!(letters[1].2.contains("i_not_13"), "{}", letters[1].2);
    assert!(letters[2].2.contains("4242"), "{}", letters[2].2);
    assert!(letters[3].2.contains("not JSON"), "{}", letters[3].2);
}
for_each_method!(rows_the_database_refuses_are_dead_lettered);

/// A record whose share of a rollup puts a DOUBLE sum out of range is dead-lettered, naming the
/// rollup and the server's error; the rest of its batch is stored and counted. The overflow may
/// come from two records of one batch (1e308 twice in a bucket: the second is refused) or from
/// the total already stored. The rollup then equals a `GROUP BY` over the stored rows.
async fn a_rollup_sum_out_of_range_dead_letters_only_its_record(method: InsertMethod) {
    let per_minute = RollupSettings {
        name: "d_per_minute".into(),
        source: String::new(),
        bucket: Bucket::Minute,
        bucket_by: Default::default(),
        dimensions: vec!["s".into()],
        sums: vec!["d".into()],
        mins: vec![],
        maxs: vec!["d".into()],
    };
    let f = Fixture::with_rollups("rollup_overflow", method, &[], &[per_minute]).await;
    let layout = f.settings.id.layout;
    // Offsets 0..40 over two minutes and two services; d is a multiple of 1/4, so every sum is
    // exact whatever the order of the additions.
    let record = |offset: i64, d: f64| {
        let id = layout
            .encode(60 * (offset as u64 % 2), 0, offset as u32)
            .unwrap();
        let s = ["api", "web"][offset as usize / 20 % 2];
        (id, offset, message(json!({"s": s, "d": d})))
    };
    let mut messages: Vec<_> = (0..40).map(|o| record(o, o as f64 / 4.0)).collect();
    messages[10] = record(10, 1e308);
    messages[14] = record(14, 1e308);
    let done = committed(
        f.writer
            .write(&f.batch(0, 0, 40, &borrowed(&messages)))
            .await
            .unwrap(),
    );
    assert_eq!((done.rows, done.dead_letters), (39, 1));
    let mut later: Vec<_> = (40..50).map(|o| record(o, 1.0)).collect();
    later[2] = record(42, 1e308);
    later[5] = record(45, 1e308);
    let done = committed(
        f.writer
            .write(&f.batch(0, 40, 50, &borrowed(&later)))
            .await
            .unwrap(),
    );
    assert_eq!((done.rows, done.dead_letters), (9, 1));
    assert_eq!(f.stored_offset(0).await, Some(50));

    let letters = f.dead_letters().await;
    let offsets: Vec<i64> = letters.iter().map(|l| l.1).collect();
    // Offset 42 lands in the bucket of offset 10, whose 1e308 is stored; 45 in another, where
    // it fits.
    assert_eq!(offsets, vec![14, 42]);
    for (_, offset, reason, raw) in &letters {
        assert!(
            reason.contains("rollup `d_per_minute`") && reason.contains("(error 1690)"),
            "{reason}"
        );
        let all = messages.iter().chain(&later);
        let sent = all.clone().find(|m| m.1 == *offset).unwrap();
        assert_eq!(raw.as_deref(), Some(sent.2.as_slice()));
    }
    let mut stored: Vec<u64> = messages
        .iter()
        .chain(&later)
        .filter(|m| ![14, 42].contains(&m.1))
        .map(|m| m.0)
        .collect();
    stored.sort_unstable();
    assert_eq!(f.stored_ids().await, stored);

    type Totals = (String, String, u64, f64, Option<f64>);
    let rollup: Vec<Totals> = f
        .conn()
        .await
        .query(
            "SELECT DATE_FORMAT(bucket, '%Y-%m-%d %H:%i'), s, n, sum_d, max_d \
             FROM d_per_minute ORDER BY 1, 2",
        )
        .await
        .unwrap();
    let raw: Vec<Totals> = f
        .conn()
        .await
        .query(
            "SELECT DATE_FORMAT(TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ((id >> 32) DIV 60 * 60) \
             SECOND, '%Y-%m-%d %H:%i'), COALESCE(s, ''), COUNT(*), SUM(d), MAX(d) \
             FROM logs GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .await
        .unwrap();
    assert_eq!(rollup.len(), 4);
    assert_eq!(
        rollup.iter().filter(|b| b.3 == 1e308).count(),
        2,
        "{rollup:?}"
    );
    assert_eq!(rollup, raw);
}
for_each_method!(a_rollup_sum_out_of_range_dead_letters_only_its_record);

/// A refusal the server words in another character set (here a trigger switches the session's
/// results to latin1, and the CHECK constraint's name is not ASCII) is read, not a panic: the
/// record is dead-lettered with the message, its bad bytes replaced. `load_data` hears of it as
/// a warning (from `SHOW WARNINGS`), the other methods as an error.
async fn a_refusal_worded_in_another_character_set_is_read(method: InsertMethod) {
    let f = Fixture::new("latin1_refusal", method).await;
    let mut conn = f.conn().await;
    conn.query_drop("ALTER TABLE logs ADD CONSTRAINT `é_13` CHECK (i IS NULL OR i <> 13)")
        .await
        .unwrap();
    conn.query_drop(
        "CREATE TRIGGER results_in_latin1 BEFORE INSERT ON logs FOR EACH ROW \
         SET character_set_results = latin1",
    )
    .await
    .unwrap();
    let messages = log_messages(100, 10, 5);
    let done = committed(
        f.writer
            .write(&f.batch(0, 10, 15, &borrowed(&messages)))
            .await
            .unwrap(),
    );
    assert_eq!((done.rows, done.dead_letters), (4, 1));
    let letters = f.dead_letters().await;
    assert_eq!(letters.len(), 1);
    let (_, offset, reason, _) = &letters[0];
    assert_eq!(*offset, 13);
    assert!(
        reason.starts_with("the database refused the row: ")
            && reason.contains("CONSTRAINT `\u{FFFD}_13` failed"),
        "{reason}"
    );
    assert_eq!(f.stored_ids().await, [100, 101, 102, 104]);
}
for_each_method!(a_refusal_worded_in_another_character_set_is_read);

/// A stored offset that is not a number (NULL, or text in a column altered by hand) is an error
/// naming the column, on reading offsets and on claiming one: not a panic.
#[tokio::test]
async fn a_stored_offset_that_is_not_a_number_is_an_error_naming_it() {
    let f = Fixture::new("bad_offset", InsertMethod::Prepared).await;
    let mut conn = f.conn().await;
    conn.query_drop("ALTER TABLE ingest_offsets MODIFY next_offset VARCHAR(20) NULL")
        .await
        .unwrap();
    conn.query_drop(
        "INSERT INTO ingest_offsets (consumer_group, topic, kafka_partition, next_offset) \
         VALUES ('g', 't', 0, NULL), ('g', 't', 1, '1e3')",
    )
    .await
    .unwrap();
    for partition in [0, 1] {
        let read = f.writer.stored_offsets(GROUP, &[(TOPIC, partition)]).await;
        let written = f
            .writer
            .write(&f.batch(partition, 0, 3, &borrowed(&log_messages(1, 0, 3))))
            .await;
        for outcome in [read.map(|_| ()), written.map(|_| ())] {
            match outcome {
                Err(e @ DbError::Invariant(_)) => {
                    assert!(e.to_string().contains("ingest_offsets.next_offset"), "{e}")
                }
                other => panic!("partition {partition}: {other:?}"),
            }
        }
    }
    assert!(f.stored_ids().await.is_empty());
}

#[tokio::test]
async fn a_batch_of_only_dead_letters_still_moves_the_offset() {
    let f = Fixture::new("onlydead", InsertMethod::Text).await;
    let messages: Vec<(u64, i64, &[u8])> = vec![(1, 0, b"x"), (2, 1, b"y")];
    let done = committed(f.writer.write(&f.batch(0, 0, 2, &messages)).await.unwrap());
    assert_eq!((done.rows, done.dead_letters), (0, 2));
    assert_eq!(f.stored_offset(0).await, Some(2));
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

#[test]
fn give_up_after_is_a_human_duration() {
    let db_less = |value: &str| {
        logstamp::config::Settings::load(
            &logstamp::config::Sources {
                env: Some(Default::default()),
                ..Default::default()
            }
            .set("store.give_up_after", value),
        )
    };
    assert_eq!(
        Settings::defaults().unwrap().store.give_up_after,
        Duration::from_secs(300)
    );
    assert_eq!(
        db_less("90s").unwrap().store.give_up_after,
        Duration::from_secs(90)
    );
    let e = db_less("soon").unwrap_err().to_string();
    assert!(e.contains("store.give_up_after"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The benchmark command
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn bench_store_measures_every_method_and_drops_its_scratch_database() {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_logstamp"))
        .env_clear()
        .env(
            "LOGSTAMP__MYSQL__URL",
            format!("{}/logstamp", support::server_url()),
        )
        .args(["bench", "store", "--rows", "300", "--batch-rows", "40"])
        .args(["--concurrency", "3", "--runs", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let scratch = format!("logstamp_bench_{}", child.id());
    let lines = support::json_lines(&child.wait_with_output().unwrap());
    assert_eq!(lines[0]["rows"], 300);
    assert_eq!(lines[0]["concurrency"], 3);
    let mean = lines[0]["mean_message_bytes"].as_u64().unwrap();
    assert!((250..=450).contains(&mean), "{mean}");
    let methods = [
        "text",
        "prepared",
        "batch",
        "load_data",
        "load_data_unbatched",
        "load_data_unbatched_parallel",
    ];
    let runs: Vec<&serde_json::Value> = lines.iter().filter(|l| l["run"].is_u64()).collect();
    assert_eq!(runs.len(), 2 * methods.len());
    for run in &runs {
        assert_eq!(run["rows"], 300);
        assert!(run["rows_per_second"].as_f64().unwrap() > 0.0, "{run}");
    }
    // The writer's batches show in the server's counters: 300 rows in batches of 40 is 8
    // commits per run.
    assert_eq!(runs[0]["method"], "text");
    assert!(
        runs[0]["server"]["Com_commit"].as_u64().unwrap() >= 8,
        "{}",
        runs[0]
    );
    let summaries: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["summary"].is_string()).collect();
    let named: Vec<&str> = summaries
        .iter()
        .map(|s| s["summary"].as_str().unwrap())
        .collect();
    assert_eq!(named, methods);
    assert_eq!(summaries[4]["percent_of_ceiling"], 100.0);
    assert_eq!(summaries[5]["percent_of_parallel_ceiling"], 100.0);

    let mut conn = mysql_async::Conn::from_url(format!("{}/", support::server_url()))
        .await
        .unwrap();
    let left: Vec<String> = conn
        .exec(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            (scratch.as_str(),),
        )
        .await
        .unwrap();
    assert!(left.is_empty(), "{scratch} was not dropped");
}
