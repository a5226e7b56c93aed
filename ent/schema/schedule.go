package schema

import (
	"encoding/json"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Schedule creates a task at every slot of a cron expression or a fixed
// interval (package schedule fires it). It holds the task to create the way
// createTask would: input masked, the unmasked input sealed for the fired
// task. Only package schedule writes it.
type Schedule struct{ ent.Schema }

// Mixin of Schedule.
func (Schedule) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of Schedule.
func (Schedule) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").
			Annotations(entgql.OrderField("NAME")),
		field.String("owner").
			Immutable().
			Comment("Who created it: the tasks it fires are theirs."),
		field.String("owner_source").
			Default("").
			Immutable().
			Comment("Where the owner's credentials came from: with tenant and owner, the identity the tasks belong to.").
			Annotations(entgql.Skip(entgql.SkipWhereInput)),
		field.String("owner_role").
			Default("").
			Immutable().
			Annotations(entgql.Skip(entgql.SkipWhereInput)),
		field.String("tenant").
			Default("").
			Immutable(),
		field.String("cron").
			Default("").
			Comment("A cron expression, with an optional leading seconds field (or @hourly, @daily...); empty with an interval."),
		field.Int("interval_seconds").
			Optional().
			Nillable().
			Comment("A fixed interval instead of cron: slots at start (or creation) + k × interval."),
		field.String("timezone").
			Default("").
			Comment("IANA zone the cron expression is read in; empty: the server's."),
		field.String("finish_by").
			Default("").
			Comment("The time of day (HH:MM, in the schedule's timezone) each fire's task must finish by: the first such time after its slot; empty: none."),
		field.Int("finish_within_seconds").
			Optional().
			Nillable().
			Comment("Instead of finishBy: each fire's task must finish within this many seconds of its slot."),
		field.String("task_type"),
		field.String("task_title").
			Default(""),
		field.JSON("task_input", json.RawMessage{}).
			Comment("Input of the tasks, masked like a task's.").
			Annotations(entgql.Type("JSON")),
		field.Bytes("task_input_sealed").
			Optional().
			Sensitive().
			Comment("The unmasked input, encrypted, when masking changed it.").
			Annotations(entgql.Skip()),
		field.Int("task_priority").
			Optional().
			Nillable(),
		field.Int("task_timeout_seconds").
			Optional().
			Nillable(),
		field.String("task_retry_policy").
			Optional().
			Nillable(),
		field.Int("task_max_attempts").
			Optional().
			Nillable(),
		field.JSON("workflow", json.RawMessage{}).
			Optional().
			Comment("The workflow to create at each slot instead of a task: createWorkflow's definition (title, onParentFailure, steps), the steps' inputs masked like a task's; empty for a task schedule.").
			Annotations(entgql.Type("JSON")),
		field.Bytes("workflow_sealed").
			Optional().
			Sensitive().
			Comment("The unmasked workflow definition, encrypted, when masking changed it.").
			Annotations(entgql.Skip()),
		field.Int("last_workflow_id").
			Optional().
			Nillable().
			Comment("The latest workflow it created: the previous run its overlap policy looks at.").
			Annotations(entgql.Type("ID")),
		field.Bool("paused").
			Default(false),
		field.Time("start_at").
			Optional().
			Nillable().
			Comment("No slot before this time."),
		field.Time("end_at").
			Optional().
			Nillable().
			Comment("No slot after this time."),
		field.Enum("misfire_policy").
			Values("SKIP", "RUN_ONCE").
			Default("SKIP").
			Comment("Slots missed while no scheduler ran: skipped, or run once for all of them."),
		field.Enum("overlap_policy").
			Values("SKIP", "QUEUE", "CANCEL_PREVIOUS", "ALLOW").
			Default("SKIP").
			Comment("A slot that comes while the previous run is still live: skipped, queued behind it, the previous cancelled, or both allowed to run."),
		field.Time("next_fire_at").
			Optional().
			Nillable().
			Comment("The next slot to fire; empty once the schedule has ended.").
			Annotations(entgql.OrderField("NEXT_FIRE_AT")),
		field.Time("last_fired_at").
			Optional().
			Nillable().
			Comment("The slot of the latest task it created."),
		field.Int("last_task_id").
			Optional().
			Nillable().
			Comment("The latest task it created: the previous run its overlap policy looks at.").
			Annotations(entgql.Type("ID")),
		field.JSON("queued_slots", []string{}).
			Optional().
			Comment("Slots waiting for the previous run to end (overlap policy QUEUE), RFC 3339.").
			Annotations(entgql.Skip()),
		field.Int("queued_count").
			Default(0).
			Comment("How many slots wait behind the previous run."),
		field.Int64("version").
			Default(1).
			Comment("Bumped by every change; the scheduler's writes are conditional on it, so an edit wins over a firing computed from the old settings."),
		field.Time("updated_at").
			Default(utcNow).
			Annotations(entgql.OrderField("UPDATED_AT")),
	}
}

// Edges of Schedule.
func (Schedule) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("events", ScheduleEvent.Type).
			Annotations(entsql.OnDelete(entsql.Cascade), entgql.RelayConnection()).
			Comment("Every firing, skip and misfire, newest last."),
	}
}

// Indexes of Schedule.
func (Schedule) Indexes() []ent.Index {
	return []ent.Index{
		// What the scheduler scans: the due schedules...
		index.Fields("next_fire_at").
			StorageKey("schedule_due").
			Annotations(entsql.IndexWhere("paused = false AND next_fire_at IS NOT NULL")),
		// ... and those with runs queued behind a live one.
		index.Fields("queued_count").
			StorageKey("schedule_queued").
			Annotations(entsql.IndexWhere("queued_count > 0")),
		index.Fields("owner"),
	}
}

// Annotations of Schedule.
func (Schedule) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.QueryField(),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
