-- Each node's offset to the database's clock at its last refresh (package
-- nodes, internal/store/clock.go), shown on the Nodes page.
ALTER TABLE cluster_nodes ADD COLUMN clock_offset_ms integer NOT NULL DEFAULT (0);
ALTER TABLE cluster_nodes ADD COLUMN clock_skewed bool NOT NULL DEFAULT (false);
