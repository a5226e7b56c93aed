package schema

import (
	"encoding/json"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TaskInputVersion is one input a task ran with. Version 1 is the input it
// was created with; an edit (edit and retry, replay with input) writes the
// task's new input and keeps the one it replaces here, so that every
// version stays: the first edit writes versions 1 and 2, the next 3. A
// task never edited has no row (its version 1 is the task's input). Input
// is masked like a task's; the unmasked input is sealed as the task's is.
// Written once, by the store; visible to whoever sees its task.
type TaskInputVersion struct{ ent.Schema }

// Mixin of TaskInputVersion.
func (TaskInputVersion) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of TaskInputVersion.
func (TaskInputVersion) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").Immutable(),
		field.Int("version").Immutable(),
		field.JSON("input", json.RawMessage{}).
			Immutable().
			Comment("Masked."),
		field.Bytes("input_sealed").
			Optional().
			Immutable().
			Sensitive().
			Comment("The unmasked input, encrypted, when masking changed it."),
		field.Int("from_instance_no").
			Immutable().
			Comment("The first execution that ran with it."),
		field.String("author").
			Immutable().
			Comment("Who wrote it: the task's owner for version 1, the reviewer for an edit."),
		field.String("author_source").
			Default("").
			Immutable(),
		field.Text("reason").
			Default("").
			Immutable().
			Comment("Why it was edited, masked."),
	}
}

// Indexes of TaskInputVersion.
func (TaskInputVersion) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_id", "version").Unique(),
	}
}

// Annotations of TaskInputVersion: GraphQL's InputVersion is written by
// hand (graph/schema/review.graphql).
func (TaskInputVersion) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
