//! What the commands that rebuild a table's bookkeeping from its rows (`zonemap`, `counts` and
//! `search rebuild`) share: the tables `--table` picks, the IDs `--from/--to` ask for, and a
//! pass over every shard's database, since each shard keeps the bookkeeping of its own rows.

use std::process::ExitCode;

use anyhow::Context;

use logstamp::config::Settings;
use logstamp::id::{IdRange, Layout};
use logstamp::mysql::MysqlUrl;
use logstamp::store::shards::ShardSet;
use logstamp::time::{ceil_seconds, floor_seconds};

use super::output::Output;
use super::{TimeRangeArgs, UsageError};

/// The plan of the table `--table` names among `all`, or all of them without it. `kind` ends
/// the error's "NAME is not ...", e.g. "a table with an event time".
pub fn named<P: Clone>(
    all: Vec<P>,
    table: Option<&str>,
    table_of: impl Fn(&P) -> &str,
    kind: &str,
) -> Result<Vec<P>, UsageError> {
    let Some(name) = table else {
        return Ok(all);
    };
    let found = all.iter().find(|p| table_of(p) == name).cloned();
    found.map(|p| vec![p]).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(&table_of).collect();
        UsageError::new(
            "--table",
            format!("{name} is not {kind} ({})", names.join(", ")),
        )
    })
}

/// The IDs `--from/--to` ask for, widened to whole seconds; `None` without `--from` or
/// `--since`: the whole table.
pub fn asked_ids(time: &TimeRangeArgs, layout: &Layout) -> Result<Option<IdRange>, UsageError> {
    match time.parse_open()? {
        (Some(from), to) => layout
            .id_range(floor_seconds(from), ceil_seconds(to))
            .map(Some)
            .map_err(|e| UsageError::new("--from/--to", e)),
        (None, _) => Ok(None),
    }
}

/// Runs `each` on the database of every shard (the one database without shards), naming the
/// shard in the output before its reports when there are shards.
pub fn on_every_shard(
    settings: &Settings,
    mut each: impl FnMut(&MysqlUrl, &mut Output) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    for (name, url) in &set.shards {
        if set.sharded {
            out.database(name, "shard").context("writing output")?;
        }
        each(url, &mut out)?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}
