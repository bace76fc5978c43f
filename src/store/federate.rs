//! `logstamp shards federate`: one SQL endpoint over every shard. On a front MariaDB server with
//! the Spider engine, each shard's copy of a table is a Spider table (`TABLE_s0`, `TABLE_s1`,
//! ...) and the table's own name is a view, their `UNION ALL`. MariaDB pushes a query's
//! conditions into each branch of the view, and Spider sends them to its shard, so an ID-range
//! query reaches every shard as that range and each shard reads only the partitions holding it.
//!
//! Why not a Spider table partitioned over the shards: Spider sends a row to the partition its
//! partition function names, and prunes queries by it; logstamp places rows by Kafka partition,
//! which no column holds, so any partitioning by a column would prune a query on that column to
//! one shard and miss the rows the others hold. CONNECT's MYSQL and TBL tables would union the
//! shards, but CONNECT takes no TEXT or JSON columns (`message` is MEDIUMTEXT, `payload` JSON):
//! it refuses them, or converts them to VARCHAR and cuts long values.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::log_table::TableSpec;
use super::schema::column_definitions;
use crate::mysql::encode::push_sql_string;
use crate::mysql::rows::first;
use crate::mysql::{self, DbError, Ident, MysqlUrl};

/// Where a shard is, as the front server's `CREATE SERVER` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
}

impl Remote {
    pub fn of(url: &MysqlUrl) -> Result<Remote, DbError> {
        let opts = mysql::opts(url)?;
        Ok(Remote {
            host: opts.ip_or_hostname().to_string(),
            port: opts.tcp_port(),
            user: opts.user().unwrap_or_default().to_string(),
            password: opts.pass().map(str::to_string),
            database: url.database().to_string(),
        })
    }
}

/// The statements that make, or remake, the federated tables in the front database `front`:
/// a server per shard, a Spider table per shard and table, and a view per table. Passwords are
/// written as `***` unless `show_passwords`.
pub fn statements(
    front: &Ident,
    shards: &[Remote],
    tables: &[TableSpec],
    show_passwords: bool,
) -> Vec<String> {
    let quoted = |text: &str| {
        let mut out = String::new();
        push_sql_string(&mut out, text);
        out
    };
    let server = |k: usize| format!("{}_shard{k}", front.as_str());
    let mut sql = Vec::new();
    for (k, remote) in shards.iter().enumerate() {
        let password = match (&remote.password, show_passwords) {
            (Some(p), true) => format!(", PASSWORD {}", quoted(p)),
            (Some(_), false) => ", PASSWORD '***'".to_string(),
            (None, _) => String::new(),
        };
        sql.push(format!(
            "CREATE OR REPLACE SERVER `{}` FOREIGN DATA WRAPPER mysql OPTIONS (HOST {}, PORT {}, \
             USER {}{password}, DATABASE {})",
            server(k),
            quoted(&remote.host),
            remote.port,
            quoted(&remote.user),
            quoted(&remote.database),
        ));
    }
    for spec in tables {
        let table = spec.table.as_str();
        let columns = column_definitions(&spec.columns, spec.payload).join(",\n");
        let mut branches = Vec::with_capacity(shards.len());
        for k in 0..shards.len() {
            let comment = format!(
                "wrapper \"mysql\", srv \"{}\", table \"{table}\"",
                server(k)
            );
            sql.push(format!(
                "CREATE OR REPLACE TABLE `{table}_s{k}` (\n{columns}\n) ENGINE=SPIDER \
                 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT={}",
                quoted(&comment)
            ));
            branches.push(format!("SELECT * FROM `{table}_s{k}`"));
        }
        sql.push(format!(
            "CREATE OR REPLACE VIEW `{table}` AS {}",
            branches.join(" UNION ALL ")
        ));
    }
    sql
}

/// Runs `statements` on the front server (its database must exist), after checking that it
/// has the Spider engine.
pub async fn apply(conn: &mut Conn, statements: &[String]) -> Result<(), DbError> {
    let row: Option<mysql_async::Row> = conn
        .query_first(
            "SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'SPIDER'",
        )
        .await
        .map_err(DbError::mysql("checking the front server's Spider engine"))?;
    let status: Option<String> = first(row, "PLUGINS.PLUGIN_STATUS")?;
    if status.as_deref() != Some("ACTIVE") {
        return Err(DbError::config(
            "--front",
            "the front server has no active Spider engine: install mariadb-plugin-spider \
             and load it (INSTALL SONAME 'ha_spider', or plugin-load-add=ha_spider.so)",
        ));
    }
    for statement in statements {
        conn.query_drop(statement.as_str())
            .await
            .map_err(DbError::mysql(format!(
                "federating the shards: {}",
                statement.lines().next().unwrap_or_default()
            )))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{ColumnSpec, ColumnType};

    #[test]
    fn a_spider_table_per_shard_and_a_view_of_their_union() {
        let remote = |port, password: Option<&str>| Remote {
            host: "db".into(),
            port,
            user: "u".into(),
            password: password.map(str::to_string),
            database: "logs".into(),
        };
        let spec = TableSpec {
            table: Ident::new("logs").unwrap(),
            columns: vec![ColumnSpec {
                name: "level".into(),
                pointer: "/level".into(),
                column_type: ColumnType::String,
                length: Some(16),
                truncate: false,
            }],
            payload: false,
            compression: crate::store::compression::Compression::None,
            scheme: crate::store::partition_plan::PartitionScheme {
                layout: crate::id::Layout::new(10, 0).unwrap(),
                period: crate::store::Period::Day,
                zone: crate::time::Zone::UTC,
                ahead: 1,
                retention: None,
            },
            event_time: None,
        };
        let front = Ident::new("front").unwrap();
        let shards = [remote(3306, Some("it's")), remote(3307, None)];
        let sql = statements(&front, &shards, std::slice::from_ref(&spec), true);
        assert_eq!(sql.len(), 5);
        assert_eq!(
            sql[0],
            "CREATE OR REPLACE SERVER `front_shard0` FOREIGN DATA WRAPPER mysql OPTIONS \
             (HOST 'db', PORT 3306, USER 'u', PASSWORD 'it\\'s', DATABASE 'logs')"
        );
        assert!(!sql[1].contains("PASSWORD"));
        assert!(sql[3].starts_with("CREATE OR REPLACE TABLE `logs_s1` (\n  `id` BIGINT UNSIGNED"));
        assert!(sql[3].ends_with(
            "ENGINE=SPIDER DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin \
             COMMENT='wrapper \\\"mysql\\\", srv \\\"front_shard1\\\", table \\\"logs\\\"'"
        ));
        assert_eq!(
            sql[4],
            "CREATE OR REPLACE VIEW `logs` AS SELECT * FROM `logs_s0` UNION ALL \
             SELECT * FROM `logs_s1`"
        );
        let hidden = statements(&front, &shards, &[spec], false);
        assert!(hidden[0].contains("PASSWORD '***'"), "{}", hidden[0]);
    }
}
