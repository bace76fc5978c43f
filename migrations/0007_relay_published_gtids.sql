-- What each data centre's capture published, saved with its checkpoint in `relay_checkpoints`
-- (same transaction, same sql_log_bin=0): the epoch of its stream (the `seq` of the first
-- transaction published since the stream was last started anew) and, per replication domain,
-- the GTID of the last transaction it published in that epoch (`0-1-100,1-2-7`). Each message
-- names what was published before it, so an applier can tell a missing transaction from one
-- that was never published.
CREATE TABLE IF NOT EXISTS `relay_published_gtids` (
  `dc` VARCHAR(64) NOT NULL,
  `epoch` BIGINT UNSIGNED NOT NULL,
  `published` VARCHAR(4096) NOT NULL DEFAULT '',
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
