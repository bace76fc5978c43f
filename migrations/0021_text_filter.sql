-- The text filter: per log table, per minute of ID time (`bucket_start`, the bucket's first ID)
-- and service ID, a blocked Bloom filter of the n-grams of the rows' text columns, one row per
-- block of 32 words. The writer ORs a batch's bits in, in the batch's transaction; a search
-- reads only the blocks of its needle's grams and then only the buckets that may hold it.
-- Rows of dropped partitions are deleted with them.
CREATE TABLE IF NOT EXISTS `logstamp_text_filter` (
  `table_name` VARCHAR(64) NOT NULL,
  `bucket_start` BIGINT UNSIGNED NOT NULL,
  `service_id` INT UNSIGNED NOT NULL,
  `block` SMALLINT UNSIGNED NOT NULL,
  `w0` BIGINT UNSIGNED NOT NULL,
  `w1` BIGINT UNSIGNED NOT NULL,
  `w2` BIGINT UNSIGNED NOT NULL,
  `w3` BIGINT UNSIGNED NOT NULL,
  `w4` BIGINT UNSIGNED NOT NULL,
  `w5` BIGINT UNSIGNED NOT NULL,
  `w6` BIGINT UNSIGNED NOT NULL,
  `w7` BIGINT UNSIGNED NOT NULL,
  `w8` BIGINT UNSIGNED NOT NULL,
  `w9` BIGINT UNSIGNED NOT NULL,
  `w10` BIGINT UNSIGNED NOT NULL,
  `w11` BIGINT UNSIGNED NOT NULL,
  `w12` BIGINT UNSIGNED NOT NULL,
  `w13` BIGINT UNSIGNED NOT NULL,
  `w14` BIGINT UNSIGNED NOT NULL,
  `w15` BIGINT UNSIGNED NOT NULL,
  `w16` BIGINT UNSIGNED NOT NULL,
  `w17` BIGINT UNSIGNED NOT NULL,
  `w18` BIGINT UNSIGNED NOT NULL,
  `w19` BIGINT UNSIGNED NOT NULL,
  `w20` BIGINT UNSIGNED NOT NULL,
  `w21` BIGINT UNSIGNED NOT NULL,
  `w22` BIGINT UNSIGNED NOT NULL,
  `w23` BIGINT UNSIGNED NOT NULL,
  `w24` BIGINT UNSIGNED NOT NULL,
  `w25` BIGINT UNSIGNED NOT NULL,
  `w26` BIGINT UNSIGNED NOT NULL,
  `w27` BIGINT UNSIGNED NOT NULL,
  `w28` BIGINT UNSIGNED NOT NULL,
  `w29` BIGINT UNSIGNED NOT NULL,
  `w30` BIGINT UNSIGNED NOT NULL,
  `w31` BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (`table_name`, `bucket_start`, `service_id`, `block`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
