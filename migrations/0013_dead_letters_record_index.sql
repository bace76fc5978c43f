-- A message of several records (OTLP: one per log record) can lose one record to the dead
-- letters while the others are stored: the record's index in its message, from 0. NULL for a
-- dead letter that is the whole message.
ALTER TABLE `dead_letters`
  ADD COLUMN IF NOT EXISTS `record_index` INT UNSIGNED NULL AFTER `kafka_offset`
