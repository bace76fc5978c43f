-- Line counts: per log table, per minute of ID time (`minute`, Unix seconds), service ID,
-- minute of event time (`event_minute`, Unix seconds; 18446744073709551615 for lines without
-- one) and level ('' for none), how many lines were stored. The writer upserts them in each
-- batch's transaction, so both histograms (by ID time and by event time) are sums over this
-- table; `counts rebuild` recomputes them from a table's rows; rows of dropped partitions are
-- deleted with them. `by_event` serves the event-time histogram.
CREATE TABLE IF NOT EXISTS `logstamp_line_counts` (
  `table_name` VARCHAR(64) NOT NULL,
  `minute` BIGINT UNSIGNED NOT NULL,
  `service_id` INT UNSIGNED NOT NULL,
  `event_minute` BIGINT UNSIGNED NOT NULL,
  `level` VARCHAR(255) NOT NULL,
  `n` BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (`table_name`, `minute`, `service_id`, `event_minute`, `level`),
  KEY `by_event` (`table_name`, `event_minute`, `level`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
