package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// ClusterNode is one process sharing the database, as it last said: each
// node writes its own row at start and refreshes it every few seconds
// (package nodes); a row whose lease ran out is a node gone (killed, cut
// off), one with stopped_at a node shut down cleanly. The leading node
// deletes rows gone for a day. An admin sets draining; the node sees it at
// its next refresh and stops claiming work. (Not "Node": the Relay
// interface owns that name.)
type ClusterNode struct{ ent.Schema }

// Fields of ClusterNode.
func (ClusterNode) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").
			Unique().
			Immutable().
			Comment("The node's name (--node or host-pid-random), also the worker id of the executions it claims."),
		field.String("host"),
		field.Int("pid"),
		field.String("version").
			Comment("The build the node runs (module version and VCS revision)."),
		field.Strings("roles"),
		field.Time("started_at"),
		field.Time("last_seen_at").
			Comment("When the node last refreshed its row."),
		field.Time("expires_at").
			Comment("last_seen_at plus the node's lease: past it, the node is gone."),
		field.Time("stopped_at").
			Optional().
			Nillable().
			Comment("Set when the node shut down cleanly."),
		field.Int("busy").
			Default(0).
			Comment("Handlers running at the last refresh."),
		field.Int("total").
			Default(0).
			Comment("Handlers the node may run at once (0 without the worker role)."),
		field.Bool("leading").
			Default(false).
			Comment("Whether the node led the watchdog at its last refresh."),
		field.String("files").
			Default("").
			Comment("Where the node's files live: its blob store URL without credentials."),
		field.Bool("draining").
			Default(false).
			Comment("Set by an admin: the node stops claiming work until unset. Only the drain mutation writes it."),
		field.Int64("clock_offset_ms").
			Default(0).
			Comment("The database's clock minus the node's wall clock at its last refresh, in milliseconds (the node runs on the database's clock; a large offset is a node whose time sync is broken)."),
		field.Bool("clock_skewed").
			Default(false).
			Comment("Whether clock_offset_ms was past the node's --clock-skew-threshold at its last refresh."),
	}
}

// Annotations of ClusterNode.
func (ClusterNode) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
