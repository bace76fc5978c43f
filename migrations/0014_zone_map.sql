-- The zone map: per table with an event time (`store.event_time`), per minute of ID time
-- (`bucket_start`, the bucket's first ID) and service ID, the least and greatest event time of
-- the rows stamped in it, and how many rows had one. The writer upserts it in each batch's
-- transaction; `query --by event` reads the ID ranges of the buckets that overlap an event-time
-- range. Rows of dropped partitions are deleted with them.
CREATE TABLE IF NOT EXISTS `logstamp_zone_map` (
  `table_name` VARCHAR(64) NOT NULL,
  `bucket_start` BIGINT UNSIGNED NOT NULL,
  `service_id` INT UNSIGNED NOT NULL,
  `min_event` DATETIME(3) NOT NULL,
  `max_event` DATETIME(3) NOT NULL,
  `n` BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (`table_name`, `bucket_start`, `service_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
