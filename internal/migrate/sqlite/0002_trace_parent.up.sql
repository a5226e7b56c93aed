-- 0002 trace parent: the W3C traceparent of the span that created a task,
-- so that its executions' spans continue the creating request's trace on
-- whichever node runs them. Empty (NULL) when tracing was off.
ALTER TABLE tasks ADD COLUMN trace_parent text NULL;
