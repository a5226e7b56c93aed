package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AuditLog records one action a user asked for: who (actor, role, tenant,
// address), what (action, tasks), when (created_at) and how it ended. It is
// written once per create, cancel, retry, bulk action and download, whether
// the action succeeded or not, and never changed. Admins read their
// tenant's records; platform administrators read all.
type AuditLog struct{ ent.Schema }

// Mixin of AuditLog.
func (AuditLog) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of AuditLog.
func (AuditLog) Fields() []ent.Field {
	return []ent.Field{
		field.String("actor").
			Immutable().
			Comment("The user who asked.").
			Annotations(entgql.OrderField("ACTOR")),
		field.String("role").
			Immutable(),
		field.String("source").
			Default("").
			Immutable().
			Comment("Where the actor's credentials came from (token, jwt, local): the actor is (source, tenant, actor)."),
		field.String("tenant").
			Default("").
			Immutable(),
		field.Enum("action").
			Values("CREATE", "CANCEL", "RETRY", "CANCEL_MANY", "RETRY_MANY", "BULK_CANCEL", "BULK_RETRY", "DOWNLOAD",
				"SCHEDULE_CREATE", "SCHEDULE_UPDATE", "SCHEDULE_PAUSE", "SCHEDULE_RESUME", "SCHEDULE_DELETE", "SCHEDULE_RUN_NOW",
				"FLOW_CONTROL_SET", "TYPE_PAUSE", "TYPE_RESUME",
				"NODE_DRAIN", "NODE_UNDRAIN", "WORKER_DRAIN", "WORKER_UNDRAIN",
				"TASK_TYPE_DECLARE", "TASK_TYPE_DELETE",
				"REVIEW_APPROVE", "REVIEW_EDIT", "REVIEW_ACCEPT", "REVIEW_REJECT", "REVIEW_EXPIRE", "REPLAY_WITH_INPUT",
				"TENANT_QUOTA_SET").
			Immutable().
			Annotations(entgql.OrderField("ACTION")),
		field.JSON("task_ids", []int{}).
			Optional().
			Immutable().
			Comment("The tasks acted on; a failed create has none.").
			Annotations(entgql.Type("[ID!]")),
		field.Enum("outcome").
			Values("OK", "PARTIAL", "FAILED").
			Immutable().
			Comment("PARTIAL: a bulk action that succeeded for some ids only."),
		field.String("error_code").
			Default("").
			Immutable().
			Comment("The error's code (FORBIDDEN, NOT_FOUND...) when the action failed."),
		field.String("remote_addr").
			Default("").
			Immutable().
			Comment("The client's address (X-Forwarded-For only from a trusted proxy)."),
		field.JSON("details", map[string]any{}).
			Optional().
			Immutable().
			Comment("What else was asked (type, title, reason, per-id outcomes...), masked.").
			Annotations(entgql.Type("Map")),
	}
}

// Indexes of AuditLog.
func (AuditLog) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("created_at"),
		index.Fields("actor", "created_at"),
	}
}

// Annotations of AuditLog.
func (AuditLog) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entgql.RelayConnection(),
		entgql.QueryField("auditLogs").Description("The audit log, newest first by default. Admins only."),
		entgql.Skip(entgql.SkipMutationCreateInput, entgql.SkipMutationUpdateInput),
	}
}
