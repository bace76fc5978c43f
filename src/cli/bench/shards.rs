//! `logstamp bench shards`: rows per second through the store writer into 1, 2, ... N shards
//! (`store.shards`), the shard counts taking turns in each run so they are measured side by
//! side on a machine whose load changes.
//!
//! Every database is a scratch one made and dropped by the command: the coordination database
//! beside `mysql.url`'s, and shard k on server k of `--servers` (taking turns when there are
//! fewer servers than shards).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use mysql_async::prelude::Queryable;
use serde_json::json;

use logstamp::config::{Settings, Sources};
use logstamp::mysql::{self, MysqlUrl};
use logstamp::store::settings::DurationOrOff;
use logstamp::store::{Writer, migrate};

use super::store::{make_batches, write_all};
use super::{drop_database, median, migrated};
use crate::cli::db::with_database;
use crate::cli::output::Output;
use crate::cli::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct ShardsArgs {
    /// Rows written in each run of each shard count.
    #[arg(long, default_value_t = 300_000)]
    rows: usize,
    /// The most shards measured: every count from 1 to N.
    #[arg(long, default_value_t = 3, value_name = "N")]
    max_shards: usize,
    /// Kafka partitions the rows are spread over (spread over the shards by the placement).
    #[arg(long, default_value_t = 12)]
    partitions: usize,
    /// Servers for the shards, comma-separated mysql://user[:password]@host:port URLs
    /// [default: mysql.url's server].
    #[arg(long, value_delimiter = ',', value_name = "URLS")]
    servers: Vec<String>,
    /// Runs of every shard count; the summary gives the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

pub fn shards(args: ShardsArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if args.rows == 0 || args.runs == 0 || args.max_shards == 0 || args.partitions == 0 {
        return Err(UsageError(
            "--rows, --runs, --max-shards and --partitions must be at least 1".into(),
        )
        .into());
    }
    let scratch = format!("logstamp_bench_{}", std::process::id());
    let servers: Vec<MysqlUrl> = if args.servers.is_empty() {
        vec![settings.mysql.url.clone()]
    } else {
        args.servers
            .iter()
            .map(|s| {
                MysqlUrl::try_from(format!("{}/{scratch}", s.trim().trim_end_matches('/')))
                    .map_err(|e| UsageError::new("--servers", e))
            })
            .collect::<Result<_, _>>()?
    };
    let shards = (0..args.max_shards)
        .map(|k| with_database(&servers[k % servers.len()], &format!("{scratch}_{k}")))
        .collect::<anyhow::Result<Vec<MysqlUrl>>>()?;
    let coordination = with_database(&settings.mysql.url, &scratch)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let databases: Vec<&MysqlUrl> = std::iter::once(&coordination).chain(&shards).collect();
        let result = bench(&settings, &args, &coordination, &shards).await;
        for url in databases {
            if let Err(e) = drop_database(url).await {
                tracing::warn!("dropping scratch database {}: {e}", url.redacted());
            }
        }
        result
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(
    settings: &Settings,
    args: &ShardsArgs,
    coordination: &MysqlUrl,
    shards: &[MysqlUrl],
) -> anyhow::Result<()> {
    let known = migrate::builtin()?;
    mysql::create_database(coordination).await?;
    let mut coordination_conn = mysql::connect(coordination).await?;
    migrate::apply(&mut coordination_conn, &known).await?;
    let mut shard_conns = Vec::with_capacity(shards.len());
    for url in shards {
        shard_conns.push(migrated(settings, url).await?);
    }

    let batch_rows = settings.batch.max_rows.max(1);
    let (partitions, message_bytes) =
        make_batches(settings, args.rows, batch_rows, args.partitions)?;
    let partitions = Arc::new(partitions);
    let mut out = Output::new();
    out.json(&json!({
        "rows": args.rows,
        "mean_message_bytes": message_bytes / args.rows,
        "batch_rows": batch_rows,
        "partitions": args.partitions,
        "concurrency_per_shard": settings.store.concurrency,
        "insert_method": settings.store.insert_method.to_string(),
    }))?;
    out.flush()?;

    let mut results: Vec<(usize, f64)> = Vec::new();
    for run in 1..=args.runs {
        for count in 1..=shards.len() {
            coordination_conn
                .query_drop("DELETE FROM shard_assignments")
                .await?;
            for conn in &mut shard_conns {
                for table in [
                    settings.store.table.as_str(),
                    "ingest_offsets",
                    "dead_letters",
                ] {
                    conn.query_drop(format!("TRUNCATE TABLE `{table}`")).await?;
                }
            }
            let store = logstamp::store::settings::StoreSettings {
                shards: shards[..count].to_vec(),
                // Batches are stamped once, before the runs, and written again in each.
                commit_window: DurationOrOff(None),
                ..settings.store.clone()
            };
            let writer = Writer::new(
                coordination,
                &store,
                &settings.rollup_plans,
                settings.id.layout,
            )?;
            let started = Instant::now();
            write_all(&writer, &partitions).await?;
            let seconds = started.elapsed().as_secs_f64();
            writer.close().await?;
            let mut stored = 0;
            for conn in &mut shard_conns {
                let n: Option<u64> = conn
                    .query_first(format!("SELECT COUNT(*) FROM {}", settings.store.table))
                    .await?;
                stored += n.unwrap_or(0);
            }
            if stored != args.rows as u64 {
                bail!("{count} shards stored {stored} rows of {}", args.rows);
            }
            let rate = args.rows as f64 / seconds;
            out.json(&json!({
                "shards": count,
                "run": run,
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "rows_per_second": rate.round(),
            }))?;
            out.flush()?;
            results.push((count, rate));
        }
    }
    let rates = |count: usize| -> Vec<f64> {
        results
            .iter()
            .filter(|(c, _)| *c == count)
            .map(|(_, r)| *r)
            .collect()
    };
    let one = median(rates(1));
    for count in 1..=shards.len() {
        let rate = median(rates(count));
        out.json(&json!({
            "summary_shards": count,
            "runs": args.runs,
            "median_rows_per_second": rate.round(),
            "ratio_to_one_shard": (100.0 * rate / one).round() / 100.0,
        }))?;
    }
    out.finish()?;
    coordination_conn.disconnect().await?;
    for conn in shard_conns {
        conn.disconnect().await?;
    }
    Ok(())
}
