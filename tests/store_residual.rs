//! `store.payload = "residual"` through MariaDB: documents mapped by the pipeline, written by
//! the writer and read by the query reader come back whole, equal as JSON to the document that
//! went in, from the log table and a fan-out table; rows written with `full` and `residual` in
//! one table read alike; a row the database refuses keeps its whole document among the dead
//! letters. The oracle is the document as serde_json parses the message, and what the payload
//! column holds is read with SQL.

mod support;

use std::ops::ControlFlow;

use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};

use logstamp::config::Settings;
use logstamp::id::IdRange;
use logstamp::ingest::sample::log_message;
use logstamp::store::log_table::TableSpec;
use logstamp::store::query::{self, TimeQuery};
use logstamp::store::settings::PayloadMode;
use logstamp::store::{Batch, DeadLetter, Row, WriteOutcome};
use logstamp::transform::Pipeline;
use support::TestDb;

/// The log table maps a column of every type (times, cut strings, numbers in double and
/// string columns); the fan-out table `http` takes records with an `/http` object.
const SETTINGS: &str = r#"
[store]
payload = "residual"

[[store.columns]]
name = "event_time"
pointer = "/time"
type = "datetime"

[[store.columns]]
name = "level"
pointer = "/level"
type = "string"
length = 8
truncate = true

[[store.columns]]
name = "message"
pointer = "/message"
type = "text"

[[store.columns]]
name = "size"
pointer = "/size"
type = "double"

[[store.columns]]
name = "code"
pointer = "/code"
type = "string"
length = 16

[[store.columns]]
name = "ab"
pointer = "/a~1b"
type = "uint"

[[store.tables]]
name = "http"
payload = "residual"
when = [{ pointer = "/http", exists = true }]

[[store.tables.columns]]
name = "status"
pointer = "/http/status"
type = "uint"

[[store.tables.columns]]
name = "path"
pointer = "/http/path"
type = "string"
length = 8
truncate = true
"#;

/// Documents with what a column changes or cannot hold, and the demo's lines.
fn documents() -> Vec<Json> {
    let mut documents = vec![
        json!({"time": "2026-11-21T10:00:00.123Z", "level": "info", "message": "m", "x": 1}),
        json!({"time": "2026-11-21T10:00:00.123456789Z", "level": "a level too long"}),
        json!({"time": "2026-11-21T18:00:00+08:00", "size": 9007199254740993u64, "code": 404}),
        json!({"time": 1795255200, "size": 1.5, "a/b": 18446744073709551615u64, "~0": {}}),
        json!({"message": "é日😀\u{0}\"\\", "level": null, "nested": {"deep": [[], {}, [1.25e-300]]}}),
        json!({"http": {"status": 500, "path": "/a/much/longer/path"}, "size": 2}),
        json!({"http": {"status": 200, "path": "/ok"}, "code": "E1"}),
        json!({}),
    ];
    let at = chrono::Utc::now();
    documents.extend((0..50).map(|n| serde_json::from_str(&log_message(n, at)).unwrap()));
    documents
}

struct Setup {
    db: TestDb,
    settings: Settings,
    first_id: u64,
}

impl Setup {
    async fn new(hint: &str) -> Setup {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), SETTINGS).unwrap();
        let db = TestDb::create(hint).await;
        let settings = db.settings_with_file(Some(file.path()), &[("store.commit_window", "off")]);
        db.migrate(&settings).await;
        let now = chrono::Utc::now().timestamp();
        let first_id = settings.id.layout.first_id_at(now).unwrap();
        Setup {
            db,
            settings,
            first_id,
        }
    }

    /// Writes `documents` as one batch of partition 0 from `start`, mapped with `payload` in
    /// every table, IDs from `first`.
    async fn write(&self, payload: PayloadMode, start: i64, first: u64, documents: &[Json]) {
        let mut store = self.settings.store.clone();
        store.payload = payload;
        store.tables[0].payload = payload;
        let pipeline = Pipeline::from_settings(
            self.settings.ingest.format,
            &self.settings.normalize,
            &store,
        );
        let rows = documents
            .iter()
            .zip(0..)
            .map(|(document, k)| Row {
                id: first + k,
                offset: start + k as i64,
                mapped: pipeline
                    .map("logs", document.to_string().as_bytes())
                    .unwrap(),
            })
            .collect();
        let mut settings = self.settings.clone();
        settings.store = store;
        let writer = support::writer(&settings);
        let batch = Batch {
            consumer_group: "g".into(),
            topic: "logs".into(),
            partition: 0,
            start_offset: start,
            next_offset: start + documents.len() as i64,
            rows,
            dead_letters: Vec::<DeadLetter>::new(),
        };
        let outcome = writer.write(&batch).await.unwrap();
        assert!(matches!(outcome, WriteOutcome::Committed(_)), "{outcome:?}");
        writer.close().await.unwrap();
    }

    /// Every row of `spec`'s table as the query reader gives it: (ID, payload).
    async fn read(&self, spec: &TableSpec) -> Vec<(u64, Json)> {
        let mut conn = self.db.conn().await;
        let query = TimeQuery {
            range: IdRange {
                start: self.first_id,
                end: self.first_id + (1 << 32),
            },
            filter: Vec::new(),
            limit: None,
        };
        let mut rows = Vec::new();
        query::run(&mut conn, spec, &query, |record| {
            let payload = record.columns.iter().find(|(name, _)| name == "payload");
            rows.push((record.id, payload.unwrap().1.clone()));
            ControlFlow::Continue(())
        })
        .await
        .unwrap();
        rows
    }

    /// The `payload` column as stored, by SQL.
    async fn stored(&self, table: &str, id: u64) -> Option<Json> {
        let mut conn = self.db.conn().await;
        let text: Option<Option<String>> = conn
            .exec_first(format!("SELECT payload FROM {table} WHERE id = ?"), (id,))
            .await
            .unwrap();
        text.flatten().map(|t| serde_json::from_str(&t).unwrap())
    }
}

