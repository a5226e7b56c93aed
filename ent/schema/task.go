package schema

import (
	"encoding/json"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// Task holds the intent: what to run, for whom, with which policy. Its status
// mirrors its latest instance. Only the store package writes it.
type Task struct{ ent.Schema }

// Mixin of Task.
func (Task) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of Task.
func (Task) Fields() []ent.Field {
	return []ent.Field{
		field.String("code").
			Unique().
			Immutable().
			Comment("Readable unique code, e.g. NOOP-20261129-7K3Q9D2M."),
		field.String("type").
			Immutable().
			Annotations(entgql.OrderField("TYPE")),
		field.String("biz_id").
			Default("").
			Immutable().
			Comment("Caller's business key (an order number, a file name...)."),
		field.String("idempotency_key").
			Optional().
			Nillable().
			Immutable().
			Comment("The caller's idempotency key as shown: masked like every other text it sends."),
		field.String("idempotency_hash").
			Optional().
			Nillable().
			Immutable().
			Comment("Keyed hash of the owner identity (source, tenant, user) and the raw idempotency key: what makes a key unique per owner.").
			Annotations(entgql.Skip()),
		field.String("title").
			Default("").
			Immutable(),
		field.Enum("status").
			GoType(lifecycle.Status("")).
			Annotations(entgql.OrderField("STATUS"), entgql.Type("TaskStatus")),
		field.Int("priority").
			Default(5).
			Immutable().
			Comment("Smaller runs first.").
			Annotations(entgql.OrderField("PRIORITY")),
		field.String("owner").
			Immutable().
			Annotations(entgql.OrderField("OWNER")),
		field.String("owner_source").
			Default("").
			Immutable().
			Comment("Where the owner's credentials came from (token, jwt, local): the owner is (owner_source, tenant, owner)."),
		field.String("tenant").
			Default("").
			Immutable().
			Comment("The owner's tenant. Tenants isolate: only the tenant's own users and platform administrators see the task."),
		field.String("owner_role").
			Default("").
			Immutable().
			Comment("The owner's role when the task was created: a handler that reads data on the owner's behalf (an export) sees what the owner saw.").
			Annotations(entgql.Skip(entgql.SkipWhereInput, entgql.SkipOrderField)),
		field.JSON("input", json.RawMessage{}).
			Comment("Input with sensitive values masked. An edit (edit and retry, replay with input) replaces it and keeps the former in task_input_versions; nothing else writes it.").
			Annotations(entgql.Type("JSON")),
		field.Bytes("input_sealed").
			Optional().
			Sensitive().
			Comment("The unmasked input, encrypted, when masking changed it; only handlers see it.").
			Annotations(entgql.Skip()),
		field.Int("input_version").
			Default(1).
			Comment("The version of its input (1: as created; an edit adds one)."),
		field.Enum("review_mode").
			Values("ON", "OFF").
			Optional().
			Nillable().
			Immutable().
			Comment("The task's own review opt-in (created with review: true or false): ON sends its NON_RETRYABLE failures to review as its type's policy would, OFF never reviews it; empty: its type's policy.").
			Annotations(entgql.Skip(entgql.SkipWhereInput, entgql.SkipOrderField)),
		field.String("input_hash").
			Immutable().
			Comment("Keyed hash of type and unmasked input, to detect a reused idempotency key.").
			Annotations(entgql.Skip()),
		field.Int("timeout_seconds").
			Immutable(),
		field.String("retry_policy").
			Immutable(),
		field.Int("max_attempts").
			Immutable(),
		field.Int64("progress_done").
			Default(0),
		field.Int64("progress_total").
			Default(0),
		field.JSON("result", json.RawMessage{}).
			Optional().
			Comment("Result of the latest finished execution.").
			Annotations(entgql.Type("JSON")),
		field.String("last_error").
			Optional().
			Comment("Error of the latest failed execution, masked."),
		field.Enum("result_status").
			Values("SUCCESS", "PARTIAL_SUCCESS", "FAILED").
			Optional().
			Nillable().
			Comment("Outcome of the work itself, as its handler reported it (e.g. an import with some bad rows is PARTIAL_SUCCESS); empty for types that report none."),
		field.Enum("attention_status").
			GoType(lifecycle.Status("")).
			Optional().
			Nillable().
			Comment("The status when it is one a person looks for and few tasks are in (FAILED, CANCELLED, RETRY_PENDING), else empty; written with status by the store. It is indexed where status cannot be: a claim and a success leave it empty, so they stay HOT updates.").
			Annotations(entgql.Skip()),
		field.Int64("version").
			Default(1).
			Comment("Incremented by every committed change; orders events per task."),
		field.Bool("cancel_requested").
			Default(false),
		field.String("cancel_reason").
			Optional(),
		field.Time("run_at").
			Comment("Not run before this time."),
		field.Time("updated_at").
			Default(utcNow).
			Annotations(entgql.OrderField("UPDATED_AT")),
		field.Time("finished_at").
			Optional().
			Nillable().
			Annotations(entgql.OrderField("FINISHED_AT")),
		field.Int("schedule_id").
			Optional().
			Nillable().
			Immutable().
			Comment("The schedule that created it, if any (it may since have been deleted).").
			Annotations(entgql.Type("ID")),
		field.Time("schedule_slot").
			Optional().
			Nillable().
			Immutable().
			Comment("The slot of its schedule it was created for (runNow: the time it was asked)."),
		field.String("trace_parent").
			Optional().
			Nillable().
			Immutable().
			Comment("The W3C traceparent of the span that created it, when tracing was on: its executions' spans continue that trace, on whichever node runs them.").
			Annotations(entgql.Skip()),
		field.Int("workflow_id").
			Optional().
			Nillable().
			Immutable().
			Comment("The workflow it is a step of, if any.").
			Annotations(entgql.Skip()),
		field.String("step_key").
			Optional().
			Nillable().
			Immutable().
			Comment("Its key among its workflow's steps: its children find its result by it."),
		field.Time("deadline").
			Optional().
			Nillable().
			Immutable().
			Comment("The absolute time it must finish by (SUCCESS), if any: its own finishBy, its type's or its schedule's."),
		field.Time("deadline_at_risk_at").
			Optional().
			Nillable().
			Comment("When the deadlines loop flagged it at risk (still open within its margin of the deadline), once."),
		field.Time("deadline_missed_at").
			Optional().
			Nillable().
			Comment("When it was found to have missed its deadline (the loop, or a late finish), once."),
		field.Time("deadline_met_at").
			Optional().
			Nillable().
			Comment("When it finished by its deadline."),
		field.Int("parent_count").
			Default(0).
			Immutable().
			Comment("How many tasks it was created to wait for (a step's parents, or createTask's dependsOn): a claimed task with parents is handed their results.").
			Annotations(entgql.Skip()),
	}
}

// Edges of Task.
func (Task) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("instances", TaskInstance.Type).
			Annotations(entgql.Skip(entgql.SkipAll)),
		edge.To("logs", TaskLog.Type).
			Annotations(entgql.Skip(entgql.SkipAll)),
		edge.To("artifacts", Artifact.Type).
			Comment("Files the task read or wrote (source, error report, export, report)."),
	}
}

