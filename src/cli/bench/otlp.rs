//! `logstamp bench otlp`: the same log records through one `logstamp ingest` worker as
//! `otlp_proto` (an `ExportLogsServiceRequest` of `--per-message` records per Kafka message, as
//! the Collector's Kafka exporter writes them) and as `json` (each record's document, one per
//! message, as a shipper of JSON writes them), in alternating runs of one invocation: records per
//! second, the worker's CPU time per record and its peak memory.
//!
//! The JSON messages are the documents logstamp itself makes of the OTLP records, so both
//! formats map the very same fields through the settings' normalize rules and columns (use it
//! with `config/examples/otel.toml`).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::json;

use logstamp::config::{Settings, Sources};
use logstamp::ingest::kafka::{Outgoing, produce_all};
use logstamp::ingest::local_cluster::LocalCluster;
use logstamp::transform::otlp::{self, Encoding};

use super::ingest::{
    check_stored, cpu_seconds, peak_rss_kib, round3, spawn_worker, stop_workers, watch,
};
use super::{in_scratch_database, median};
use crate::cli::output::Output;
use crate::cli::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct OtlpArgs {
    /// Log records in each run.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Records per OTLP message.
    #[arg(long, default_value_t = 1_000)]
    per_message: u64,
    /// Runs of each format, alternating.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

const SERVICES: &[&str] = &["checkout", "search", "auth", "payments", "catalog"];
/// OTLP's SeverityNumber and text of each level.
const SEVERITIES: &[(i32, &str)] = &[
    (9, "INFO"),
    (9, "INFO"),
    (9, "INFO"),
    (13, "WARN"),
    (17, "ERROR"),
    (5, "DEBUG"),
];
/// 2024-05-01T12:34:56Z, in nanoseconds.
const START_NANOS: u64 = 1_714_566_896_000_000_000;

pub fn otlp(args: OtlpArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.records == 0 || args.per_message == 0 || args.rounds == 0 {
        return Err(
            UsageError("--records, --per-message and --rounds must be at least 1".into()).into(),
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(in_scratch_database(settings, async |settings| {
        bench(settings, &args, &sources).await
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// One format's messages on its own topic.
struct Stream {
    format: &'static str,
    topic: &'static str,
    messages: Vec<Vec<u8>>,
}

impl Stream {
    fn bytes(&self) -> u64 {
        self.messages.iter().map(|m| m.len() as u64).sum()
    }
}

async fn bench(settings: &Settings, args: &OtlpArgs, sources: &Sources) -> anyhow::Result<()> {
    let mut out = Output::new();
    let requests: Vec<Vec<u8>> = (0..args.records)
        .step_by(usize::try_from(args.per_message).unwrap_or(usize::MAX))
        .map(|start| request(start, (start + args.per_message).min(args.records)).encode_to_vec())
        .collect();
    let mut documents = Vec::new();
    for message in &requests {
        for document in otlp::records(Encoding::Proto, message)? {
            documents.push(document.to_string().into_bytes());
        }
    }
    let streams = [
        Stream {
            format: "json",
            topic: "bench-json",
            messages: documents,
        },
        Stream {
            format: "otlp_proto",
            topic: "bench-otlp",
            messages: requests,
        },
    ];
    let cluster = LocalCluster::start(1)?;
    let brokers = cluster.bootstrap_servers();
    for stream in &streams {
        let count = stream.messages.len() as u64;
        let partitions = LocalCluster::partitions_to_hold(count, stream.bytes() / count.max(1));
        cluster.create_topic(stream.topic, partitions)?;
        let messages = stream
            .messages
            .iter()
            .enumerate()
            .map(|(n, payload)| Outgoing {
                partition: Some((n as u64 % partitions as u64) as i32),
                key: None,
                payload: Some(payload.clone()),
            });
        produce_all(&brokers, stream.topic, messages)?;
        out.json(&json!({
            "stage": "produce",
            "format": stream.format,
            "records": args.records,
            "messages": count,
            "bytes": stream.bytes(),
            "partitions": partitions,
        }))?;
    }
    out.flush()?;

    let mut rates: [Vec<f64>; 2] = Default::default();
    let mut cpu: [Vec<f64>; 2] = Default::default();
    for round in 0..args.rounds {
        // Alternate which goes first, so a drift of the machine weighs on both alike.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let stream = &streams[index];
            empty_tables(settings).await?;
            let group = format!("{}-{round}", stream.format);
            let overrides = [
                ("ingest.format", stream.format),
                ("kafka.group_id", group.as_str()),
            ];
            let started = Instant::now();
            let mut workers = vec![spawn_worker(
                settings,
                sources,
                &brokers,
                stream.topic,
                &overrides,
            )?];
            let watched = watch(
                settings,
                stream.messages.len() as u64,
                &mut workers,
                started,
            )
            .await;
            let cpu_seconds = workers.first().and_then(|w| cpu_seconds(w.id()));
            let peak_kib = workers.first().and_then(|w| peak_rss_kib(w.id()));
            let totals = stop_workers(workers)?;
            let (first_row, all_rows) = watched?;
            check_stored(settings, args.records).await?;
            let Some(cpu_seconds) = cpu_seconds else {
                bail!("reading the worker's CPU time from /proc");
            };
            let rate = args.records as f64 / (all_rows - first_row);
            let micros_per_record = cpu_seconds * 1e6 / args.records as f64;
            rates[index].push(rate);
            cpu[index].push(micros_per_record);
            out.json(&json!({
                "stage": "run",
                "round": round + 1,
                "format": stream.format,
                "first_row_after_seconds": round3(first_row),
                "all_rows_after_seconds": round3(all_rows),
                "records_per_second": rate.round(),
                "worker_cpu_seconds": round3(cpu_seconds),
                "worker_cpu_us_per_record": round3(micros_per_record),
                "worker_peak_rss_mib": peak_kib.map(|kib| kib / 1024),
                "worker_totals": totals.first(),
            }))?;
            out.flush()?;
        }
    }
    let [json_rate, otlp_rate] = rates.map(median);
    let [json_cpu, otlp_cpu] = cpu.map(median);
    out.json(&json!({
        "summary": "otlp",
        "records": args.records,
        "per_message": args.per_message,
        "rounds": args.rounds,
        "json_records_per_second": json_rate.round(),
        "otlp_proto_records_per_second": otlp_rate.round(),
        "rate_otlp_over_json": round3(otlp_rate / json_rate),
        "json_cpu_us_per_record": round3(json_cpu),
        "otlp_proto_cpu_us_per_record": round3(otlp_cpu),
        "cpu_otlp_over_json": round3(otlp_cpu / json_cpu),
    }))?;
    out.finish()?;
    Ok(())
}

/// Records `start..end` as one request: grouped by service (the resource), one scope, each
/// record with the fields of the other benchmarks' messages.
fn request(start: u64, end: u64) -> ExportLogsServiceRequest {
    let resource_logs = SERVICES
        .iter()
        .enumerate()
        .map(|(s, service)| ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    text("service.name", service),
                    text("host.name", &format!("web-{:03}.eu-west-1.example.com", s)),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "orders.http".into(),
                    version: "2.4.1".into(),
                    ..Default::default()
                }),
                log_records: (start..end)
                    .filter(|n| *n as usize % SERVICES.len() == s)
                    .map(record)
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest { resource_logs }
}

fn record(n: u64) -> LogRecord {
    // A cheap, fixed scramble (a bijection of u64) so values are not all alike.
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let (severity_number, severity_text) = SEVERITIES[n as usize % SEVERITIES.len()];
    let time = START_NANOS + n * 1_000_000;
    let mut attributes = vec![
        text(
            "client.address",
            &format!("10.{}.{}.{}", h % 256, (h >> 8) % 256, (h >> 16) % 256),
        ),
        text(
            "http.request.method",
            ["GET", "GET", "POST", "PUT"][(h % 4) as usize],
        ),
        text("url.path", &format!("/api/v1/orders/{}", h % 1_000)),
        int(
            "http.response.status_code",
            [200, 200, 201, 404, 500][(h % 5) as usize],
        ),
        int("latency_ms", (h % 90 + 1) as i64),
    ];
    if severity_number == 17 {
        attributes.push(text("exception.type", &format!("E{}", h % 40)));
    }
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: time + 2_000_000,
        severity_number,
        severity_text: severity_text.into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "GET /api/v1/orders/{} 200 in {}.{}ms user={} request_id={:016x} upstream=orders-db-primary",
                h % 1_000_000,
                h % 90 + 1,
                h % 10,
                h % 50_000,
                h
            ))),
        }),
        attributes,
        trace_id: [h.to_be_bytes(), h.rotate_left(17).to_be_bytes()].concat(),
        span_id: h.rotate_left(29).to_be_bytes().to_vec(),
        flags: 1,
        ..Default::default()
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// Every run starts from the same empty tables and no stored offsets.
async fn empty_tables(settings: &Settings) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(settings.mysql.url.expose()).await?;
    conn.query_drop("DELETE FROM ingest_offsets").await?;
    let tables = std::iter::once(&settings.store.table)
        .chain(settings.store.tables.iter().map(|t| &t.name))
        .chain(settings.rollup_plans.iter().map(|r| &r.name));
    for table in tables {
        conn.query_drop(format!("TRUNCATE TABLE {table}")).await?;
    }
    conn.disconnect().await?;
    Ok(())
}
