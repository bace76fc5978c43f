-- Where each data centre's relay capture has read its server's binlog up to: the end of the
-- last transaction whose changes Kafka acknowledged (and every transaction before it). A
-- restart resumes after `gtid_state` (MariaDB GTIDs), or at `binlog_file`/`binlog_pos` when the
-- server wrote no GTID yet. Written with sql_log_bin=0: positions belong to this server only.
CREATE TABLE IF NOT EXISTS `relay_checkpoints` (
  `dc` VARCHAR(64) NOT NULL,
  `binlog_file` VARCHAR(255) NOT NULL,
  `binlog_pos` BIGINT UNSIGNED NOT NULL,
  `gtid_state` VARCHAR(4096) NOT NULL DEFAULT '',
  `next_seq` BIGINT UNSIGNED NOT NULL,
  `commit_ts` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `published_transactions` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `published_changes` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
