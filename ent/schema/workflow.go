package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Workflow groups the tasks (steps) created together with dependencies
// between them. It has no status of its own: its status and progress are
// derived from its steps'. Only the store writes it.
type Workflow struct{ ent.Schema }

// Mixin of Workflow.
func (Workflow) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of Workflow.
func (Workflow) Fields() []ent.Field {
	return []ent.Field{
		field.String("code").
			Unique().
			Immutable().
			Comment("Readable unique code, e.g. WF-20261202-7K3Q9D2M."),
		field.String("title").
			Default("").
			Immutable().
			Annotations(entgql.OrderField("TITLE")),
		field.String("idempotency_key").
			Optional().
			Nillable().
			Immutable().
			Comment("The caller's idempotency key as shown (masked)."),
		field.String("idempotency_hash").
			Optional().
			Nillable().
			Immutable().
			Comment("Keyed hash of the owner identity and the raw key: what makes a key unique per owner.").
			Annotations(entgql.Skip()),
		field.String("input_hash").
			Immutable().
			Comment("Keyed hash of the whole definition (steps, inputs, edges), to detect a reused idempotency key.").
			Annotations(entgql.Skip()),
		field.String("owner").
			Immutable(),
		field.String("owner_source").
			Default("").
			Immutable(),
		field.String("tenant").
			Default("").
			Immutable(),
		field.String("owner_role").
			Default("").
			Immutable().
			Annotations(entgql.Skip()),
		field.Enum("on_parent_failure").
			Values("CANCEL_DEPENDENTS", "WAIT", "RUN_ANYWAY").
			Default("CANCEL_DEPENDENTS").
			Immutable().
			Comment("The failure policy of its edges that name none.").
			Annotations(entgql.Type("ParentFailurePolicy")),
		field.Int("step_count").
			Immutable().
			Comment("How many steps it was created with."),
		field.Int("schedule_id").
			Optional().
			Nillable().
			Immutable().
			Comment("The schedule that created it, if one did (it stays when the schedule is deleted).").
			Annotations(entgql.Type("ID")),
		field.Time("schedule_slot").
			Optional().
			Nillable().
			Immutable().
			Comment("The slot of its schedule it was created for; its idempotency key names it too."),
	}
}

// Indexes of Workflow.
func (Workflow) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("idempotency_hash").
			Unique().
			Annotations(entsql.IndexWhere("idempotency_hash IS NOT NULL")),
		index.Fields("created_at"),
		index.Fields("schedule_id", "schedule_slot").
			Annotations(entsql.IndexWhere("schedule_id IS NOT NULL")),
	}
}

// Annotations of Workflow: a Relay connection (workflows) with filters;
// its status, progress and steps are derived (graph/schema/workflows.graphql).
func (Workflow) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.QueryField(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
