package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AlertIncident is one condition of one rule about one subject (a task
// type, a node, the watchdog), from when it was seen until it cleared:
// repeated occurrences count on it instead of opening more. Notices of it
// (opened, recovered) are delivered as alert.deliver tasks whose biz_id
// names the incident.
type AlertIncident struct{ ent.Schema }

// Fields of AlertIncident.
func (AlertIncident) Fields() []ent.Field {
	return []ent.Field{
		field.String("tenant").
			Default("").
			Immutable(),
		field.Int("rule_id").
			Immutable(),
		field.String("rule_name"),
		field.Enum("kind").
			Values("TASK_FAILED", "TIMEOUT", "STALLED", "FAILURE_RATE", "BACKLOG", "NO_LEADER", "NODE_GONE", "CLOCK_SKEW", "REVIEW_OVERDUE").
			Immutable(),
		field.String("subject").
			Immutable().
			Comment("What it is about: type:<name>, worker:<id>, watchdog."),
		field.Enum("status").
			Values("OPEN", "RESOLVED"),
		field.Int("occurrences").
			Default(1),
		field.String("summary").
			Default(""),
		field.Int("first_task_id").
			Optional().
			Nillable().
			Immutable(),
		field.Int("last_task_id").
			Optional().
			Nillable(),
		field.Time("opened_at").
			Immutable(),
		field.Time("last_seen_at"),
		field.Time("resolved_at").
			Optional().
			Nillable(),
		field.Enum("resolution").
			Values("RECOVERED", "MANUAL", "RULE_CHANGED").
			Optional().
			Nillable(),
		field.String("resolved_by").
			Default(""),
		field.Time("silenced_until").
			Optional().
			Nillable(),
		field.Bool("notified").
			Default(false).
			Comment("Its opening notice was sent (or handed to delivery)."),
		field.Bool("recovery_notified").
			Default(false),
		field.Time("updated_at"),
	}
}

// Indexes of AlertIncident.
func (AlertIncident) Indexes() []ent.Index {
	return []ent.Index{
		// One open incident per rule and subject, whoever evaluates (two
		// leaders overlapping at a handover cannot open two).
		index.Fields("rule_id", "subject").
			Unique().
			StorageKey("alertincident_one_open").
			Annotations(entsql.IndexWhere("status = 'OPEN'")),
		index.Fields("tenant", "opened_at"),
		index.Fields("updated_at"),
	}
}

// Annotations of AlertIncident.
func (AlertIncident) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
