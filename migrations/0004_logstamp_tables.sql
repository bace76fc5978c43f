-- The ID layout and partitioning each log table was created with, so that a process with
-- different settings is refused instead of writing IDs or partitions the table cannot hold.
CREATE TABLE IF NOT EXISTS `logstamp_tables` (
  `table_name` VARCHAR(64) NOT NULL,
  `service_bits` TINYINT UNSIGNED NOT NULL,
  `epoch_unix_seconds` BIGINT UNSIGNED NOT NULL,
  `period` VARCHAR(16) NOT NULL,
  `time_zone` VARCHAR(64) NOT NULL,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`table_name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
