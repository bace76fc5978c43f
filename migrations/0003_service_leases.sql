-- Service IDs leased by live processes, with expiry and heartbeat. The row outlives its lease:
-- `issued_seconds_mark` (the highest ID second ever issued under this service ID) keeps a
-- restarted process above every ID issued before, even after the clock went back.
CREATE TABLE IF NOT EXISTS `service_leases` (
  `service_id` INT UNSIGNED NOT NULL,
  `host` VARCHAR(255) NOT NULL,
  `pid` INT UNSIGNED NOT NULL,
  `instance_token` VARCHAR(64) NOT NULL,
  `expires_at` DATETIME(6) NOT NULL,
  `issued_seconds_mark` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `updated_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`service_id`),
  KEY `service_leases_expires_at` (`expires_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
