-- Messages that could not be parsed or mapped, kept with why and where they came from.
-- `raw` is NULL for a message without a value (a Kafka tombstone).
CREATE TABLE IF NOT EXISTS `dead_letters` (
  `id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `topic` VARCHAR(255) NOT NULL,
  `kafka_partition` INT NOT NULL,
  `kafka_offset` BIGINT NOT NULL,
  `reason` TEXT NOT NULL,
  `raw` LONGBLOB NULL,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`id`),
  KEY `dead_letters_source` (`topic`, `kafka_partition`, `kafka_offset`),
  KEY `dead_letters_created_at` (`created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
