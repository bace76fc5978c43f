-- Per remote data centre, the relayed tables it changed here, written in the transaction that
-- applies its first change to each: a snapshot taken here of such a table would set the rows
-- the other data centre wrote back to this one's versions, so `relay snapshot` refuses it.
CREATE TABLE IF NOT EXISTS `relay_applied_tables` (
  `source_dc` VARCHAR(64) NOT NULL,
  `table_schema` VARCHAR(64) NOT NULL,
  `table_name` VARCHAR(64) NOT NULL,
  `first_applied_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`table_schema`, `table_name`, `source_dc`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
