-- The next Kafka offset to read per consumer group and partition, committed in the same
-- transaction as the rows of the batch that ends before it (exactly-once ingest).
-- IF NOT EXISTS: MySQL DDL is not transactional, so a run that died after this statement but
-- before recording it must be able to run it again.
CREATE TABLE IF NOT EXISTS `ingest_offsets` (
  `consumer_group` VARCHAR(255) NOT NULL,
  `topic` VARCHAR(255) NOT NULL,
  `kafka_partition` INT NOT NULL,
  `next_offset` BIGINT NOT NULL,
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`consumer_group`, `topic`, `kafka_partition`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
