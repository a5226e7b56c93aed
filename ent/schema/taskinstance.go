package schema

import (
	"encoding/json"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// TaskInstance is one execution of a task. A retry creates a new instance and
// leaves the old one, with its error, as evidence.
type TaskInstance struct{ ent.Schema }

// Mixin of TaskInstance.
func (TaskInstance) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of TaskInstance.
func (TaskInstance) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").
			Immutable(),
		field.Int("instance_no").
			Immutable().
			Comment("1 for the first execution, 2 for the next..."),
		field.Enum("status").
			GoType(lifecycle.Status("")).
			Annotations(entgql.Type("TaskStatus")),
		field.Int("attempt").
			Immutable().
			Comment("Which attempt of the retry policy this is; a manual retry starts again at 1."),
		field.String("task_type").
			Immutable().
			Comment("Copied from the task so that claiming needs no join."),
		field.Int("priority").
			Immutable().
			Comment("Copied from the task so that claiming needs no join."),
		field.String("tenant").
			Immutable().
			Default("").
			Annotations(entgql.Skip()).
			Comment("The task's tenant, copied so that a claim reads a tenant's share of a type without a join."),
		field.Time("run_at").
			Immutable().
			Comment("Not claimed before this time (backoff)."),
		field.String("worker_id").
			Optional(),
		field.Time("started_at").
			Optional().
			Nillable(),
		field.Time("heartbeat_at").
			Optional().
			Nillable(),
		field.Time("finished_at").
			Optional().
			Nillable(),
		field.Time("progress_at").
			Optional().
			Nillable().
			Comment("When its handler last reported progress or wrote a log line (carried by heartbeats); empty: not since it started."),
		field.Time("stalled_at").
			Optional().
			Nillable().
			Comment("Set by the watchdog when progress and logs stopped moving for the type's stallAfter while heartbeats went on; cleared when it moves again."),
		field.Enum("error_kind").
			GoType(lifecycle.ErrorKind("")).
			Optional().
			Nillable().
			Annotations(entgql.Type("ErrorKind")),
		field.Text("last_error").
			Optional(),
		field.JSON("result", json.RawMessage{}).
			Optional().
			Annotations(entgql.Type("JSON")),
		field.Int("waiting_on").
			Default(0).
			Comment("How many parents of its task it still waits for (WAITING_DEPENDENCY); the transaction that brings it to zero releases it.").
			Annotations(entgql.Skip()),
		field.Int64("version").
			Default(1).
			Comment("Fencing token: bumped by every transition; writes of a stale execution carry an old one and are refused."),
	}
}

// Edges of TaskInstance.
func (TaskInstance) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("task", Task.Type).
			Ref("instances").
			Field("task_id").
			Unique().
			Required().
			Immutable(),
	}
}

// Indexes of TaskInstance.
func (TaskInstance) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_id", "instance_no").Unique(),
		// At most one live instance per task (ARCHITECTURE.md, invariant 3).
		index.Fields("task_id").
			Unique().
			StorageKey("taskinstance_one_live_per_task").
			Annotations(entsql.IndexWhere("status IN (" + lifecycle.QuotedList(lifecycle.LiveStatuses...) + ")")),
		// What the claim reads: per task type, in claim order, only the
		// waiting instances. The claim asks for one type at a time, so the
		// index hands rows out already ordered and the claim never sorts
		// or scans the backlog (store/claim.go).
		index.Fields("task_type", "priority", "run_at", "id").
			StorageKey("taskinstance_claimable").
			Annotations(entsql.IndexWhere("status IN (" + lifecycle.QuotedList(lifecycle.WaitingStatuses...) + ")")),
		// What the claim reads of a type whose tenants' shares are held
		// back (a tenant's pause, cap or rate), or that several tenants
		// wait for (the fair share): per type and tenant, in
		// claim order, only the waiting instances (store/claim.go).
		index.Fields("task_type", "tenant", "priority", "run_at", "id").
			StorageKey("taskinstance_tenant_claimable").
			Annotations(entsql.IndexWhere("status IN (" + lifecycle.QuotedList(lifecycle.WaitingStatuses...) + ")")),
		// What a claim counts against its tenant's quota (tenant_quotas.
		// max_running): a tenant's running instances of every type, up to
		// the cap (store/fair.go).
		index.Fields("tenant").
			StorageKey("taskinstance_tenant_running").
			Annotations(entsql.IndexWhere("status = " + lifecycle.QuotedList(lifecycle.Executing))),
		// What a create counts against its tenant's quota (tenant_quotas.
		// max_waiting): a tenant's waiting instances of every type, up to
		// the cap (store/quota.go).
		index.Fields("tenant").
			StorageKey("taskinstance_tenant_waiting").
			Annotations(entsql.IndexWhere("status IN (" + lifecycle.QuotedList(lifecycle.WaitingStatuses...) + ")")),
		// What the watchdog reads: the running instances only.
		index.Fields("heartbeat_at").
			StorageKey("taskinstance_running").
			Annotations(entsql.IndexWhere("status = " + lifecycle.QuotedList(lifecycle.Executing))),
	}
}

// Hooks of TaskInstance.
func (TaskInstance) Hooks() []ent.Hook {
	return []ent.Hook{statusGuard("task instance", lifecycle.Pending, lifecycle.RetryPending, lifecycle.WaitingDependency)}
}

// Annotations of TaskInstance.
func (TaskInstance) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput, entgql.SkipWhereInput, entgql.SkipOrderField),
	}
}
