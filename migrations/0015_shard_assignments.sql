-- With store.shards: which shard (`host:port/database`) holds each Kafka partition of a consumer
-- group, with its rows and its offset row. Kept in the coordination database (mysql.url); a
-- partition stays where it was placed until `logstamp shards move` moves it.
CREATE TABLE IF NOT EXISTS `shard_assignments` (
  `consumer_group` VARCHAR(255) NOT NULL,
  `topic` VARCHAR(255) NOT NULL,
  `kafka_partition` INT NOT NULL,
  `shard` VARCHAR(255) NOT NULL,
  `assigned_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`consumer_group`, `topic`, `kafka_partition`),
  KEY `by_shard` (`shard`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
