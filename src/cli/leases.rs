//! `logstamp leases list | release`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::store::lease::{self, LeaseRow};
use logstamp::time::format_utc;

use super::db::with_conn;
use super::load_settings;
use super::output::{Format, Output, aligned, ignore_closed_pipe};

#[derive(Debug, Subcommand)]
pub enum LeasesCommand {
    /// Show every service-ID lease: holder, expiry, high-water mark, live or expired.
    List(ListArgs),
    /// End the lease of a holder that died, so its service ID can be claimed before it expires.
    Release(ReleaseArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// json (one object per line) or table.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
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
            let rows = with_conn(&settings.mysql.url, async |conn| lease::list(conn).await)?;
            write_list(&mut out, args.format, &rows)
        }
        LeasesCommand::Release(args) => {
            let before = with_conn(&settings.mysql.url, async |conn| {
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

fn write_list(out: &mut Output, format: Format, rows: &[LeaseRow]) -> std::io::Result<()> {
    let mark_time = |row: &LeaseRow| format_utc(row.issued_seconds_mark);
    match format {
        Format::Json => rows.iter().try_for_each(|row| {
            out.json(&Listed {
                row,
                mark_time: mark_time(row),
            })
        }),
        Format::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| {
                    vec![
                        row.service_id.to_string(),
                        if row.live { "live" } else { "expired" }.to_string(),
                        row.host.clone(),
                        row.pid.to_string(),
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
