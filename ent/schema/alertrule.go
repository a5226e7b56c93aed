package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AlertRule says what is worth telling someone about (package alert): a
// task FAILED, timeouts, stalls, N failures of a type in a window, a backlog
// older than a threshold, no watchdog leader, a node gone. Rules are edited
// live: the evaluator reads them on every pass.
type AlertRule struct{ ent.Schema }

// Mixin of AlertRule.
func (AlertRule) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of AlertRule.
func (AlertRule) Fields() []ent.Field {
	return []ent.Field{
		field.String("tenant").
			Default("").
			Immutable(),
		field.String("name"),
		field.Enum("kind").
			Values("TASK_FAILED", "TIMEOUT", "STALLED", "FAILURE_RATE", "BACKLOG", "NO_LEADER", "NODE_GONE", "CLOCK_SKEW", "REVIEW_OVERDUE", "DEADLINE_AT_RISK", "DEADLINE_MISSED"),
		field.Bool("enabled").
			Default(true),
		field.String("task_type").
			Default("").
			Comment("Only tasks of this type; empty: any type (one incident per type)."),
		field.String("owner").
			Default("").
			Comment("Only tasks of this owner; empty: any owner."),
		field.String("error_kind").
			Default("").
			Comment("TASK_FAILED only: only failures of this error kind; empty: any."),
		field.Int("threshold").
			Default(0).
			Comment("FAILURE_RATE: failures in the window that open an incident."),
		field.Int("window_seconds").
			Default(0).
			Comment("FAILURE_RATE: the window; BACKLOG: the age of the oldest waiting task; NO_LEADER: how long without one."),
		field.Int("quiet_seconds").
			Default(0).
			Comment("After a notice, no other opening notice of this rule for this long."),
		field.JSON("channel_ids", []int{}).
			Optional(),
		field.Time("silenced_until").
			Optional().
			Nillable(),
		field.Time("last_notified_at").
			Optional().
			Nillable(),
		field.String("created_by").
			Default("").
			Immutable(),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Indexes of AlertRule.
func (AlertRule) Indexes() []ent.Index {
	return []ent.Index{index.Fields("tenant", "name").Unique()}
}

// Annotations of AlertRule.
func (AlertRule) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