// Indexes of Task.
func (Task) Indexes() []ent.Index {
	return []ent.Index{
		// Idempotency keys are unique per owner identity: the hash covers
		// it. Immutable columns only (no index on a column a transition
		// changes).
		index.Fields("idempotency_hash").
			Unique().
			Annotations(entsql.IndexWhere("idempotency_hash IS NOT NULL")),
		// No index may include a column that a transition changes (status,
		// version, progress, result, finished_at...): then the claim's and
		// the finish's updates of a task are HOT (heap-only: no index entry
		// written; the table keeps free room on each page for them: its
		// fillfactor, in internal/migrate/postgres). Filters on status are
		// served by the instances' indexes and by attention_status
		// (store/hints.go).
		index.Fields("created_at"),
		// Filters on the rare statuses (store.StatusHints).
		index.Fields("attention_status", "created_at").
			Annotations(entsql.IndexWhere("attention_status IS NOT NULL")),
		index.Fields("biz_id").
			Annotations(entsql.IndexWhere("biz_id <> ''")),
		// Searches in the (masked) input: equality of a value at a path is
		// a containment (input @> '{"a":{"b":"x"}}') that this GIN index
		// serves on PostgreSQL (store/payload.go). input is immutable, so
		// the index costs the insert only; result is not indexed, as a
		// finish writes it. SQLite gets no index: its migrations leave it
		// out (internal/migrate/sqlite).
		index.Fields("input").
			StorageKey("task_input_path").
			Annotations(
				entsql.IndexTypes(map[string]string{dialect.Postgres: "GIN"}),
				entsql.OpClass("jsonb_path_ops"),
			),
		// Exactly one task per slot of a schedule, whichever node fires it.
		index.Fields("schedule_id", "schedule_slot").
			Unique().
			StorageKey("task_schedule_slot").
			Annotations(entsql.IndexWhere("schedule_id IS NOT NULL")),
		// The tasks still open against their deadline, for the deadlines
		// loop (its predicate changes only for tasks with a deadline).
		index.Fields("deadline").
			StorageKey("task_deadline_open").
			Annotations(entsql.IndexWhere("deadline IS NOT NULL AND deadline_missed_at IS NULL AND deadline_met_at IS NULL")),
		// Every task with a deadline, by it: the on-time report's range.
		index.Fields("deadline").
			StorageKey("task_deadline").
			Annotations(entsql.IndexWhere("deadline IS NOT NULL")),
		// The missed ones, by when: the DEADLINE_MISSED alert's window.
		index.Fields("deadline_missed_at").
			StorageKey("task_deadline_missed").
			Annotations(entsql.IndexWhere("deadline_missed_at IS NOT NULL")),
		// A workflow's steps (immutable columns only).
		index.Fields("workflow_id", "step_key").
			Unique().
			Annotations(entsql.IndexWhere("workflow_id IS NOT NULL")),
	}
}

// Hooks of Task.
func (Task) Hooks() []ent.Hook {
	return []ent.Hook{statusGuard("task", lifecycle.Pending, lifecycle.WaitingDependency)}
}

// Annotations of Task.
func (Task) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.QueryField(),
		entgql.MultiOrder(),
	}
}
