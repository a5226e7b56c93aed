-- 0001 initial: the schema taskgraph had before versioned migrations, as
-- ent's automatic migration created it from ent/schema at every start.
-- A database made by such a taskgraph has exactly this schema: `taskgraph
-- migrate up` records 0001 as applied there without running it (after
-- checking its tables, columns and indexes).
--
-- No foreign keys: the store is the only writer of tasks, instances and logs
-- and deletes them together. The partial indexes' predicates are
-- lifecycle's status lists, as ent/schema words them (lifecycle.QuotedList);
-- the tests in internal/migrate hold these files and ent/schema together.
-- Each table's ids start in a range of their own (ent's global ids: the
-- range says which table an id belongs to).

CREATE TABLE alert_channels (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    tenant text NOT NULL DEFAULT (''),
    name text NOT NULL,
    kind text NOT NULL,
    url_sealed blob NOT NULL,
    url_display text NOT NULL,
    secret_sealed blob NULL,
    has_secret bool NOT NULL DEFAULT (false),
    created_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX alertchannel_tenant_name ON alert_channels (tenant, name);

CREATE TABLE alert_incidents (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    tenant text NOT NULL DEFAULT (''),
    rule_id integer NOT NULL,
    rule_name text NOT NULL,
    kind text NOT NULL,
    subject text NOT NULL,
    status text NOT NULL,
    occurrences integer NOT NULL DEFAULT (1),
    summary text NOT NULL DEFAULT (''),
    first_task_id integer NULL,
    last_task_id integer NULL,
    opened_at datetime NOT NULL,
    last_seen_at datetime NOT NULL,
    resolved_at datetime NULL,
    resolution text NULL,
    resolved_by text NOT NULL DEFAULT (''),
    silenced_until datetime NULL,
    notified bool NOT NULL DEFAULT (false),
    recovery_notified bool NOT NULL DEFAULT (false),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX alertincident_one_open ON alert_incidents (rule_id, subject) WHERE status = 'OPEN';
CREATE INDEX alertincident_tenant_opened_at ON alert_incidents (tenant, opened_at);
CREATE INDEX alertincident_updated_at ON alert_incidents (updated_at);

CREATE TABLE alert_rules (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    tenant text NOT NULL DEFAULT (''),
    name text NOT NULL,
    kind text NOT NULL,
    enabled bool NOT NULL DEFAULT (true),
    task_type text NOT NULL DEFAULT (''),
    owner text NOT NULL DEFAULT (''),
    error_kind text NOT NULL DEFAULT (''),
    threshold integer NOT NULL DEFAULT (0),
    window_seconds integer NOT NULL DEFAULT (0),
    quiet_seconds integer NOT NULL DEFAULT (0),
    channel_ids json NULL,
    silenced_until datetime NULL,
    last_notified_at datetime NULL,
    created_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX alertrule_tenant_name ON alert_rules (tenant, name);

CREATE TABLE artifacts (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    owner text NOT NULL,
    owner_source text NOT NULL DEFAULT (''),
    tenant text NOT NULL DEFAULT (''),
    kind text NOT NULL,
    key text NOT NULL,
    filename text NOT NULL,
    content_type text NOT NULL,
    size integer NOT NULL,
    sha256 text NOT NULL,
    expires_at datetime NOT NULL,
    task_id integer NULL
);
CREATE UNIQUE INDEX artifacts_key_key ON artifacts (key);
CREATE INDEX artifact_task_id_kind ON artifacts (task_id, kind);
CREATE INDEX artifact_expires_at ON artifacts (expires_at);

CREATE TABLE audit_logs (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    actor text NOT NULL,
    role text NOT NULL,
    source text NOT NULL DEFAULT (''),
    tenant text NOT NULL DEFAULT (''),
    action text NOT NULL,
    task_ids json NULL,
    outcome text NOT NULL,
    error_code text NOT NULL DEFAULT (''),
    remote_addr text NOT NULL DEFAULT (''),
    details json NULL
);
CREATE INDEX auditlog_created_at ON audit_logs (created_at);
CREATE INDEX auditlog_actor_created_at ON audit_logs (actor, created_at);

CREATE TABLE cluster_nodes (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    name text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    roles json NOT NULL,
    started_at datetime NOT NULL,
    last_seen_at datetime NOT NULL,
    expires_at datetime NOT NULL,
    stopped_at datetime NULL,
    busy integer NOT NULL DEFAULT (0),
    total integer NOT NULL DEFAULT (0),
    leading bool NOT NULL DEFAULT (false),
    files text NOT NULL DEFAULT (''),
    draining bool NOT NULL DEFAULT (false)
);
CREATE UNIQUE INDEX cluster_nodes_name_key ON cluster_nodes (name);

-- contacts is the contacts import target's own table, outside ent/schema:
-- internal/importer/contacts.go writes and reads it with its own SQL, and
-- a change to it is a migration of this set like any other. (task_id,
-- row_no) is its write-once key.
CREATE TABLE contacts (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    task_id integer NOT NULL,
    row_no integer NOT NULL,
    name text NOT NULL,
    phone text NOT NULL,
    email text NOT NULL DEFAULT (''),
    company text NOT NULL DEFAULT (''),
    city text NOT NULL DEFAULT (''),
    tags json NULL,
    gender text NOT NULL DEFAULT (''),
    birthday text NOT NULL DEFAULT ('')
);
CREATE UNIQUE INDEX contact_task_id_row_no ON contacts (task_id, row_no);
CREATE INDEX contact_phone ON contacts (phone);
CREATE INDEX contact_city ON contacts (city);

CREATE TABLE deployments (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    singleton integer NOT NULL,
    uid text NOT NULL,
    blob_location text NOT NULL,
    blob_node text NOT NULL
);
CREATE UNIQUE INDEX deployments_singleton_key ON deployments (singleton);

CREATE TABLE flow_controls (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    task_type text NOT NULL,
    max_running integer NULL,
    rate_limit integer NULL,
    rate_period_seconds integer NOT NULL DEFAULT (1),
    paused bool NOT NULL DEFAULT (false),
    paused_until datetime NULL,
    updated_by text NOT NULL DEFAULT (''),
    updated_at datetime NOT NULL
);
CREATE UNIQUE INDEX flow_controls_task_type_key ON flow_controls (task_type);

CREATE TABLE flow_starts (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    task_type text NOT NULL,
    started_at datetime NOT NULL,
    admitted_at datetime NULL,
    count integer NOT NULL
);
CREATE INDEX flowstart_task_type_started_at ON flow_starts (task_type, started_at);

CREATE TABLE schedules (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    name text NOT NULL,
    owner text NOT NULL,
    owner_source text NOT NULL DEFAULT (''),
    owner_role text NOT NULL DEFAULT (''),
    tenant text NOT NULL DEFAULT (''),
    cron text NOT NULL DEFAULT (''),
    interval_seconds integer NULL,
    timezone text NOT NULL DEFAULT (''),
    task_type text NOT NULL,
    task_title text NOT NULL DEFAULT (''),
    task_input json NOT NULL,
    task_input_sealed blob NULL,
    task_priority integer NULL,
    task_timeout_seconds integer NULL,
    task_retry_policy text NULL,
    task_max_attempts integer NULL,
    paused bool NOT NULL DEFAULT (false),
    start_at datetime NULL,
    end_at datetime NULL,
    misfire_policy text NOT NULL DEFAULT ('SKIP'),
    overlap_policy text NOT NULL DEFAULT ('SKIP'),
    next_fire_at datetime NULL,
    last_fired_at datetime NULL,
    last_task_id integer NULL,
    queued_slots json NULL,
    queued_count integer NOT NULL DEFAULT (0),
    version integer NOT NULL DEFAULT (1),
    updated_at datetime NOT NULL
);
CREATE INDEX schedule_due ON schedules (next_fire_at) WHERE paused = false AND next_fire_at IS NOT NULL;
CREATE INDEX schedule_queued ON schedules (queued_count) WHERE queued_count > 0;
CREATE INDEX schedule_owner ON schedules (owner);

CREATE TABLE schedule_events (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    kind text NOT NULL,
    slot datetime NULL,
    task_id integer NULL,
    missed integer NOT NULL DEFAULT (0),
    message text NOT NULL,
    node text NOT NULL DEFAULT (''),
    schedule_id integer NOT NULL
);
CREATE INDEX scheduleevent_schedule_id_created_at ON schedule_events (schedule_id, created_at);

CREATE TABLE stall_overrides (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    task_id integer NOT NULL,
    stall_after_seconds integer NOT NULL
);
CREATE UNIQUE INDEX stall_overrides_task_id_key ON stall_overrides (task_id);

CREATE TABLE tasks (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    code text NOT NULL,
    type text NOT NULL,
    biz_id text NOT NULL DEFAULT (''),
    idempotency_key text NULL,
    idempotency_hash text NULL,
    title text NOT NULL DEFAULT (''),
    status text NOT NULL,
    priority integer NOT NULL DEFAULT (5),
    owner text NOT NULL,
    owner_source text NOT NULL DEFAULT (''),
    tenant text NOT NULL DEFAULT (''),
    owner_role text NOT NULL DEFAULT (''),
    input json NOT NULL,
    input_sealed blob NULL,
    input_hash text NOT NULL,
    timeout_seconds integer NOT NULL,
    retry_policy text NOT NULL,
    max_attempts integer NOT NULL,
    progress_done integer NOT NULL DEFAULT (0),
    progress_total integer NOT NULL DEFAULT (0),
    result json NULL,
    last_error text NULL,
    result_status text NULL,
    attention_status text NULL,
    version integer NOT NULL DEFAULT (1),
    cancel_requested bool NOT NULL DEFAULT (false),
    cancel_reason text NULL,
    run_at datetime NOT NULL,
    updated_at datetime NOT NULL,
    finished_at datetime NULL,
    schedule_id integer NULL,
    schedule_slot datetime NULL
);
CREATE UNIQUE INDEX tasks_code_key ON tasks (code);
CREATE UNIQUE INDEX task_idempotency_hash ON tasks (idempotency_hash) WHERE idempotency_hash IS NOT NULL;
CREATE INDEX task_created_at ON tasks (created_at);
CREATE INDEX task_attention_status_created_at ON tasks (attention_status, created_at) WHERE attention_status IS NOT NULL;
CREATE INDEX task_biz_id ON tasks (biz_id) WHERE biz_id <> '';
CREATE UNIQUE INDEX task_schedule_slot ON tasks (schedule_id, schedule_slot) WHERE schedule_id IS NOT NULL;

CREATE TABLE task_instances (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    instance_no integer NOT NULL,
    status text NOT NULL,
    attempt integer NOT NULL,
    task_type text NOT NULL,
    priority integer NOT NULL,
    run_at datetime NOT NULL,
    worker_id text NULL,
    started_at datetime NULL,
    heartbeat_at datetime NULL,
    finished_at datetime NULL,
    progress_at datetime NULL,
    stalled_at datetime NULL,
    error_kind text NULL,
    last_error text NULL,
    result json NULL,
    version integer NOT NULL DEFAULT (1),
    task_id integer NOT NULL
);
CREATE UNIQUE INDEX taskinstance_task_id_instance_no ON task_instances (task_id, instance_no);
CREATE UNIQUE INDEX taskinstance_one_live_per_task ON task_instances (task_id) WHERE status IN ('PENDING', 'RETRY_PENDING', 'EXECUTING');
CREATE INDEX taskinstance_claimable ON task_instances (task_type, priority, run_at, id) WHERE status IN ('PENDING', 'RETRY_PENDING');
CREATE INDEX taskinstance_running ON task_instances (heartbeat_at) WHERE status = 'EXECUTING';

CREATE TABLE task_logs (
    id integer NOT NULL PRIMARY KEY AUTOINCREMENT,
    created_at datetime NOT NULL,
    instance_id integer NULL,
    level text NOT NULL,
    message text NOT NULL,
    fields json NULL,
    task_id integer NOT NULL
);
CREATE INDEX tasklog_task_id ON task_logs (task_id);

-- Each table's ids start in a range of their own (ent's global ids).
INSERT INTO sqlite_sequence (name, seq) VALUES
    ('task_instances', 4294967296),
    ('task_logs', 8589934592),
    ('audit_logs', 12884901888),
    ('artifacts', 17179869184),
    ('contacts', 21474836480),
    ('deployments', 25769803776),
    ('flow_controls', 30064771072),
    ('flow_starts', 34359738368),
    ('schedules', 38654705664),
    ('schedule_events', 42949672960),
    ('alert_channels', 47244640256),
    ('alert_incidents', 51539607552),
    ('alert_rules', 55834574848),
    ('stall_overrides', 60129542144),
    ('cluster_nodes', 64424509440);
