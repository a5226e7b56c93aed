package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TaskDependency is one edge of a workflow: the child waits for the
// parent (lifecycle's WAITING_DEPENDENCY) and, when the parent fails or is
// cancelled, does what the edge's policy says. Edges are written once, with
// the child, and never changed. Only the store writes them.
type TaskDependency struct{ ent.Schema }

// Mixin of TaskDependency.
func (TaskDependency) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of TaskDependency.
func (TaskDependency) Fields() []ent.Field {
	return []ent.Field{
		field.Int("parent_id").Immutable(),
		field.Int("child_id").Immutable(),
		field.Enum("on_parent_failure").
			Values("CANCEL_DEPENDENTS", "WAIT", "RUN_ANYWAY").
			Default("CANCEL_DEPENDENTS").
			Immutable().
			Comment("What a failed or cancelled parent does to the child: cancel it and everything below it, leave it waiting (a retry of the parent that succeeds releases it), or release it once every parent has ended."),
	}
}

// Indexes of TaskDependency: a parent's children (the release reads them)
// and a child's parents.
func (TaskDependency) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("parent_id", "child_id").Unique(),
		index.Fields("child_id"),
	}
}

// Annotations of TaskDependency.
func (TaskDependency) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
