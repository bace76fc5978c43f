//! Connecting to MariaDB and telling transient failures from definite ones.

mod support;

use logstamp::mysql::MysqlUrl;
use logstamp::mysql::{self, DbError};
use mysql_async::prelude::Queryable;
use support::TestDb;

#[tokio::test]
async fn create_database_makes_it_once_and_again_changes_nothing() {
    let test_db = TestDb::create("createdb").await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = test_db.conn().await;
    let current: Option<String> = conn.query_first("SELECT DATABASE()").await.unwrap();
    assert_eq!(current.as_deref(), Some(test_db.name.as_str()));
}

#[tokio::test]
async fn an_unreachable_server_is_transient_and_its_password_is_not_shown() {
    // Port 1 on loopback refuses connections at once.
    let url = MysqlUrl::try_from("mysql://root:s3cret@127.0.0.1:1/x".to_string()).unwrap();
    let error = mysql::create_database(&url).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(!error.to_string().contains("s3cret"), "{error}");
}

#[tokio::test]
async fn bad_sql_is_definite() {
    let test_db = TestDb::create("badsql").await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let pool = mysql::pool(&test_db.mysql_url(), 2).unwrap();
    let mut conn = pool.get_conn().await.unwrap();
    let error = conn
        .query_drop("SELEC 1")
        .await
        .map_err(DbError::mysql("probing"))
        .unwrap_err();
    assert!(!error.is_transient());
    assert_eq!(error.server_code(), Some(1064));
    drop(conn);
    pool.disconnect().await.unwrap();
}

#[tokio::test]
async fn the_test_server_is_told_to_be_mariadb() {
    let test_db = TestDb::create("flavor").await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    assert_eq!(
        mysql::flavor(&mut conn).await.unwrap(),
        mysql::Flavor::MariaDb
    );
    // The oracle: the server accepts what only MariaDB does (MySQL 8 refuses the syntax).
    conn.query_drop("EXPLAIN PARTITIONS SELECT 1")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
}
