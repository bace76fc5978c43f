//! `logstamp bench serve`: how long `logstamp serve`'s API takes to answer over a day of
//! many rows, at the default settings (no rollup): a day's histogram (summed from the line
//! counts, by ID time and by event time, unfiltered and filtered by level, and counted from
//! the table when a filter or a column the counts lack rules them out), a page of lines (the
//! newest, filtered, deep behind a cursor), and text searches (a selective text and a common
//! one, through the text filter with `contains`, and as today's scan with `like`), each timed
//! over HTTP, with the CPU this process and the MySQL server spent per request.
//!
//! Statements may run for up to 5 minutes here (`serve.statement_timeout` is 10 s by
//! default), so that counting a whole day from the table is timed, not stopped.
//!
//! Runs in a scratch database beside `mysql.url`'s, created and dropped by the command. The
//! rows fill the next whole UTC day (a partition of their own), written by `INSERT ... SELECT`
//! from MariaDB's sequence engine: demo-like levels, hosts, services, messages and payloads,
//! each line's event time up to 89 s before its ID time; then the zone map, the line counts
//! and the text filter are rebuilt from them (`zonemap rebuild`, `counts rebuild`, `search
//! rebuild`), which the writer keeps itself.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use mysql_async::prelude::Queryable;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use logstamp::config::{Settings, Sources};
use logstamp::id::IdRange;
use logstamp::mysql;
use logstamp::serve::Server;
use logstamp::store::line_count_plan;
use logstamp::store::text_search;
use logstamp::store::{line_counts, zone_map};
use logstamp::time::format_utc;

use super::{in_scratch_database, median};
use crate::cli::load_settings;
use crate::cli::output::Output;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Rows spread over the day.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Times each request is made; the summary gives the median.
    #[arg(long, default_value_t = 11)]
    runs: usize,
    /// Only the requests whose description holds this text (for example `search`).
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
}

/// Rows per `INSERT ... SELECT`.
const CHUNK: u64 = 500_000;
const DAY: u64 = 86_400;
/// How long one timed request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Serialize)]
struct Measured {
    what: String,
    path: String,
    runs: usize,
    median_ms: f64,
    max_ms: f64,
    /// CPU time of this process (the server and the client) per request.
    serve_cpu_ms: f64,
    /// CPU time of the MySQL server per request, when its process can be read here.
    mysql_cpu_ms: Option<f64>,
    /// What the answer held: rows, or the histogram's total.
    answered: u64,
}

