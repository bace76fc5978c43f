-- The text filter's format 2 (each gram's bits in one word, blocks numbered from 128) replaces
-- format 1. This version reads a service's format-1 rows of a minute as "may hold anything",
-- but a `serve` or `query` of a version before would read format-2 rows as format 1 and miss
-- matching rows: so every table's cover goes, and searches read whole ranges (correct, as
-- slow as before the filter) until `logstamp search rebuild` of this version rewrites a
-- table's filter in format 2 and covers it again. Workers of a version before refuse to start
-- on this schema.
DELETE FROM `logstamp_text_filter_cover`
