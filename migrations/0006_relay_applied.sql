-- Per remote data centre, how far its topic has been applied here: the next Kafka offset and
-- the source position of the last applied transaction, updated inside every applied
-- transaction (so a replay after a crash is exact, and a transaction republished by a restarted
-- capture is recognised and skipped). The same row write is the `marker` loop filter: capture
-- drops every transaction that touches this table.
CREATE TABLE IF NOT EXISTS `relay_applied` (
  `source_dc` VARCHAR(64) NOT NULL,
  `topic` VARCHAR(255) NOT NULL,
  `next_offset` BIGINT NOT NULL,
  `source_file` VARCHAR(255) NOT NULL DEFAULT '',
  `source_pos` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `source_gtid` VARCHAR(255) NOT NULL DEFAULT '',
  `source_seq` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `source_commit_ts` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `applied_transactions` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `applied_changes` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `last_error` TEXT NULL,
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`source_dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
