//! The private-server harness the relay tests use (and tests that stop a server) works.

mod support;

use mysql_async::prelude::Queryable;
use support::mariadb::MariaDb;

#[tokio::test]
async fn a_private_server_has_a_binlog_and_keeps_its_data_across_a_restart() {
    let mut server = MariaDb::start(77, &[]).await;
    let mut conn = server.conn().await;
    let settings: Option<(u32, String, String, String, String)> = conn
        .query_first(
            "SELECT @@server_id, @@log_bin, @@binlog_format, @@binlog_row_image, \
             @@binlog_row_metadata",
        )
        .await
        .unwrap();
    assert_eq!(
        settings,
        Some((77, "1".into(), "ROW".into(), "FULL".into(), "FULL".into()))
    );
    conn.query_drop("CREATE DATABASE kept").await.unwrap();
    conn.query_drop("CREATE TABLE kept.t (id BIGINT UNSIGNED PRIMARY KEY)")
        .await
        .unwrap();
    conn.exec_drop("INSERT INTO kept.t VALUES (?)", (u64::MAX,))
        .await
        .unwrap();
    drop(conn);

    server.stop().await;
    assert!(
        mysql_async::Conn::from_url(server.url("")).await.is_err(),
        "a stopped server answers"
    );
    server.restart().await;
    let mut conn = server.conn().await;
    let kept: Vec<u64> = conn.query("SELECT id FROM kept.t").await.unwrap();
    assert_eq!(kept, [u64::MAX]);
}

#[tokio::test]
async fn settings_given_later_win() {
    let server = MariaDb::start(78, &["--binlog-row-metadata=MINIMAL"]).await;
    let mut conn = server.conn().await;
    let metadata: Option<String> = conn
        .query_first("SELECT @@binlog_row_metadata")
        .await
        .unwrap();
    assert_eq!(metadata.as_deref(), Some("MINIMAL"));
}
