//! `logstamp query`: the log rows of a time range, optionally filtered, as JSON lines or a table.

use std::io;
use std::ops::ControlFlow;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use chrono::{DateTime, Utc};

use logstamp::config::{Settings, Sources};
use logstamp::mysql::bound::within;
use logstamp::mysql::{self, DbError, Ident};
use logstamp::store::filter_language::{Condition, Literal, Op, parse_filter};
use logstamp::store::follow::{self, Follow, FollowFrom};
use logstamp::store::line_counts;
use logstamp::store::log_table::TableSpec;
use logstamp::store::query::{self, EventQuery, Order, Record, TimeQuery};
use logstamp::store::rollup::{self, RollupRecord};
use logstamp::store::rollup_plan::RollupPlan;
use logstamp::store::schema::ColumnType;
use logstamp::store::shards::ShardSet;
use logstamp::time::unix_seconds;

use super::db::{block_on, step, with_conn, with_steps};
use super::output::{Format, Output, aligned, ignore_closed_pipe};
use super::{TimeRangeArgs, UsageError, load_settings};

#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    time: TimeRangeArgs,
    /// Read this table of the settings: store.table (the default) or one of store.tables.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// Read this rollup's rows whose bucket starts in the range, instead of log rows.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["table", "filter", "explain"])]
    rollup: Option<String>,
    /// Filter: `column OP value` joined by `and`; OP is = != < <= > >= like contains or
    /// icontains; values are quoted text or numbers; columns are those of store.columns.
    #[arg(long = "where", value_name = "FILTER")]
    filter: Option<String>,
    /// Only rows whose --grep-column holds TEXT anywhere, character for character (no
    /// wildcards): `contains` added to --where, read only where the text filter may hold it.
    #[arg(long, value_name = "TEXT", conflicts_with = "rollup")]
    grep: Option<String>,
    /// With --grep: compare in lower case (`icontains`).
    #[arg(long, short = 'i', requires = "grep")]
    ignore_case: bool,
    /// With --grep: the text column searched.
    #[arg(
        long,
        value_name = "COLUMN",
        default_value = "message",
        requires = "grep"
    )]
    grep_column: String,
    /// At most N rows.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// json (one object per line) or table.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
    /// Print the partitions MySQL would read instead of the rows.
    #[arg(long)]
    explain: bool,
    /// Which time the range is of: id (when the record was stamped, the ID's time) or event
    /// (its event-time column, store.event_time, found through the zone map).
    #[arg(long, value_enum, default_value = "id", conflicts_with = "rollup")]
    by: TimeKind,
    /// Keep printing rows as they are committed, like `tail -f`, until SIGINT or SIGTERM (or
    /// --limit rows): from --from/--since if given, else only rows committed from now on.
    #[arg(long, conflicts_with_all = ["explain", "rollup"])]
    follow: bool,
    /// Print how many lines each minute (or --interval) holds per level, summed from the line
    /// counts every table keeps (whole minutes: the range is widened to them), instead of
    /// the rows; by ID time or, with --by event, by event time.
    #[arg(long, conflicts_with_all = ["explain", "rollup", "follow", "filter", "limit"])]
    count: bool,
    /// With --count: seconds per count, a multiple of 60.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, requires = "count")]
    interval: u64,
}

/// The conditions of --where and --grep.
fn filter(args: &QueryArgs, spec: &TableSpec) -> Result<Vec<Condition>, UsageError> {
    let mut filter = match &args.filter {
        Some(text) => {
            parse_filter(text, &spec.columns).map_err(|e| UsageError::new("--where", e))?
        }
        None => Vec::new(),
    };
    if let Some(text) = &args.grep {
        let texts: Vec<&str> = spec
            .columns
            .iter()
            .filter(|c| matches!(c.column_type, ColumnType::String | ColumnType::Text))
            .map(|c| c.name.as_str())
            .collect();
        let column = texts
            .iter()
            .find(|name| name.eq_ignore_ascii_case(&args.grep_column))
            .ok_or_else(|| {
                UsageError::new(
                    "--grep-column",
                    format!(
                        "{} is not a text column of table {} (text columns: {})",
                        args.grep_column,
                        spec.table,
                        texts.join(", ")
                    ),
                )
            })?;
        filter.push(Condition {
            column: Ident::new(column).map_err(|e| UsageError::new("--grep-column", e))?,
            op: if args.ignore_case {
                Op::IContains
            } else {
                Op::Contains
            },
            value: Literal::Text(text.clone()),
        });
    }
    Ok(filter)
}

