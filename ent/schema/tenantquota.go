package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// TenantQuota is what one tenant may hold at once, across all its task
// types: its running and its waiting instances, its starts in a window
// (a rate), its enabled schedules, and how often a schedule of its may
// fire; and its weight in the claim's fair share. Platform administrators set it (package flow);
// a create beyond it (store/quota.go) and a schedule beyond it (package
// schedule) are refused with QUOTA_EXCEEDED, the row locked on PostgreSQL
// so that concurrent requests count one after the other. A tenant without
// a row, or a limit left empty, has no such limit (the schedule interval
// floor then is the deployment's, --min-schedule-interval).
type TenantQuota struct{ ent.Schema }

// Fields of TenantQuota.
func (TenantQuota) Fields() []ent.Field {
	return []ent.Field{
		field.String("tenant").
			Unique().
			Immutable(),
		field.Int("max_waiting").
			Optional().
			Nillable().
			Comment("At most this many of the tenant's instances waiting (PENDING, RETRY_PENDING), of every type: a create beyond it is refused."),
		field.Int("max_schedules").
			Optional().
			Nillable().
			Comment("At most this many of the tenant's schedules enabled (not paused): creating, editing or resuming one beyond it is refused."),
		field.Int("min_schedule_interval_seconds").
			Optional().
			Nillable().
			Comment("A schedule of the tenant fires at most this often (its interval, or its cron's shortest gap); replaces the deployment's floor."),
		field.Int("max_running").
			Optional().
			Nillable().
			Comment("At most this many of the tenant's instances running (EXECUTING), of every type: the claim takes no more of the tenant's tasks until some end."),
		field.Int("weight").
			Default(1).
			Comment("The tenant's weight in the claim's fair share (1..1000): of a task type that several tenants wait for, each claim takes their tasks in proportion to their weights (store/fair.go)."),
		field.Int("rate_limit").
			Optional().
			Nillable().
			Comment("At most this many starts of the tenant's tasks, of every type, in any window of rate_period_seconds (counted in tenant_flow_starts under the task type '')."),
		field.Int("rate_period_seconds").
			Default(1),
		field.String("updated_by").
			Default(""),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Annotations of TenantQuota.
func (TenantQuota) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "tenant_quotas"}, entgql.Skip(entgql.SkipAll)}
}
