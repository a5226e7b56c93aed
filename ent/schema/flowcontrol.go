package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// FlowControl is what holds one task type back cluster-wide: a cap on its
// running instances, a rate of starts, a pause. The claim reads it (and on
// PostgreSQL locks it) in its own transaction, through package flow's gate.
// A type without a row is unlimited.
type FlowControl struct{ ent.Schema }

// Fields of FlowControl.
func (FlowControl) Fields() []ent.Field {
	return []ent.Field{
		field.String("task_type").
			Unique().
			Immutable(),
		field.Int("max_running").
			Optional().
			Nillable().
			Comment("At most this many instances EXECUTING at once, across all nodes."),
		field.Int("rate_limit").
			Optional().
			Nillable().
			Comment("At most this many starts in any window of rate_period_seconds."),
		field.Int("rate_period_seconds").
			Default(1),
		field.Bool("paused").
			Default(false),
		field.Time("paused_until").
			Optional().
			Nillable().
			Comment("A pause ends by itself at this time; empty: until resumed."),
		field.String("paused_by").
			Default("").
			Comment("Who paused it (a user name), while paused."),
		field.Bool("paused_by_platform").
			Default(false).
			Comment("Paused by a platform administrator: only one may resume it."),
		field.String("updated_by").
			Default(""),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Annotations of FlowControl.
func (FlowControl) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}

// FlowStart records starts of a rate-limited type: count instances one
// claim started at started_at (the claim's time), admitted under the rate
// at admitted_at (their admission stamp: the time their slot in the
// window freed, at most one emission interval before the claim; see
// package flow). The rate limit counts stamps: at most rate_limit in any
// window of rate_period_seconds. A claim writes one row per distinct stamp;
// rows claimed more than two periods ago are deleted by the claims that
// follow.
type FlowStart struct{ ent.Schema }

// Fields of FlowStart.
func (FlowStart) Fields() []ent.Field {
	return []ent.Field{
		field.String("task_type").
			Immutable(),
		field.Time("started_at").
			Immutable().
			Comment("When the claim started them."),
		field.Time("admitted_at").
			Optional().
			Nillable().
			Immutable().
			Comment("Their admission stamp, which the rate counts (empty in rows written before stamps: started_at)."),
		field.Int("count").
			Immutable(),
	}
}

// Indexes of FlowStart.
func (FlowStart) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_type", "started_at"),
	}
}

// Annotations of FlowStart.
func (FlowStart) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}

// TenantFlowControl is what holds one tenant's share of a task type back:
// a pause of the tenant's tasks of the type, a cap on their running and on
// their waiting instances, a rate of their starts. A tenant's admin changes
// their tenant's rows, a platform administrator any; the claim reads (and
// on PostgreSQL locks) them in its own transaction with the type's own
// FlowControl, through package flow's gate. A tenant without a row takes
// what the type's own control leaves.
type TenantFlowControl struct{ ent.Schema }

// Fields of TenantFlowControl.
func (TenantFlowControl) Fields() []ent.Field {
	return []ent.Field{
		field.String("task_type").
			Immutable(),
		field.String("tenant").
			Immutable(),
		field.Int("max_running").
			Optional().
			Nillable().
			Comment("At most this many of the tenant's instances of the type EXECUTING at once."),
		field.Int("max_waiting").
			Optional().
			Nillable().
			Comment("At most this many of the tenant's instances of the type waiting: a create beyond it is refused."),
		field.Int("rate_limit").
			Optional().
			Nillable().
			Comment("At most this many starts of the tenant's tasks of the type in any window of rate_period_seconds."),
		field.Int("rate_period_seconds").
			Default(1),
		field.Bool("paused").
			Default(false),
		field.Time("paused_until").
			Optional().
			Nillable(),
		field.String("paused_by").
			Default(""),
		field.Bool("paused_by_platform").
			Default(false).
			Comment("Paused by a platform administrator: the tenant's admin may not resume it."),
		field.String("updated_by").
			Default(""),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Indexes of TenantFlowControl.
func (TenantFlowControl) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_type", "tenant").Unique(),
	}
}

// Annotations of TenantFlowControl.
func (TenantFlowControl) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}

// TenantFlowStart records starts of a tenant's tasks of a type whose
// tenant's share is rate-limited, as FlowStart does for the type.
type TenantFlowStart struct{ ent.Schema }

// Fields of TenantFlowStart.
func (TenantFlowStart) Fields() []ent.Field {
	return []ent.Field{
		field.String("task_type").
			Immutable(),
		field.String("tenant").
			Immutable(),
		field.Time("started_at").
			Immutable(),
		field.Time("admitted_at").
			Optional().
			Nillable().
			Immutable(),
		field.Int("count").
			Immutable(),
	}
}

// Indexes of TenantFlowStart.
func (TenantFlowStart) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_type", "tenant", "started_at"),
	}
}

// Annotations of TenantFlowStart.
func (TenantFlowStart) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
