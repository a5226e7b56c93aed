-- 0001 initial, down: drops every table 0001 made, with their rows.

DROP TABLE tasks;
DROP TABLE task_logs;
DROP TABLE task_instances;
DROP TABLE stall_overrides;
DROP TABLE schedules;
DROP TABLE schedule_events;
DROP TABLE flow_starts;
DROP TABLE flow_controls;
DROP TABLE deployments;
DROP TABLE contacts;
DROP TABLE cluster_nodes;
DROP TABLE audit_logs;
DROP TABLE artifacts;
DROP TABLE alert_rules;
DROP TABLE alert_incidents;
DROP TABLE alert_channels;