#[tokio::test]
async fn documents_come_back_whole_from_the_log_and_fan_out_tables() {
    let setup = Setup::new("residual_whole").await;
    let documents = documents();
    setup
        .write(PayloadMode::Residual, 0, setup.first_id, &documents)
        .await;

    let read = setup.read(&setup.settings.log_table()).await;
    assert_eq!(read.len(), documents.len());
    for ((id, back), document) in read.iter().zip(&documents) {
        assert_eq!(back, document, "row {id}");
    }
    let routed: Vec<&Json> = documents
        .iter()
        .filter(|d| d.get("http").is_some())
        .collect();
    let fanout = setup.read(&setup.settings.fanout_tables()[0]).await;
    assert_eq!(fanout.len(), routed.len());
    for ((id, back), document) in fanout.iter().zip(routed) {
        assert_eq!(back, document, "fan-out row {id}");
    }

    // The payload holds only what the columns do not give back.
    let first = setup.stored("logs", setup.first_id).await;
    assert_eq!(first, Some(json!({"x": 1})));
    let changed = setup.stored("logs", setup.first_id + 1).await.unwrap();
    assert_eq!(changed["time"], "2026-11-21T10:00:00.123456789Z");
    assert_eq!(changed["level"], "a level too long");
    let numbers = setup.stored("logs", setup.first_id + 2).await.unwrap();
    assert_eq!(numbers["size"], 9007199254740993u64);
    assert_eq!(numbers["code"], 404);
    assert_eq!(setup.stored("logs", setup.first_id + 7).await, None);
    let demo_line = setup.stored("logs", setup.first_id + 8).await.unwrap();
    for column_field in ["time", "level", "message"] {
        assert!(demo_line.get(column_field).is_none(), "{demo_line}");
    }
    assert!(demo_line.get("trace_id").is_some(), "{demo_line}");
}

#[tokio::test]
async fn full_and_residual_rows_of_one_table_read_alike() {
    let setup = Setup::new("residual_mixed").await;
    let documents = documents();
    let (older, newer) = documents.split_at(documents.len() / 2);
    setup
        .write(PayloadMode::Full, 0, setup.first_id, older)
        .await;
    let next = setup.first_id + older.len() as u64;
    setup
        .write(PayloadMode::Residual, older.len() as i64, next, newer)
        .await;

    let read = setup.read(&setup.settings.log_table()).await;
    let backs: Vec<&Json> = read.iter().map(|(_, back)| back).collect();
    assert_eq!(backs, documents.iter().collect::<Vec<_>>());
    // The older rows keep their whole document, the newer only their residual.
    assert_eq!(
        setup.stored("logs", setup.first_id).await.as_ref(),
        Some(&older[0])
    );
    assert_ne!(setup.stored("logs", next).await.as_ref(), Some(&newer[0]));
}

#[tokio::test]
async fn a_refused_row_keeps_its_whole_document_among_the_dead_letters() {
    let setup = Setup::new("residual_refused").await;
    let document = json!({"time": "2026-11-21T10:00:00.000Z", "level": "info", "k": [1, 2]});
    setup
        .write(
            PayloadMode::Residual,
            0,
            setup.first_id,
            std::slice::from_ref(&document),
        )
        .await;
    // The same ID again: the database refuses the duplicate.
    setup
        .write(
            PayloadMode::Residual,
            1,
            setup.first_id,
            std::slice::from_ref(&document),
        )
        .await;
    let mut conn = setup.db.conn().await;
    let raw: Option<Vec<u8>> = conn
        .query_first("SELECT raw FROM dead_letters WHERE kafka_offset = 1")
        .await
        .unwrap();
    let raw: Json = serde_json::from_slice(&raw.unwrap()).unwrap();
    assert_eq!(raw, document);
}
