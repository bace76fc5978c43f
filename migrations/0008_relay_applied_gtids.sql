-- Per remote data centre, the epoch of its stream being applied and, per replication domain,
-- the GTID of the last transaction applied here (`0-1-100,1-2-7`), written in the transaction
-- that applies it. This, not the binlog position (which differs from server to server), is how
-- an applier recognises a transaction published again, also by another server of the source
-- data centre after a failover.
CREATE TABLE IF NOT EXISTS `relay_applied_gtids` (
  `source_dc` VARCHAR(64) NOT NULL,
  `epoch` BIGINT UNSIGNED NOT NULL,
  `applied` VARCHAR(4096) NOT NULL DEFAULT '',
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`source_dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
