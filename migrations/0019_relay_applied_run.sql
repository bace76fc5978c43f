-- The run (the offset of the resume message) of the source capture whose transaction was
-- applied last: an applier that starts again passes over what a stopped capture published
-- after the next one resumed. NULL before the source's capture published resume messages.
ALTER TABLE `relay_applied`
  ADD COLUMN IF NOT EXISTS `source_run` BIGINT UNSIGNED NULL AFTER `source_seq`