/// The two times of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TimeKind {
    Id,
    Event,
}

#[derive(Serialize)]
struct Explained<'a> {
    /// With store.shards: the shard whose partitions these are.
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<String>,
    table: &'a str,
    start_id: u64,
    end_id: u64,
    partitions: Vec<String>,
}

#[derive(Serialize)]
struct ExplainedByEvent<'a> {
    table: &'a str,
    by: &'static str,
    from: String,
    to: String,
    /// The ID ranges whose minutes of stamp time hold rows of the range.
    ranges: Vec<Range>,
    partitions: Vec<String>,
}

#[derive(Serialize)]
struct Range {
    start_id: u64,
    end_id: u64,
}

pub fn run(args: QueryArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&sources)?;
    if !settings.store.shards.is_empty() && (args.follow || args.by == TimeKind::Event) {
        return Err(UsageError::new(
            if args.follow {
                "--follow"
            } else {
                "--by event"
            },
            "reads one database, and store.shards lists several: query by ID time, or \
             through the front server of `logstamp shards federate`",
        )
        .into());
    }
    if args.follow {
        return follow(&settings, &args);
    }
    let (from, to) = args.time.parse()?;
    if let Some(name) = &args.rollup {
        return read_rollup(&settings, name, (from, to), args.format);
    }
    let spec = table_spec(&settings, args.table.as_deref())?;
    if args.count {
        let time = match args.by {
            TimeKind::Id => line_counts::Time::Id,
            TimeKind::Event => line_counts::Time::Event,
        };
        let range = (unix_seconds(from), unix_seconds(to));
        return super::counts::print(&settings, &spec, time, args.interval, range, args.format);
    }
    if args.by == TimeKind::Event {
        return by_event(&settings, &spec, &args, (from, to));
    }
    let mut query = TimeQuery::between(&settings.id.layout, from, to)
        .map_err(|e| UsageError::new("--from/--to", e))?;
    query.filter = filter(&args, &spec)?;
    query.limit = args.limit;
    let range = query.range;
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    let mut out = Output::new();
    if args.explain {
        for (name, url) in &set.shards {
            let partitions = with_conn(&settings.mysql, url, async |conn| {
                query::explain_partitions(conn, &spec, &query).await
            })?;
            out.json(&Explained {
                shard: set.sharded.then(|| name.to_string()),
                table: spec.table.as_str(),
                start_id: range.start,
                end_id: range.end,
                partitions,
            })
            .context("writing output")?;
        }
        out.finish().context("writing output")?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut sink = Sink::new(out, args.format, header(&spec));
    // One step on every shard at once: its bound names them all.
    let shards: Vec<String> = set
        .shards
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    let what = || format!("{} at {}", step(), shards.join(", "));
    block_on(within(settings.mysql.statement_timeout, what, async {
        let mut conns = connect_all(&set).await?;
        let result = query::run_merged(&mut conns, &spec, &query, Order::OldestFirst, |record| {
            sink.push(record)
        })
        .await;
        for conn in conns {
            let _ = conn.disconnect().await;
        }
        result
    }))??;
    sink.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// A connection to each shard (the one database, unsharded), made at once.
async fn connect_all(set: &ShardSet) -> Result<Vec<mysql_async::Conn>, DbError> {
    futures_util::future::try_join_all(set.shards.iter().map(|(_, url)| mysql::connect(url))).await
}

/// `query --by event`: the rows whose event time is in `[from, to)`, through the zone map.
fn by_event(
    settings: &Settings,
    spec: &TableSpec,
    args: &QueryArgs,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
) -> anyhow::Result<ExitCode> {
    if spec.event_time.is_none() {
        return Err(UsageError::new(
            "--by event",
            format!(
                "table {} has no event time: set store.event_time (or event_time of its \
                 [[store.tables]]) and run `logstamp zonemap rebuild` for the rows already there",
                spec.table.as_str()
            ),
        )
        .into());
    }
    if from > to {
        return Err(UsageError::new("--from/--to", "the range is reversed").into());
    }
    let mut query = EventQuery::between(from, to);
    query.filter = filter(args, spec)?;
    query.limit = args.limit;
    let url = settings.mysql.url.clone();
    if args.explain {
        let (ranges, partitions) = with_conn(&settings.mysql, &url, async |conn| {
            query::explain_by_event(conn, spec, &query).await
        })?;
        let mut out = Output::new();
        out.json(&ExplainedByEvent {
            table: spec.table.as_str(),
            by: "event",
            from: from.to_rfc3339(),
            to: to.to_rfc3339(),
            ranges: ranges
                .iter()
                .map(|r| Range {
                    start_id: r.start,
                    end_id: r.end,
                })
                .collect(),
            partitions,
        })
        .context("writing output")?;
        out.finish().context("writing output")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut sink = Sink::new(Output::new(), args.format, header(spec));
    with_conn(&settings.mysql, &url, async |conn| {
        query::run_by_event(conn, spec, &query, |record| sink.push(record)).await
    })?;
    sink.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// `query --follow`: new rows as they are committed (see `logstamp::store::follow`).
fn follow(settings: &Settings, args: &QueryArgs) -> anyhow::Result<ExitCode> {
    if args.by == TimeKind::Event {
        return Err(UsageError::new(
            "--follow",
            "follows rows as they are stamped and committed; use it without --by event \
             (--where can filter on the event time)",
        )
        .into());
    }
    let spec = table_spec(settings, args.table.as_deref())?;
    let layout = settings.id.layout;
    let window = settings.store.commit_window().ok_or_else(|| {
        UsageError::new(
            "--follow",
            "store.commit_window is off: without it no row is ever known to be the last of its \
             second; set it (the workers' too)",
        )
    })?;
    let from = match args.time.parse_open()?.0 {
        Some(from) => FollowFrom::Id(
            layout
                .first_id_at(from.timestamp())
                .map_err(|e| UsageError::new("--from", e))?,
        ),
        None => FollowFrom::Now,
    };
    let mut plan = Follow {
        from,
        window,
        poll: FOLLOW_POLL,
        filter: Vec::new(),
        bound: settings.mysql.bound_on(&settings.mysql.url),
    };
    plan.filter = filter(args, &spec)?;
    let mut sink = Sink::new(Output::new(), args.format, header(&spec));
    sink.live = true;
    let limit = args.limit;
    let url = settings.mysql.url.clone();
    with_steps(&url, async |conn| {
        let mut printed = 0u64;
        let following = follow::follow(conn, &spec, &layout, &plan, |record| {
            printed += 1;
            match sink.push(record) {
                ControlFlow::Continue(()) if limit.is_none_or(|l| printed < l) => {
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Break(()),
            }
        });
        tokio::select! {
            result = following => result.map(|_| ()),
            () = super::relay::wait_for_signal() => Ok(()),
        }
    })?;
    sink.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// How often `--follow` looks for new rows.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// The column names a table's rows print with.
fn header(spec: &TableSpec) -> Vec<String> {
    let mut header = vec!["id".to_string()];
    header.extend(spec.columns.iter().map(|c| c.name.clone()));
    if spec.payload {
        header.push("payload".into());
    }
    header
}

/// The log table or the fan-out table named.
pub fn table_spec(settings: &Settings, name: Option<&str>) -> Result<TableSpec, UsageError> {
    let Some(name) = name else {
        return Ok(settings.log_table());
    };
    let all = settings.tables();
    let names: Vec<String> = all.iter().map(|t| t.table.as_str().to_string()).collect();
    all.into_iter()
        .find(|t| t.table.as_str() == name)
        .ok_or_else(|| {
            UsageError::new(
                "--table",
                format!(
                    "{name} is not a table of the settings ({})",
                    names.join(", ")
                ),
            )
        })
}

/// The rollup named in the settings; `flag` is where the name was given, for the error.
pub fn rollup_plan<'a>(
    settings: &'a Settings,
    name: &str,
    flag: &str,
) -> Result<&'a RollupPlan, UsageError> {
    settings
        .rollup_plans
        .iter()
        .find(|p| p.name.as_str() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = settings
                .rollup_plans
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            UsageError::new(
                flag,
                if names.is_empty() {
                    format!("{name}: the settings define no rollups ([[rollups]])")
                } else {
                    format!(
                        "{name} is not a rollup of the settings ({})",
                        names.join(", ")
                    )
                },
            )
        })
}

/// `query --rollup`: the rollup rows whose bucket starts in `[from, to)`.
fn read_rollup(
    settings: &Settings,
    name: &str,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    format: Format,
) -> anyhow::Result<ExitCode> {
    let plan = rollup_plan(settings, name, "--rollup")?;
    let range = (unix_seconds(from), unix_seconds(to));
    let header = plan.column_names().iter().map(|c| c.to_string()).collect();
    let mut sink = Sink::new(Output::new(), format, header);
    let set = ShardSet::new(&settings.mysql.url, &settings.store);
    if !set.sharded {
        with_conn(&settings.mysql, &settings.mysql.url, async |conn| {
            rollup::read(conn, plan, range, |record| sink.push(record)).await
        })?;
    } else {
        // Each shard counts its own partitions' records: the rows of a key add up.
        let mut shards = Vec::with_capacity(set.shards.len());
        for (_, url) in &set.shards {
            let mut rows = Vec::new();
            with_conn(&settings.mysql, url, async |conn| {
                rollup::read(conn, plan, range, |record| {
                    rows.push(record);
                    ControlFlow::Continue(())
                })
                .await
            })?;
            shards.push(rows);
        }
        for record in rollup::merge(plan, shards) {
            if sink.push(record).is_break() {
                break;
            }
        }
    }
    sink.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

/// Rows buffered before a table's column widths are fixed; later rows are cut to fit.
const TABLE_SAMPLE_ROWS: usize = 100;
/// Widest a table cell gets.
const TABLE_MAX_WIDTH: usize = 40;

/// Where rows go as they arrive. Stops the query when stdout fails, keeping the error.
struct Sink {
    out: Output,
    format: Format,
    header: Vec<String>,
    sample: Vec<Vec<String>>,
    widths: Option<Vec<usize>>,
    failed: Option<io::Error>,
    /// Print each row at once (`--follow`), instead of buffering.
    live: bool,
}

/// A row as the sink prints it: JSON for `--format json`, cells for a table.
trait Printed: Serialize {
    fn cells(&self) -> Vec<String>;
}

impl Printed for Record {
    fn cells(&self) -> Vec<String> {
        let mut cells = vec![self.id.to_string()];
        cells.extend(self.columns.iter().map(|(_, value)| cell(value)));
        cells
    }
}

impl Printed for RollupRecord {
    fn cells(&self) -> Vec<String> {
        self.columns.iter().map(|(_, value)| cell(value)).collect()
    }
}

impl Sink {
    fn new(out: Output, format: Format, header: Vec<String>) -> Sink {
        Sink {
            out,
            format,
            header,
            sample: Vec::new(),
            widths: None,
            failed: None,
            live: false,
        }
    }

    fn push(&mut self, record: impl Printed) -> ControlFlow<()> {
        let written = match self.format {
            Format::Json => self.out.json(&record),
            Format::Table => {
                self.sample.push(record.cells());
                if self.sample.len() >= TABLE_SAMPLE_ROWS || self.widths.is_some() || self.live {
                    self.flush_table()
                } else {
                    Ok(())
                }
            }
        };
        let written = match written {
            Ok(()) if self.live => self.out.flush(),
            other => other,
        };
        match written {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.failed = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    /// Prints the buffered rows, fixing the column widths on the first call.
    fn flush_table(&mut self) -> io::Result<()> {
        let rows = std::mem::take(&mut self.sample);
        let widths = match &self.widths {
            Some(widths) => widths.clone(),
            None => {
                let header: Vec<&str> = self.header.iter().map(String::as_str).collect();
                let lines = aligned(
                    &header,
                    &rows.iter().map(|r| fit(r, None)).collect::<Vec<_>>(),
                );
                let widths = column_widths(&self.header, &rows);
                self.widths = Some(widths);
                return lines.iter().try_for_each(|l| self.out.line(l));
            }
        };
        for row in rows {
            let padded: Vec<String> = fit(&row, Some(&widths))
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            self.out.line(padded.join("  ").trim_end())?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        if let Some(e) = self.failed.take() {
            return ignore_closed_pipe(Err(e));
        }
        if self.format == Format::Table {
            ignore_closed_pipe(self.flush_table())?;
        }
        self.out.finish()
    }
}

/// A value as a table cell: strings as they are (control characters escaped so a row stays one
/// line), NULL as NULL, anything else as compact JSON.
fn cell(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s
            .chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().collect()
                } else {
                    c.to_string()
                }
            })
            .collect(),
        serde_json::Value::Null => "NULL".into(),
        other => other.to_string(),
    }
}

fn column_widths(header: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count().min(TABLE_MAX_WIDTH))
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// Cells cut to their column's width (or to the widest allowed), marking the cut with `…`.
fn fit(row: &[String], widths: Option<&[usize]>) -> Vec<String> {
    row.iter()
        .enumerate()
        .map(|(i, cell)| {
            let width = widths
                .and_then(|w| w.get(i).copied())
                .unwrap_or(TABLE_MAX_WIDTH);
            if cell.chars().count() > width {
                let kept: String = cell.chars().take(width.saturating_sub(1)).collect();
                format!("{kept}…")
            } else {
                cell.clone()
            }
        })
        .collect()
}
