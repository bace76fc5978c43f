//! `partitions compress`: rebuilds, one at a time, the partitions of a table whose file is not
//! compressed as its setting says. A partition keeps the algorithm it was made with (see
//! [`super::compression`]), so changing `store.compression` changes only partitions made after;
//! this brings the older ones in line.

use std::time::Instant;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::Serialize;

use super::compression::{FileCompression, check_server, files};
use super::log_table::{TableSpec, read_partitioning};
use crate::mysql::bound::Bound;
use crate::mysql::{DbError, Flavor};

/// One partition of `partitions compress`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recompressed {
    pub table: String,
    pub partition: String,
    /// Its place among the partitions to rebuild, from 1, and how many there are.
    pub done: usize,
    pub of: usize,
    pub from: &'static str,
    pub to: String,
    pub bytes_before: u64,
    /// `None` in a dry run.
    pub bytes_after: Option<u64>,
    pub seconds: f64,
}

/// Rebuilds, one at a time, the partitions of `spec`'s table whose file is not compressed as
/// `spec.compression` says, handing each to `each` as it is done (with `dry_run`, only says
/// which). Each rebuild copies one partition (`REORGANIZE PARTITION` into itself, with the
/// setting's options), during which writes to the table wait. The caller holds the table's
/// lock, so partition maintenance does not run meanwhile. The reads before, and each
/// partition's rebuild, are each within `bound`.
pub async fn recompress(
    conn: &mut Conn,
    spec: &TableSpec,
    dry_run: bool,
    bound: &Bound,
    mut each: impl FnMut(Recompressed),
) -> Result<usize, DbError> {
    let table = &spec.table;
    let wanted = spec.compression;
    let what = || format!("reading the partitions of {table}");
    let read = async {
        check_server(conn, wanted).await?;
        let partitioning = read_partitioning(conn, table).await?;
        Ok::<_, DbError>((partitioning, files(conn, table.as_str()).await?))
    };
    let (partitioning, before) = bound.wait(what, read).await?;
    let partitioning = partitioning.ok_or_else(|| {
        DbError::catalog(
            table.as_str(),
            format!("table {table} does not exist: run logstamp migrate"),
        )
    })?;
    let todo: Vec<(&FileCompression, Option<u64>)> = partitioning
        .partitions
        .iter()
        .filter_map(|p| {
            let file = before.iter().find(|f| f.partition == p.name)?;
            (!file.is(wanted)).then_some((file, p.less_than))
        })
        .collect();
    for (done, (file, less_than)) in todo.iter().enumerate() {
        let started = Instant::now();
        let bytes_after = if dry_run {
            None
        } else {
            let less = less_than.map_or("MAXVALUE".to_string(), |b| format!("({b})"));
            let name = format!("`{}`", file.partition.replace('`', "``"));
            let sql = format!(
                "ALTER TABLE {table} REORGANIZE PARTITION {name} INTO \
                 (PARTITION {name} VALUES LESS THAN {less}{})",
                wanted.options(Flavor::MariaDb)
            );
            let what = || format!("rebuilding partition {} of table {table}", file.partition);
            let rebuild = async {
                conn.query_drop(sql).await.map_err(DbError::mysql(what()))?;
                files(conn, table.as_str()).await
            };
            let after = bound.wait(what, rebuild).await?;
            after
                .iter()
                .find(|f| f.partition == file.partition)
                .map(|f| f.bytes_on_disk)
        };
        each(Recompressed {
            table: table.as_str().to_string(),
            partition: file.partition.clone(),
            done: done + 1,
            of: todo.len(),
            from: file.algorithm,
            to: wanted.to_string(),
            bytes_before: file.bytes_on_disk,
            bytes_after,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(todo.len())
}
