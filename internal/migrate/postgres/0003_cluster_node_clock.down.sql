ALTER TABLE cluster_nodes DROP COLUMN clock_skewed;
ALTER TABLE cluster_nodes DROP COLUMN clock_offset_ms;
