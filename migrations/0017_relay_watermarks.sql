-- The snapshot's watermarks (DBLog): capture writes a new `mark` before and after it reads each
-- chunk, and recognises the two writes in its own binlog stream; never relayed.
CREATE TABLE IF NOT EXISTS `relay_watermarks` (
  `dc` VARCHAR(64) NOT NULL,
  `mark` BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (`dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
