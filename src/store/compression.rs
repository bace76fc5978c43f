//! InnoDB page compression of the log and fan-out tables (`store.compression`), partition by
//! partition.
//!
//! How MariaDB chooses the algorithm: a table or partition declared `PAGE_COMPRESSED=1` is
//! compressed with `innodb_compression_algorithm`, a server-wide variable, and (in the
//! `full_crc32` page format, MariaDB's default since 10.5) each partition's file keeps the
//! algorithm it was created with, whatever the variable says later. So a partition's
//! algorithm is chosen when it is made: logstamp declares new partitions page-compressed and
//! checks, before it makes any, that the server's variable is the algorithm of the setting
//! (it never changes a server-wide variable itself). `partitions compress` rebuilds, one at a
//! time, the partitions whose file has another algorithm (see [`super::recompress`]).
//!
//! The choices and checks are pure; the I/O reads the server's variables and the catalog.

use std::fmt;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};

use crate::mysql::rows::take;
use crate::mysql::{DbError, Flavor};

/// How a table's pages are compressed (`store.compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Not compressed.
    None,
    /// InnoDB page compression with zlib (MariaDB's default algorithm).
    Zlib,
    /// InnoDB page compression with lz4: needs the server's lz4 provider
    /// (`mariadb-plugin-provider-lz4`).
    Lz4,
}

impl fmt::Display for Compression {
    /// The setting's own spelling, which is also the server's name of the algorithm.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Zlib => "zlib",
            Compression::Lz4 => "lz4",
        })
    }
}

/// The Debian package that holds MariaDB's lz4 provider.
pub const LZ4_PACKAGE: &str = "mariadb-plugin-provider-lz4";

impl Compression {
    /// The options of a table or partition definition that declare it (after `ENGINE=InnoDB`
    /// or a partition's `VALUES LESS THAN (...)`). MySQL has no page compression of this
    /// kind: there every table is left uncompressed (see [`ServerCompression::check`]).
    pub fn options(self, flavor: Flavor) -> &'static str {
        match (flavor, self) {
            (Flavor::MySql, _) => "",
            (Flavor::MariaDb, Compression::None) => " PAGE_COMPRESSED=0",
            (Flavor::MariaDb, _) => " PAGE_COMPRESSED=1",
        }
    }
}

/// What the server compresses new page-compressed files with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCompression {
    pub flavor: Flavor,
    /// `@@innodb_compression_algorithm` (MariaDB).
    pub algorithm: String,
    /// The compression providers loaded (`provider_lz4`, ...).
    pub providers: Vec<String>,
}

impl ServerCompression {
    /// Whether partitions made now get the algorithm of `wanted`; the error says what to do.
    /// On MySQL the setting is not applied (`Ok(false)`): the caller says so.
    pub fn check(&self, wanted: Compression) -> Result<bool, String> {
        if wanted == Compression::None {
            return Ok(true);
        }
        if self.flavor == Flavor::MySql {
            return Ok(false);
        }
        if wanted == Compression::Lz4 && !self.providers.iter().any(|p| p == "provider_lz4") {
            return Err(format!(
                "store.compression = \"lz4\", but the server has no lz4 provider: install the \
                 package {LZ4_PACKAGE} on the database host and restart MariaDB (or set \
                 store.compression = \"zlib\")"
            ));
        }
        if !self.algorithm.eq_ignore_ascii_case(&wanted.to_string()) {
            return Err(format!(
                "store.compression = \"{wanted}\", but the server compresses new partitions with \
                 innodb_compression_algorithm = {}: MariaDB chooses the algorithm for the whole \
                 server, and each partition keeps the one it was made with. Set it (SET GLOBAL \
                 innodb_compression_algorithm = '{wanted}', and in the server's configuration \
                 so it lasts), or set store.compression = \"{}\"",
                self.algorithm,
                self.algorithm.to_ascii_lowercase()
            ));
        }
        Ok(true)
    }
}

/// Reads how the server compresses new page-compressed files.
pub async fn read_server(conn: &mut Conn, flavor: Flavor) -> Result<ServerCompression, DbError> {
    if flavor == Flavor::MySql {
        return Ok(ServerCompression {
            flavor,
            algorithm: String::new(),
            providers: Vec::new(),
        });
    }
    let context = "reading the server's page compression";
    let algorithm: Option<String> = conn
        .query_first("SELECT @@innodb_compression_algorithm")
        .await
        .map_err(DbError::mysql(context))?;
    let providers: Vec<String> = conn
        .query(
            "SELECT PLUGIN_NAME FROM information_schema.PLUGINS \
             WHERE PLUGIN_NAME LIKE 'provider\\_%' AND PLUGIN_STATUS = 'ACTIVE'",
        )
        .await
        .map_err(DbError::mysql(context))?;
    Ok(ServerCompression {
        flavor,
        algorithm: algorithm.unwrap_or_default(),
        providers,
    })
}

