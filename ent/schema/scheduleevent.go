package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// ScheduleEvent is a line of a schedule's log: a slot fired, skipped,
// missed, queued; a previous run cancelled; a firing that failed.
type ScheduleEvent struct{ ent.Schema }

// Mixin of ScheduleEvent.
func (ScheduleEvent) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of ScheduleEvent.
func (ScheduleEvent) Fields() []ent.Field {
	return []ent.Field{
		field.Int("schedule_id").
			Immutable().
			Annotations(entgql.Type("ID")),
		field.Enum("kind").
			Values("FIRED", "RUN_NOW", "SKIPPED", "MISFIRED", "QUEUED", "CANCELLED_PREVIOUS", "FAILED", "ENDED").
			Immutable(),
		field.Time("slot").
			Optional().
			Nillable().
			Immutable().
			Comment("The slot it is about."),
		field.Int("task_id").
			Optional().
			Nillable().
			Immutable().
			Comment("The task created (FIRED, RUN_NOW) or cancelled (CANCELLED_PREVIOUS)."),
		field.Int("missed").
			Default(0).
			Immutable().
			Comment("MISFIRED: how many slots were missed."),
		field.String("message").
			Immutable(),
		field.String("node").
			Default("").
			Immutable().
			Comment("The node that wrote it."),
	}
}

// Edges of ScheduleEvent.
func (ScheduleEvent) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("schedule", Schedule.Type).
			Ref("events").
			Field("schedule_id").
			Unique().
			Required().
			Immutable(),
	}
}

// Indexes of ScheduleEvent.
func (ScheduleEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("schedule_id", "created_at"),
	}
}

// Annotations of ScheduleEvent.
func (ScheduleEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput, entgql.SkipWhereInput),
	}
}
