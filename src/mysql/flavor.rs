//! Which server a connection talks to, for the few statements MariaDB and MySQL 8 spell or
//! support differently.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::DbError;

/// The server family, as far as logstamp's SQL cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    /// MySQL and everything else that does not say it is MariaDB.
    MySql,
}

impl Flavor {
    /// From the server's `VERSION()` and `@@version_comment`: MariaDB names itself in one of
    /// them (`10.11.6-MariaDB-0+deb12u1`, `5.5.5-10.11.6-MariaDB` behind some proxies,
    /// `mariadb.org binary distribution`).
    pub fn from_version(version: &str, comment: &str) -> Flavor {
        let says_mariadb = |text: &str| text.to_ascii_lowercase().contains("mariadb");
        if says_mariadb(version) || says_mariadb(comment) {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        }
    }
}

/// Asks the server on `conn` which it is (one round trip).
pub async fn flavor(conn: &mut Conn) -> Result<Flavor, DbError> {
    let row: Option<(String, Option<String>)> = conn
        .query_first("SELECT VERSION(), @@version_comment")
        .await
        .map_err(DbError::mysql("reading the server's version"))?;
    let (version, comment) =
        row.ok_or_else(|| DbError::Invariant("the server did not say its version".into()))?;
    Ok(Flavor::from_version(
        &version,
        comment.as_deref().unwrap_or(""),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_names_itself_and_anything_else_is_mysql() {
        for (version, comment) in [
            ("10.11.19-MariaDB-0+deb12u1", "Debian 12"),
            ("11.4.2-MariaDB", ""),
            ("5.5.5-10.11.6-MariaDB", ""),
            ("10.6.12", "mariadb.org binary distribution"),
        ] {
            assert_eq!(
                Flavor::from_version(version, comment),
                Flavor::MariaDb,
                "{version}"
            );
        }
        for (version, comment) in [
            ("8.0.36", "MySQL Community Server - GPL"),
            ("8.4.0-commercial", "MySQL Enterprise Server - Commercial"),
            ("8.0.35-27", "Percona Server (GPL), Release 27"),
        ] {
            assert_eq!(
                Flavor::from_version(version, comment),
                Flavor::MySql,
                "{version}"
            );
        }
    }
}
