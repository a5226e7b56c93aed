package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// StallOverride is a task's own stallAfter, when its creator set one
// instead of its type's. It lives beside the task rather than in it
// because the task insert is the store's hot path; the watchdog reads it
// for running executions only (by task id).
type StallOverride struct{ ent.Schema }

// Fields of StallOverride.
func (StallOverride) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").
			Unique().
			Immutable(),
		field.Int("stall_after_seconds").
			Immutable().
			Comment("0 turns stall detection off for the task."),
	}
}

// Annotations of StallOverride.
func (StallOverride) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
