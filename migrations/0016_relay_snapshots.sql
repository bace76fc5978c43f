-- The relay's online snapshots (`logstamp relay snapshot`, `relay.snapshot = "initial"`): one row
-- per data centre and table. `relay snapshot` writes a request; the capture of that data centre
-- copies the table in primary-key chunks and records, after Kafka acknowledged each chunk, the
-- last key copied (`last_key`, JSON), so a restarted relay goes on from there. `state`:
-- requested, running, done, or failed (`last_error` says why).
CREATE TABLE IF NOT EXISTS `relay_snapshots` (
  `dc` VARCHAR(64) NOT NULL,
  `table_schema` VARCHAR(64) NOT NULL,
  `table_name` VARCHAR(64) NOT NULL,
  `state` VARCHAR(16) NOT NULL,
  `chunk_rows` BIGINT UNSIGNED NOT NULL,
  `last_key` TEXT NULL,
  `copied_rows` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `dropped_rows` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `chunks` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `estimated_rows` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `requested_at` DATETIME(6) NOT NULL,
  `started_at` DATETIME(6) NULL,
  `finished_at` DATETIME(6) NULL,
  `last_error` TEXT NULL,
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`dc`, `table_schema`, `table_name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
