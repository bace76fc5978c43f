-- Per log table, the ID from which every row's grams are in the filter: set when `migrate`
-- creates the table, or by `logstamp search rebuild` over the whole table. A table without a
-- row here is searched without its filter.
CREATE TABLE IF NOT EXISTS `logstamp_text_filter_cover` (
  `table_name` VARCHAR(64) NOT NULL,
  `from_id` BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (`table_name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
