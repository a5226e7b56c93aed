package schema

import (
	"encoding/json"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TaskReview is one stop of a task in REVIEW_PENDING: the execution whose
// business failure its review policy handed to a person, the evidence that
// person decides on, and, once decided, the decision with who, when and
// why. A task has one review per execution that asked for one; only the
// store writes them, and a decision is written once (with the transition
// that leaves REVIEW_PENDING). Visible to whoever sees its task.
type TaskReview struct{ ent.Schema }

// Mixin of TaskReview: created_at is when the task entered REVIEW_PENDING.
func (TaskReview) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of TaskReview.
func (TaskReview) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").Immutable(),
		field.Int("instance_id").
			Immutable().
			Comment("The execution that ended in review."),
		field.Int("instance_no").Immutable(),
		field.Enum("trigger").
			Values("NON_RETRYABLE", "NEEDS_REVIEW", "PARTIAL_SUCCESS").
			Immutable().
			Comment("What sent it to review: a NON_RETRYABLE failure, the handler's explicit needs-review outcome, or a PARTIAL_SUCCESS its type asks to confirm."),
		field.Text("reason").
			Immutable().
			Comment("The execution's error or the handler's words, masked."),
		field.JSON("evidence", json.RawMessage{}).
			Optional().
			Immutable().
			Comment("What the handler gave the reviewer to decide on (counts, failed rows, the error report's file), masked."),
		field.Bool("four_eyes").
			Default(false).
			Immutable().
			Comment("The submitter may not decide (the type's policy when it entered review)."),
		field.Time("deadline").
			Optional().
			Nillable().
			Immutable(),
		field.Enum("on_deadline").
			Values("REJECT", "ALERT").
			Optional().
			Nillable().
			Immutable(),
		field.Time("overdue_at").
			Optional().
			Nillable().
			Comment("When the deadline's outcome ran (once): the reject, or the REVIEW_OVERDUE alert's first sight of it."),
		field.Enum("decision").
			Values("APPROVED", "EDITED", "ACCEPTED", "REJECTED", "EXPIRED", "CANCELLED").
			Optional().
			Nillable(),
		field.String("decided_by").
			Optional().
			Nillable().
			Comment("The reviewer's user name (system: the deadline)."),
		field.String("decided_by_source").
			Optional().
			Nillable(),
		field.Time("decided_at").
			Optional().
			Nillable(),
		field.Text("decision_reason").
			Optional().
			Nillable().
			Comment("Why, in the reviewer's words, masked."),
		field.Int("input_version").
			Optional().
			Nillable().
			Comment("The input version an edit and retry made."),
	}
}

// Indexes of TaskReview: one per execution; a task's reviews; the open
// reviews by deadline (the watchdog's pass reads them).
func (TaskReview) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("instance_id").Unique(),
		index.Fields("task_id"),
		index.Fields("deadline").
			StorageKey("taskreview_open_deadline").
			Annotations(entsql.IndexWhere("decided_at IS NULL AND deadline IS NOT NULL AND overdue_at IS NULL")),
	}
}

// Annotations of TaskReview: GraphQL's Review is written by hand
// (graph/schema/review.graphql) over this entity.
func (TaskReview) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
