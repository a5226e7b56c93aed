package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TaskLog is one line of a task's trace, written by its handler or by the
// engine (claims refused, retries scheduled, watchdog actions).
type TaskLog struct{ ent.Schema }

// Mixin of TaskLog.
func (TaskLog) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of TaskLog.
func (TaskLog) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").
			Immutable(),
		field.Int("instance_id").
			Optional().
			Nillable().
			Immutable().
			Annotations(entgql.Type("ID")),
		field.Enum("level").
			Values("DEBUG", "INFO", "WARN", "ERROR").
			Immutable(),
		field.Text("message").
			Immutable(),
		field.JSON("fields", map[string]any{}).
			Optional().
			Immutable().
			Annotations(entgql.Type("Map")),
	}
}

// Edges of TaskLog.
func (TaskLog) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("task", Task.Type).
			Ref("logs").
			Field("task_id").
			Unique().
			Required().
			Immutable(),
	}
}

// Indexes of TaskLog.
func (TaskLog) Indexes() []ent.Index {
	return []ent.Index{
		// "Latest N of a task" and the live tail both page by id within a task.
		index.Fields("task_id"),
	}
}

// Annotations of TaskLog.
func (TaskLog) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput, entgql.SkipWhereInput),
	}
}
