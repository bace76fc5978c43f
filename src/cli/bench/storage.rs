//! `logstamp bench storage`: what each table layout (what `payload` keeps, how partitions are
//! compressed) costs, side by side on the same rows in one run: bytes per line on disk (the
//! partition files' blocks, as `du` counts them: page compression shows only there), rows per
//! second through the store writer, the worker's and the database server's CPU per row, and the
//! time of a 24-hour histogram and of a one-day `query --where`.
//!
//! Each layout of each run gets a scratch database of its own beside `mysql.url`'s, dropped
//! afterwards. The database's CPU is its process's, read from `/proc`: run it against a server
//! on this host that nothing else uses.

use std::ops::ControlFlow;
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use serde_json::json;

use logstamp::config::{Settings, Sources};
use logstamp::mysql::{self, Ident};
use logstamp::store::compression::{self, Compression};
use logstamp::store::filter_language::parse_filter;
use logstamp::store::query::{self, TimeQuery};
use logstamp::store::settings::{DurationOrOff, PayloadMode};

use super::ingest::{DatabaseProcess, cpu_seconds, own_cpu_since};
use super::store::{make_batches, write_all};
use super::{drop_database, median, migrated, writer};
use crate::cli::db::with_database;
use crate::cli::output::Output;
use crate::cli::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct StorageArgs {
    /// Demo lines written into each layout in each run.
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Runs; each writes every layout once, in turn. The summary gives medians.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Layouts, comma-separated [default: all]: before_32 (payload full, no compression:
    /// the layout before issue 32), residual, residual_zlib (the defaults), residual_lz4,
    /// full_zlib.
    #[arg(long, value_delimiter = ',', value_name = "LAYOUTS")]
    layouts: Vec<String>,
    /// Set the server's innodb_compression_algorithm to each layout's while its tables are
    /// made, and back afterwards (each partition keeps the algorithm it was made with). Without
    /// it, layouts of another algorithm than the server's are left out.
    #[arg(long)]
    switch_server_algorithm: bool,
}

/// A table layout: what `payload` keeps and how partitions are compressed.
#[derive(Debug, Clone, Copy)]
struct Layout {
    name: &'static str,
    payload: PayloadMode,
    compression: Compression,
}

const LAYOUTS: &[Layout] = &[
    Layout {
        name: "before_32",
        payload: PayloadMode::Full,
        compression: Compression::None,
    },
    Layout {
        name: "residual",
        payload: PayloadMode::Residual,
        compression: Compression::None,
    },
    Layout {
        name: "residual_zlib",
        payload: PayloadMode::Residual,
        compression: Compression::Zlib,
    },
    Layout {
        name: "residual_lz4",
        payload: PayloadMode::Residual,
        compression: Compression::Lz4,
    },
    Layout {
        name: "full_zlib",
        payload: PayloadMode::Full,
        compression: Compression::Zlib,
    },
];

/// The filter of the one-day `query --where`.
const WHERE: &str = "level = 'error'";

pub fn storage(args: StorageArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.rows == 0 || args.runs == 0 {
        return Err(UsageError("--rows and --runs must be at least 1".into()).into());
    }
    let layouts: Vec<Layout> = if args.layouts.is_empty() {
        LAYOUTS.to_vec()
    } else {
        args.layouts
            .iter()
            .map(|name| {
                LAYOUTS
                    .iter()
                    .find(|l| l.name == name.trim())
                    .copied()
                    .ok_or_else(|| UsageError::new("--layouts", format!("unknown layout {name:?}")))
            })
            .collect::<Result<_, _>>()?
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(bench(settings, &args, layouts))?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(settings: Settings, args: &StorageArgs, layouts: Vec<Layout>) -> anyhow::Result<()> {
    let mut out = Output::new();
    // The server's settings, read where every user may connect: `mysql.url`'s own database
    // need not exist, as the layouts get scratch databases of their own.
    let mut conn =
        mysql::connect(&with_database(&settings.mysql.url, "information_schema")?).await?;
    let flavor = mysql::flavor(&mut conn).await?;
    let server = compression::read_server(&mut conn, flavor).await?;
    let (datadir,): (String,) = conn
        .query_first("SELECT @@datadir")
        .await?
        .context("reading the server's datadir")?;
    let layouts: Vec<Layout> = layouts
        .into_iter()
        .filter(|layout| {
            let lz4 = server.providers.iter().any(|p| p == "provider_lz4");
            let usable = match server.check(layout.compression) {
                Ok(applied) => applied,
                Err(_) => {
                    args.switch_server_algorithm && (layout.compression != Compression::Lz4 || lz4)
                }
            };
            if !usable {
                let _ = out.progress(&json!({"skipped": layout.name,
                    "why": format!("the server makes page-compressed files with {} (see --switch-server-algorithm)", server.algorithm)}));
            }
            usable
        })
        .collect();
    let database = DatabaseProcess::find(&settings).await;
    if database.cpu_seconds().is_none() {
        bail!("the database server's process is not on this host: its CPU cannot be read");
    }
    let mut results: Vec<(usize, &'static str, serde_json::Value)> = Vec::new();
    for run in 1..=args.runs {
        for layout in &layouts {
            let name = format!(
                "logstamp_bench_storage_{}_{}",
                std::process::id(),
                layout.name
            );
            let url = with_database(&settings.mysql.url, &name)?;
            let mut layout_settings = settings.clone();
            layout_settings.mysql.url = url.clone();
            layout_settings.store.payload = layout.payload;
            layout_settings.store.compression = layout.compression;
            layout_settings.store.commit_window = DurationOrOff(None);
            let measured = async {
                make_tables(&mut conn, &layout_settings, &server, layout.compression).await?;
                measure(&layout_settings, args.rows, &database, &datadir).await
            }
            .await;
            let dropped = drop_database(&url).await;
            let mut line = measured?;
            dropped?;
            line["layout"] = json!(layout.name);
            line["run"] = json!(run);
            out.progress(&line)?;
            results.push((run, layout.name, line));
        }
    }
    summarize(&mut out, &layouts, &results)?;
    out.finish()?;
    conn.disconnect().await?;
    Ok(())
}

/// Migrates the layout's scratch database, with the server's algorithm set to the layout's
/// for the moment if it differs (only with `--switch-server-algorithm`, checked by the caller).
async fn make_tables(
    conn: &mut mysql_async::Conn,
    settings: &Settings,
    server: &compression::ServerCompression,
    wanted: Compression,
) -> anyhow::Result<()> {
    let switch = wanted != Compression::None && server.check(wanted).is_err();
    if switch {
        conn.query_drop(format!(
            "SET GLOBAL innodb_compression_algorithm = '{wanted}'"
        ))
        .await?;
    }
    let made = migrated(settings, &settings.mysql.url).await;
    if switch {
        conn.query_drop(format!(
            "SET GLOBAL innodb_compression_algorithm = '{}'",
            server.algorithm
        ))
        .await?;
    }
    made?.disconnect().await?;
    Ok(())
}

/// Writes `rows` demo lines into the layout's tables and measures them.
async fn measure(
    settings: &Settings,
    rows: usize,
    database: &DatabaseProcess,
    datadir: &str,
) -> anyhow::Result<serde_json::Value> {
    let own = || cpu_seconds(std::process::id());
    // Mapping, as a worker maps each message (the residual is worked out here).
    let own_before = own();
    let (partitions, message_bytes) = make_batches(
        settings,
        rows,
        settings.batch.max_rows,
        settings.store.concurrency,
    )?;
    let map_cpu = own_cpu_since(own_before);
    let partitions = Arc::new(partitions);

    // Writing, then flushing the tables' pages to their files (page compression is done then).
    let writer = writer(settings)?;
    let mut conn = mysql::connect(&settings.mysql.url).await?;
    let tables: Vec<Ident> = settings.tables().into_iter().map(|t| t.table).collect();
    let own_before = own();
    let database_before = database.cpu_seconds();
    let started = Instant::now();
    write_all(&writer, &partitions).await?;
    let write_seconds = started.elapsed().as_secs_f64();
    let write_cpu = own_cpu_since(own_before);
    writer.close().await?;
    let list: Vec<String> = tables.iter().map(Ident::to_string).collect();
    conn.query_drop(format!("FLUSH TABLES {} FOR EXPORT", list.join(", ")))
        .await?;
    conn.query_drop("UNLOCK TABLES").await?;
    let database_cpu = database.cpu_since(database_before);
    let bytes = files_bytes(datadir, settings.mysql.url.database(), &tables)?;

    // Reading: a 24-hour histogram by level, and a day's lines of one level.
    let spec = settings.log_table();
    let now = chrono::Utc::now();
    let day = TimeQuery::between(
        &settings.id.layout,
        now - chrono::Duration::hours(23),
        now + chrono::Duration::hours(1),
    )?;
    let level = Ident::new("level")?;
    let started = Instant::now();
    let counts = query::histogram(&mut conn, &spec, &day, &level, 3600).await?;
    let histogram_ms = started.elapsed().as_secs_f64() * 1e3;
    let counted: u64 = counts.iter().map(|c| c.n).sum();
    if counted != rows as u64 {
        bail!("the histogram counted {counted} of {rows} rows");
    }
    let filtered = TimeQuery {
        filter: parse_filter(WHERE, &spec.columns)?,
        ..day
    };
    let started = Instant::now();
    let mut found = 0u64;
    query::run(&mut conn, &spec, &filtered, |record| {
        found += u64::from(!record.columns.is_empty());
        ControlFlow::Continue(())
    })
    .await?;
    let query_ms = started.elapsed().as_secs_f64() * 1e3;
    conn.disconnect().await?;

    let per_row_us = |cpu: Option<f64>| cpu.map(|s| (s * 1e7 / rows as f64).round() / 10.0);
    let worker = map_cpu.zip(write_cpu).map(|(m, w)| m + w);
    Ok(json!({
        "rows": rows,
        "mean_message_bytes": message_bytes / rows,
        "bytes_on_disk": bytes,
        "bytes_per_line": (bytes as f64 / rows as f64 * 10.0).round() / 10.0,
        "rows_per_second": (rows as f64 / write_seconds).round(),
        "worker_us_per_row": per_row_us(worker),
        "worker_map_us_per_row": per_row_us(map_cpu),
        "database_us_per_row": per_row_us(database_cpu),
        "histogram_24h_ms": (histogram_ms * 10.0).round() / 10.0,
        "query_where_1d_ms": (query_ms * 10.0).round() / 10.0,
        "query_where_rows": found,
    }))
}

/// The blocks the tables' partition files take (`du`), in the server's data directory.
fn files_bytes(datadir: &str, database: &str, tables: &[Ident]) -> anyhow::Result<u64> {
    let dir = std::path::Path::new(datadir).join(database);
    let mut bytes = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| {
        format!(
            "reading {} (the bench measures files of a server on this host)",
            dir.display()
        )
    })? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = tables
            .iter()
            .any(|t| name.starts_with(&format!("{}#P#", t.as_str())));
        if ours && name.ends_with(".ibd") {
            bytes += entry.metadata()?.blocks() * 512;
        }
    }
    Ok(bytes)
}

/// Per layout, the medians of each figure, and of its ratio to the first layout's in the same
/// run.
fn summarize(
    out: &mut Output,
    layouts: &[Layout],
    results: &[(usize, &'static str, serde_json::Value)],
) -> anyhow::Result<()> {
    const FIGURES: &[&str] = &[
        "bytes_per_line",
        "rows_per_second",
        "worker_us_per_row",
        "database_us_per_row",
        "histogram_24h_ms",
        "query_where_1d_ms",
    ];
    let Some(base) = layouts.first() else {
        return Ok(());
    };
    for layout in layouts {
        let mut line = json!({"summary": layout.name, "against": base.name});
        for figure in FIGURES {
            let values: Vec<f64> = results
                .iter()
                .filter(|(_, name, _)| *name == layout.name)
                .filter_map(|(_, _, r)| r[figure].as_f64())
                .collect();
            let ratios: Vec<f64> = results
                .iter()
                .filter(|(_, name, _)| *name == layout.name)
                .filter_map(|(run, _, r)| {
                    let own = r[figure].as_f64()?;
                    let (_, _, b) = results
                        .iter()
                        .find(|(n, name, _)| n == run && *name == base.name)?;
                    Some(own / b[figure].as_f64()?)
                })
                .collect();
            line[format!("median_{figure}")] = json!((median(values) * 10.0).round() / 10.0);
            line[format!("ratio_{figure}")] = json!((median(ratios) * 100.0).round() / 100.0);
        }
        out.json(&line)?;
    }
    Ok(())
}