/// Checks that the server makes partitions as `wanted` says; on MySQL, warns that it does not
/// compress.
pub async fn check_server(conn: &mut Conn, wanted: Compression) -> Result<(), DbError> {
    if wanted == Compression::None {
        return Ok(());
    }
    let flavor = crate::mysql::flavor(conn).await?;
    let server = read_server(conn, flavor).await?;
    match server.check(wanted) {
        Ok(true) => Ok(()),
        Ok(false) => {
            tracing::warn!(
                "store.compression = \"{wanted}\" is InnoDB page compression as MariaDB has it; \
                 this MySQL server leaves the tables uncompressed"
            );
            Ok(())
        }
        Err(reason) => Err(DbError::config("store.compression", reason)),
    }
}

/// A partition's file as InnoDB has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileCompression {
    pub partition: String,
    /// The algorithm the file's pages are compressed with.
    pub algorithm: &'static str,
    /// Bytes the file takes on disk (holes punched by page compression not counted, as `du`).
    pub bytes_on_disk: u64,
}

impl FileCompression {
    /// The algorithm in a tablespace's `FLAG` (information_schema.INNODB_SYS_TABLESPACES), in
    /// the full_crc32 format: bit 4 marks the format, bits 5 to 7 are the algorithm (0 none,
    /// 1 zlib, 2 lz4, 3 lzo, 4 lzma, 5 bzip2, 6 snappy). `None`: another format.
    pub fn of_flags(flags: u32) -> Option<&'static str> {
        if flags & 0x10 == 0 {
            return None;
        }
        Some(match (flags >> 5) & 7 {
            0 => "none",
            1 => "zlib",
            2 => "lz4",
            3 => "lzo",
            4 => "lzma",
            5 => "bzip2",
            _ => "snappy",
        })
    }

    /// Whether the file is compressed as `wanted` says.
    pub fn is(&self, wanted: Compression) -> bool {
        self.algorithm == wanted.to_string()
    }
}

/// The files of a table's partitions, in the catalog's order of names (MariaDB, file per table).
pub async fn files(conn: &mut Conn, table: &str) -> Result<Vec<FileCompression>, DbError> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT SUBSTRING_INDEX(`NAME`, '#P#', -1), `FLAG`, `ALLOCATED_SIZE` \
             FROM information_schema.INNODB_SYS_TABLESPACES \
             WHERE `NAME` LIKE CONCAT(DATABASE(), '/', ?, '#P#%')",
            (table,),
        )
        .await
        .map_err(DbError::mysql(format!(
            "reading the files of table {table}"
        )))?;
    rows.into_iter()
        .map(|mut row| {
            let partition: String = take(&mut row, 0, "INNODB_SYS_TABLESPACES.NAME")?;
            let flags: u32 = take(&mut row, 1, "INNODB_SYS_TABLESPACES.FLAG")?;
            Ok(FileCompression {
                partition,
                algorithm: FileCompression::of_flags(flags).unwrap_or("unknown"),
                bytes_on_disk: take(&mut row, 2, "INNODB_SYS_TABLESPACES.ALLOCATED_SIZE")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(algorithm: &str, providers: &[&str]) -> ServerCompression {
        ServerCompression {
            flavor: Flavor::MariaDb,
            algorithm: algorithm.into(),
            providers: providers.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn lz4_without_its_provider_names_the_package() {
        let error = server("zlib", &[]).check(Compression::Lz4).unwrap_err();
        assert!(error.contains(LZ4_PACKAGE), "{error}");
        assert_eq!(
            server("lz4", &["provider_lz4"]).check(Compression::Lz4),
            Ok(true)
        );
    }

    #[test]
    fn the_servers_algorithm_must_be_the_settings() {
        let error = server("zlib", &["provider_lz4"])
            .check(Compression::Lz4)
            .unwrap_err();
        assert!(
            error.contains("innodb_compression_algorithm = zlib"),
            "{error}"
        );
        assert!(
            error.contains("SET GLOBAL innodb_compression_algorithm = 'lz4'"),
            "{error}"
        );
        assert_eq!(server("zlib", &[]).check(Compression::Zlib), Ok(true));
        assert!(
            server("lz4", &["provider_lz4"])
                .check(Compression::Zlib)
                .is_err()
        );
        // Nothing to check for none, and MySQL leaves tables as they are.
        assert_eq!(server("bogus", &[]).check(Compression::None), Ok(true));
        let mysql = ServerCompression {
            flavor: Flavor::MySql,
            ..server("", &[])
        };
        assert_eq!(mysql.check(Compression::Zlib), Ok(false));
        assert_eq!(Compression::Zlib.options(Flavor::MySql), "");
    }

    #[test]
    fn flags_say_the_files_algorithm() {
        // As MariaDB 10.11 showed them: a plain file, one made with zlib, one with lz4.
        assert_eq!(FileCompression::of_flags(21), Some("none"));
        assert_eq!(FileCompression::of_flags(1_610_612_789), Some("zlib"));
        assert_eq!(FileCompression::of_flags(1_610_612_821), Some("lz4"));
        // Not the full_crc32 format.
        assert_eq!(FileCompression::of_flags(0x21), None);
        for (code, wanted) in [Compression::None, Compression::Zlib, Compression::Lz4]
            .into_iter()
            .enumerate()
        {
            let algorithm = FileCompression::of_flags(0x10 | ((code as u32) << 5)).unwrap();
            assert_eq!(algorithm, wanted.to_string());
        }
    }
}
