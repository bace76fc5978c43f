//! `logstamp shards list | move`: where each Kafka partition's rows and offset live when the
//! store has several databases (`store.shards`).

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use logstamp::config::Sources;
use logstamp::mysql::bound::within;
use logstamp::mysql::{self, Ident, MysqlUrl};
use logstamp::store::federate;
use logstamp::store::shard_plan::{PartitionKey, ShardName};
use logstamp::store::shards::{self, Assignment, ShardSet};

use super::db::{block_on, now_or, step, with_conn};
use super::output::{Format, Output, aligned, ignore_closed_pipe};
use super::{UsageError, load_settings};

#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// Each partition's shard, from the coordination database (mysql.url).
    List(ListArgs),
    /// Move a partition, its offset with it, to another shard; workers may be running.
    Move(MoveArgs),
    /// Make every shard's tables readable as one on a front MariaDB server with Spider: a
    /// Spider table per shard and a view of their union under each table's name.
    Federate(FederateArgs),
}

#[derive(Debug, Args)]
pub struct FederateArgs {
    /// The front server's database, mysql://user[:password]@host:port/database (created if
    /// missing) [default: mysql.url].
    #[arg(long, value_name = "URL")]
    front: Option<String>,
    /// Print the statements instead of running them (passwords shown as ***).
    #[arg(long)]
    print: bool,
}

/// What `shards federate` made.
#[derive(Serialize)]
struct Federated {
    action: &'static str,
    front: String,
    shards: usize,
    tables: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
}

#[derive(Debug, Args)]
pub struct MoveArgs {
    topic: String,
    partition: i32,
    /// The shard: its position in store.shards (from 0) or its host:port/database.
    #[arg(long, value_name = "SHARD")]
    to: String,
    /// The consumer group; default kafka.group_id.
    #[arg(long)]
    group: Option<String>,
    /// Act as if the time were TIME (for tests).
    #[arg(long, hide = true, value_name = "TIME")]
    now: Option<String>,
}

/// An assignment as listed: with whether `store.shards` still lists its shard.
#[derive(Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    row: &'a Assignment,
    listed: bool,
}

pub fn run(command: ShardsCommand, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    if !set.sharded {
        return Err(UsageError(
            "store.shards is empty: every partition is in mysql.url's database".into(),
        )
        .into());
    }
    let mut out = Output::new();
    let written = match command {
        ShardsCommand::List(args) => {
            let rows = with_conn(&settings.mysql, &set.coordination, async |conn| {
                shards::assignments(conn).await
            })?;
            write_list(&mut out, args.format, &set, &rows)
        }
        ShardsCommand::Move(args) => {
            let to = set.find(&args.to).map_err(|e| UsageError::new("--to", e))?;
            let now = now_or(args.now.as_deref())?;
            let key = PartitionKey {
                group: args
                    .group
                    .unwrap_or_else(|| settings.kafka.group_id.clone()),
                topic: args.topic,
                partition: args.partition,
            };
            // One step on the coordination database and two shards: its bound names them all.
            let what = || {
                let shards = set.shards.iter().map(|(name, _)| name.to_string());
                let names: Vec<String> =
                    std::iter::once(ShardName::of(&set.coordination).to_string())
                        .chain(shards)
                        .collect();
                format!("{} at {}", step(), names.join(", "))
            };
            let moving = shards::move_partition(&set, &key, to, now);
            let moved = block_on(within(settings.mysql.statement_timeout, what, moving))??;
            out.json(&moved)
        }
        ShardsCommand::Federate(args) => {
            let front = match args.front {
                Some(text) => {
                    MysqlUrl::try_from(text).map_err(|e| UsageError::new("--front", e))?
                }
                None => settings.mysql.url.clone(),
            };
            let front_db =
                Ident::new(front.database()).map_err(|e| UsageError::new("--front", e))?;
            let remotes = set
                .shards
                .iter()
                .map(|(_, url)| federate::Remote::of(url))
                .collect::<Result<Vec<_>, _>>()?;
            let tables = settings.tables();
            if args.print {
                let sql = federate::statements(&front_db, &remotes, &tables, false);
                sql.iter().try_for_each(|s| out.line(&format!("{s};")))
            } else {
                let sql = federate::statements(&front_db, &remotes, &tables, true);
                block_on(mysql::create_database(&front))??;
                with_conn(&settings.mysql, &front, async |conn| {
                    federate::apply(conn, &sql).await
                })?;
                out.json(&Federated {
                    action: "federated",
                    front: ShardName::of(&front).to_string(),
                    shards: remotes.len(),
                    tables: tables
                        .iter()
                        .map(|t| t.table.as_str().to_string())
                        .collect(),
                })
            }
        }
    };
    ignore_closed_pipe(written).context("writing output")?;
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

fn write_list(
    out: &mut Output,
    format: Format,
    set: &ShardSet,
    rows: &[Assignment],
) -> std::io::Result<()> {
    let listed = |row: &Assignment| set.index_of(&ShardName(row.shard.clone())).is_some();
    match format {
        Format::Json => {
            for row in rows {
                out.json(&Listed {
                    row,
                    listed: listed(row),
                })?;
            }
            Ok(())
        }
        Format::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| {
                    vec![
                        row.consumer_group.clone(),
                        row.topic.clone(),
                        row.partition.to_string(),
                        if listed(row) {
                            row.shard.clone()
                        } else {
                            format!("{} (not in store.shards)", row.shard)
                        },
                        row.assigned_at.clone(),
                    ]
                })
                .collect();
            let header = ["GROUP", "TOPIC", "PARTITION", "SHARD", "ASSIGNED_AT"];
            for line in aligned(&header, &cells) {
                out.line(&line)?;
            }
            Ok(())
        }
    }
}
