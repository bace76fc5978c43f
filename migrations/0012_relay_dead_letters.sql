-- Change messages an applier skipped under `relay.on_bad_message = "dead_letter"`: one that
-- did not parse or came from another data centre, or every message of a source transaction
-- that could not be applied for a definite reason (a transaction is applied whole or not at
-- all). One row per message, keyed by where it is in Kafka, so reading it again records it
-- once: the bytes as they were in the topic, and why it was skipped. `source_gtid` and
-- `source_seq` name the source transaction (empty and NULL for a message that did not parse).
CREATE TABLE IF NOT EXISTS `relay_dead_letters` (
  `topic` VARCHAR(249) NOT NULL,
  `kafka_offset` BIGINT NOT NULL,
  `source_dc` VARCHAR(64) NOT NULL,
  `source_gtid` VARCHAR(255) NOT NULL DEFAULT '',
  `source_seq` BIGINT UNSIGNED NULL,
  `message` LONGBLOB NOT NULL,
  `reason` TEXT NOT NULL,
  `recorded_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`topic`, `kafka_offset`),
  KEY `by_source` (`source_dc`, `recorded_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
