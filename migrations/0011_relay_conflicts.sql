-- Conflicts an applier met: an UPDATE or DELETE from another data centre whose row here was
-- missing or differed from the source's before image, so the data centres had diverged. One
-- row per conflict: the change's source and table, its primary key, the before image it
-- expected, the row it found (NULL: none), the whole change message, and what was done
-- (`applied`: the change won; `stopped`: applying from that data centre waits). Values are
-- JSON, written as change messages write them.
CREATE TABLE IF NOT EXISTS `relay_conflicts` (
  `id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `source_dc` VARCHAR(64) NOT NULL,
  `source_gtid` VARCHAR(255) NOT NULL DEFAULT '',
  `table_schema` VARCHAR(64) NOT NULL,
  `table_name` VARCHAR(64) NOT NULL,
  `change_type` VARCHAR(8) NOT NULL,
  `row_key` TEXT NOT NULL,
  `expected` LONGTEXT NOT NULL,
  `found` LONGTEXT NULL,
  `change_message` LONGTEXT NOT NULL,
  `resolution` VARCHAR(16) NOT NULL,
  `detected_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`id`),
  KEY `by_source` (`source_dc`, `id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
