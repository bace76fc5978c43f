-- The `cache` loop filter's record of what an applier applied: inside every applied transaction
-- the applier writes here, per source data centre, the keys of the changes it applies (32-byte
-- hashes, one per change, concatenated; a large transaction takes several chunks). The row
-- images in the binlog carry the keys to capture inside the same transaction as the changes,
-- so the record is durable exactly when the changes are, and capture reading a range again
-- after a crash or a lost connection finds the same keys. `next_offset` makes every write
-- change the row (an unchanged row would not be logged).
CREATE TABLE IF NOT EXISTS `relay_loop_keys` (
  `source_dc` VARCHAR(64) NOT NULL,
  `chunk` INT UNSIGNED NOT NULL,
  `next_offset` BIGINT NOT NULL,
  `cache_keys` LONGBLOB NOT NULL,
  PRIMARY KEY (`source_dc`, `chunk`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
