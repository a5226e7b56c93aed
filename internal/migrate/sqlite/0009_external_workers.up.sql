-- 0009 external workers: the worker processes outside the server that run
-- external task types over the worker protocol, as each last said in a
-- claim (id, language, version, types, credentials), with their lease and
-- an admin's drain flag (package nodes).
CREATE TABLE external_workers (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    name text NOT NULL,
    tenant text NOT NULL DEFAULT (''),
    user text NOT NULL DEFAULT (''),
    language text NOT NULL DEFAULT (''),
    version text NOT NULL DEFAULT (''),
    types json NOT NULL,
    node text NOT NULL DEFAULT (''),
    first_seen_at datetime NOT NULL,
    last_seen_at datetime NOT NULL,
    expires_at datetime NOT NULL,
    draining bool NOT NULL DEFAULT (false)
);
CREATE UNIQUE INDEX externalworker_tenant_name ON external_workers (tenant, name);
-- Its ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES ('external_workers', 94489280512);