pub fn serve(args: ServeArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let mut settings = load_settings(&sources)?;
    // Long enough for the table counts of a whole day to be timed rather than stopped.
    settings.serve.statement_timeout = REQUEST_TIMEOUT;
    // The default columns' event time, so the histogram by event time is timed too.
    settings.store.event_time = "event_time".into();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let results = runtime.block_on(in_scratch_database(settings, async |settings| {
        bench_in(settings, &args).await
    }))?;
    let mut out = Output::new();
    for result in &results {
        out.json(result).context("writing output")?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

async fn bench_in(settings: &Settings, args: &ServeArgs) -> anyhow::Result<Vec<Measured>> {
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0);
    let day = (now / DAY + 1) * DAY;
    let mut conn = mysql::connect(&settings.mysql.url).await?;
    let bound = settings.mysql.bound_on(&settings.mysql.url);
    let started = Instant::now();
    load(&mut conn, settings, day, args.rows).await?;
    let filtered = Instant::now();
    for plan in text_search::plans(&settings.store) {
        text_search::rebuild(
            &mut conn,
            &plan,
            &settings.id.layout,
            (
                IdRange {
                    start: day << 32,
                    end: (day + DAY) << 32,
                },
                true,
            ),
            (settings.store.retry_policy(), &bound),
            |_, _| {},
        )
        .await?;
    }
    tracing::info!(
        rows = args.rows,
        seconds = started.elapsed().as_secs_f64(),
        filter_seconds = filtered.elapsed().as_secs_f64(),
        "loaded and text filter built"
    );
    let layout = settings.id.layout;
    let retry = settings.store.retry_policy();
    let started = Instant::now();
    for plan in settings.store.zone_plans() {
        let ids = IdRange {
            start: layout.first_id_at(to_i64(day))?,
            end: layout.first_id_at(to_i64(day + DAY))?,
        };
        zone_map::rebuild(&mut conn, &plan, &layout, ids, (retry, &bound), |_, _| {}).await?;
    }
    let zone_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let log_table = settings.log_table();
    let columns: Vec<String> = log_table.columns.iter().map(|c| c.name.clone()).collect();
    let plan = line_count_plan::plans(&settings.store).remove(0);
    let range = (day, day + DAY);
    line_counts::rebuild(
        &mut conn,
        (&plan, &columns),
        &layout,
        range,
        (retry, &bound),
        |_, _| {},
    )
    .await?;
    tracing::info!(
        zone_map_seconds = zone_seconds,
        line_counts_seconds = started.elapsed().as_secs_f64(),
        "zone map and line counts rebuilt"
    );
    conn.query_drop(format!("ANALYZE TABLE {}", log_table.table))
        .await?;
    let mysql_pid = mysql_pid(&mut conn).await;
    conn.disconnect().await?;

    let server = Server::new(
        settings.serve.clone(),
        settings.serve_catalog(),
        &settings.mysql.url,
    )?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let served = tokio::spawn(async move { server.serve(listener).await });

    let range = format!("from={}&to={}", format_utc(day), format_utc(day + DAY));
    let errors = "&where=level%20%3D%20%27error%27";
    // A cursor in the middle of the day: its first ID.
    let middle = ((day + DAY / 2) << 32).to_string();
    let mut requests: Vec<(String, String)> = vec![
        (
            "histogram, 24 h, by level (line counts)".into(),
            format!("/api/histogram?{range}"),
        ),
        (
            "histogram, 24 h, level = 'error' (line counts)".into(),
            format!("/api/histogram?{range}{errors}"),
        ),
        (
            "histogram, 24 h of event time, by level (line counts)".into(),
            format!("/api/histogram?{range}&time=event"),
        ),
        (
            "histogram, 24 h of event time, not on whole minutes (line counts, table edges)".into(),
            format!(
                "/api/histogram?from={}&to={}&time=event",
                format_utc(day + 30),
                format_utc(day + DAY - 30)
            ),
        ),
        (
            "histogram, 24 h, host = one of 200 (table)".into(),
            format!(
                "/api/histogram?{range}&where=host%20%3D%20%27web-007.eu-west-1.example.com%27"
            ),
        ),
        (
            "histogram, 24 h, by service (table)".into(),
            format!("/api/histogram?{range}&by=service"),
        ),
        (
            "100 newest lines".into(),
            format!("/api/rows?{range}&limit=100"),
        ),
        (
            "100 newest lines, level = 'error'".into(),
            format!("/api/rows?{range}&limit=100{errors}"),
        ),
        (
            "100 lines behind a cursor mid-day".into(),
            format!("/api/rows?{range}&limit=100&cursor={middle}"),
        ),
    ];
    // A selective text (about 1,100 lines of 10 million hold it) and a common one (every
    // line), through the text filter and as a scan.
    let searches = [("selective", "orders/6878"), ("common", "user=")];
    for (kind, text) in searches {
        for (how, op, value) in [
            ("contains", "contains", text.to_string()),
            ("like (scan)", "like", format!("%{text}%")),
        ] {
            let filter = format!("message {op} '{value}'");
            let filter: String = url::form_urlencoded::byte_serialize(filter.as_bytes()).collect();
            requests.push((
                format!("histogram, 24 h, {kind} search, {how}"),
                format!("/api/histogram?{range}&where={filter}"),
            ));
            requests.push((
                format!("100 newest lines, {kind} search, {how}"),
                format!("/api/rows?{range}&limit=100&where={filter}"),
            ));
        }
    }
    if let Some(only) = &args.only {
        requests.retain(|(what, _)| what.contains(only.as_str()));
    }
    let mut results = Vec::new();
    for (what, path) in requests {
        // One untimed request warms the buffer pool for what is timed.
        get(&address, &path).await?;
        let (cpu_before, mysql_before) = (cpu_ms(std::process::id()), mysql_pid.and_then(cpu_ms));
        let mut times = Vec::new();
        let mut answered = 0;
        for _ in 0..args.runs {
            let at = Instant::now();
            let body = get(&address, &path).await?;
            times.push(at.elapsed().as_secs_f64() * 1000.0);
            answered = answer_size(&body)?;
        }
        let runs = args.runs.max(1) as f64;
        let per_request = |before: Option<f64>, after: Option<f64>| Some((after? - before?) / runs);
        results.push(Measured {
            what,
            path,
            runs: args.runs,
            max_ms: times.iter().copied().fold(0.0, f64::max),
            median_ms: median(times),
            serve_cpu_ms: per_request(cpu_before, cpu_ms(std::process::id())).unwrap_or(0.0),
            mysql_cpu_ms: per_request(mysql_before, mysql_pid.and_then(cpu_ms)),
            answered,
        });
    }
    served.abort();
    Ok(results)
}

fn to_i64(seconds: u64) -> i64 {
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// `rows` demo-like rows over the UTC day starting at `day`, in statements of [`CHUNK`].
async fn load(
    conn: &mut mysql_async::Conn,
    settings: &Settings,
    day: u64,
    rows: u64,
) -> anyhow::Result<()> {
    let table = settings.log_table().table;
    let mut done = 0;
    while done < rows {
        let n = CHUNK.min(rows - done);
        // Row k (from 0) is at second day + k * DAY / rows; the low 32 bits (service ID and
        // counter) are k itself, so IDs are distinct.
        conn.exec_drop(
            format!(
                "INSERT INTO {table} (id, event_time, level, host, service, message, payload) \
                 SELECT ((? + k * ? DIV ?) << 32) | k, \
                   DATE_ADD('1970-01-01', INTERVAL (? + k * ? DIV ? - k % 90) SECOND), \
                   ELT(1 + k % 20, 'error', 'warn', 'warn', 'debug', 'debug', 'debug', 'info', \
                       'info', 'info', 'info', 'info', 'info', 'info', 'info', 'info', 'info', \
                       'info', 'info', 'info', 'info'), \
                   CONCAT('web-', LPAD(k % 200, 3, '0'), '.eu-west-1.example.com'), \
                   ELT(1 + k % 5, 'auth', 'payments', 'catalog', 'search', 'checkout'), \
                   CONCAT('GET /api/v1/orders/', k, ' 200 in ', k % 90, 'ms user=', k % 50000), \
                   JSON_OBJECT('trace_id', MD5(k), 'http', JSON_OBJECT('status', 200, \
                     'latency_ms', k % 90), 'client', CONCAT('10.0.', k % 256, '.', k % 199)) \
                 FROM (SELECT seq + ? AS k FROM seq_0_to_{}) AS s",
                n - 1
            ),
            (day, DAY, rows, day, DAY, rows, done),
        )
        .await
        .context("loading rows")?;
        done += n;
    }
    Ok(())
}

/// A GET over HTTP/1.0 (the body ends when the connection does).
async fn get(address: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(REQUEST_TIMEOUT, stream.read_to_end(&mut response))
        .await
        .context("no answer in time")??;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("not an HTTP response")?;
    let head = String::from_utf8_lossy(&response[..head_end]).to_string();
    anyhow::ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{path}: {head}"
    );
    Ok(response[head_end + 4..].to_vec())
}

/// Rows in a page, or a histogram's total.
fn answer_size(body: &[u8]) -> anyhow::Result<u64> {
    let value: serde_json::Value = serde_json::from_slice(body).context("an answer not JSON")?;
    anyhow::ensure!(value.get("error").is_none(), "{value}");
    Ok(value["total"]
        .as_u64()
        .or_else(|| value["count"].as_u64())
        .unwrap_or(0))
}

/// The server's process ID, from its pid file, when it runs on this host and can be read.
async fn mysql_pid(conn: &mut mysql_async::Conn) -> Option<u32> {
    let file: Option<String> = conn.query_first("SELECT @@pid_file").await.ok()?;
    std::fs::read_to_string(file?).ok()?.trim().parse().ok()
}

/// A process's user and system CPU time so far (ms), from Linux's `/proc/PID/stat`.
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (in parentheses, which may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks * 1000.0 / per_second.max(1.0))
}
