//! `logstamp leases list | release`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::store::lease::{self, LeaseRow};
use logstamp::time::format_utc;

use super::db::with_conn;
use super::load_settings;
use super::output::{Output, aligned, ignore_closed_pipe};

#[derive(Debug, Subcommand)]
pub enum LeasesCommand {
    /// Show every service-ID lease: holder, expiry, high-water mark, live or expired.
    List(ListArgs),
    /// End the lease of a holder that died, so its service ID can be claimed before it expires.
    Release(ReleaseArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// json (one object per line), table, or prometheus: a file_sd target list of the live
    /// holders' telemetry addresses, for Prometheus to scrape the fleet.
    #[arg(long, value_enum, default_value = "json")]
    format: ListFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ListFormat {
    Json,
    Table,
    Prometheus,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The service ID.
    #[arg(value_name = "ID")]
    service_id: u32,
    /// Required: check first that the holder shown by `leases list` is gone. A holder still
    /// running stops issuing IDs at its next renewal; IDs stay unique either way, because the
    /// high-water mark is kept.
    #[arg(long, required = true)]
    force: bool,
}

pub fn run(command: LeasesCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let mut out = Output::new();
    let written = match command {
        LeasesCommand::List(args) => {
            let rows = with_conn(&settings.mysql, &settings.mysql.url, async |conn| {
                lease::list(conn).await
            })?;
            write_list(&mut out, args.format, &rows)
        }
        LeasesCommand::Release(args) => {
            let before = with_conn(&settings.mysql, &settings.mysql.url, async |conn| {
                lease::force_release(conn, args.service_id).await
            })?;
            out.json(&release_line(args.service_id, before.as_ref()))
        }
    };
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// A lease as listed: the row, and its mark as a time.
#[derive(Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    row: &'a LeaseRow,
    mark_time: String,
}

fn write_list(out: &mut Output, format: ListFormat, rows: &[LeaseRow]) -> std::io::Result<()> {
    let mark_time = |row: &LeaseRow| format_utc(row.issued_seconds_mark);
    match format {
        ListFormat::Prometheus => out.json(&scrape_targets(rows)),
        ListFormat::Json => rows.iter().try_for_each(|row| {
            out.json(&Listed {
                row,
                mark_time: mark_time(row),
            })
        }),
        ListFormat::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| {
                    vec![
                        row.service_id.to_string(),
                        if row.live { "live" } else { "expired" }.to_string(),
                        row.host.clone(),
                        row.pid.to_string(),
                        row.telemetry_address.clone().unwrap_or_default(),
                        row.expires_at.clone(),
                        row.issued_seconds_mark.to_string(),
                        mark_time(row),
                    ]
                })
                .collect();
            aligned(
                &[
                    "service_id",
                    "state",
                    "host",
                    "pid",
                    "telemetry",
                    "expires_at",
                    "mark",
                    "mark_time",
                ],
                &cells,
            )
            .iter()
            .try_for_each(|line| out.line(line))
        }
    }
}

/// One target group of Prometheus' file-based discovery (`file_sd_configs`).
#[derive(Serialize)]
struct TargetGroup {
    targets: [String; 1],
    labels: BTreeMap<&'static str, String>,
}

/// The live holders that said where they serve, each with its service ID and host as labels.
fn scrape_targets(rows: &[LeaseRow]) -> Vec<TargetGroup> {
    rows.iter()
        .filter(|row| row.live)
        .filter_map(|row| {
            let address = row.telemetry_address.clone()?;
            let labels = BTreeMap::from([
                ("logstamp_service_id", row.service_id.to_string()),
                ("logstamp_host", row.host.clone()),
            ]);
            Some(TargetGroup {
                targets: [address],
                labels,
            })
        })
        .collect()
}

#[derive(Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
enum ReleaseLine<'a> {
    /// A live lease was ended; the row shows its holder.
    Released {
        #[serde(flatten)]
        row: &'a LeaseRow,
    },
    /// The ID had no live lease: nothing was changed.
    NotHeld { service_id: u32 },
}

fn release_line(service_id: u32, before: Option<&LeaseRow>) -> ReleaseLine<'_> {
    match before {
        Some(row) => ReleaseLine::Released { row },
        None => ReleaseLine::NotHeld { service_id },
    }
}
