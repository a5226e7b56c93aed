package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// ExternalTaskType is a task type an admin declared through the API
// (declareTaskType) whose handler runs outside the process: a worker in
// any language claims its tasks over the worker protocol (/worker/v1/).
// Every node loads the rows into its task type registry (package
// external); the in-process pool never claims them.
type ExternalTaskType struct{ ent.Schema }

// Fields of ExternalTaskType.
func (ExternalTaskType) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").
			Unique().
			Immutable(),
		field.String("description").
			Default(""),
		field.Text("input_schema").
			Comment("The JSON Schema of the input, as declared."),
		field.Int("timeout_seconds"),
		field.String("retry_policy"),
		field.Int("stall_after_seconds").
			Default(0),
		field.String("stall_action").
			Default("FLAG"),
		field.Text("review_policy").
			Default("").
			Comment("The type's review policy as declared (JSON of tasktype.ReviewPolicy), empty: none."),
		field.String("updated_by").
			Default(""),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Annotations of ExternalTaskType.
func (ExternalTaskType) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
