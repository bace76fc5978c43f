-- Where each lease's holder serves /metrics and the health checks (host:port), so that
-- `leases list` shows it and `leases list --format prometheus` gives Prometheus the fleet's
-- targets. NULL until the holder says, and again when another holder takes the row over.
ALTER TABLE `service_leases`
  ADD COLUMN IF NOT EXISTS `telemetry_address` VARCHAR(255) NULL AFTER `pid`
