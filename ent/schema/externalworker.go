package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// ExternalWorker is a worker process outside the server that runs
// external task types over the worker protocol, as it last said in a
// claim: its id, language and version, the types it claims, the
// credentials it claims with. The node that serves a claim writes the row
// (at most once per refresh interval per worker, not per claim); a row
// whose lease ran out is a worker gone. An admin sets draining: the
// worker's claims then take nothing and tell it to stop. The leading node
// deletes rows gone for a day (package nodes).
type ExternalWorker struct{ ent.Schema }

// Fields of ExternalWorker.
func (ExternalWorker) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").
			Immutable().
			Comment("The id the worker reports (workerId), unique in its tenant; its executions' worker id is ext:<name>."),
		field.String("tenant").
			Immutable().
			Default("").
			Comment("The tenant of the credentials it claims with."),
		field.String("user").
			Default("").
			Comment("The user of the credentials it claims with."),
		field.String("language").
			Default("").
			Comment("The language the worker reports (python, java...)."),
		field.String("version").
			Default("").
			Comment("The version it reports (of its language or client)."),
		field.Strings("types").
			Comment("The task types it claims."),
		field.String("node").
			Default("").
			Comment("The node that served its last recorded claim."),
		field.Time("first_seen_at"),
		field.Time("last_seen_at").
			Comment("Its last recorded claim (recorded at most once per refresh interval)."),
		field.Time("expires_at").
			Comment("last_seen_at plus the workers' lease: past it, the worker is gone."),
		field.Bool("draining").
			Default(false).
			Comment("Set by an admin: its claims take nothing and tell it to stop, until unset. Only the drain mutation writes it."),
	}
}

// Indexes of ExternalWorker.
func (ExternalWorker) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("tenant", "name").Unique(),
	}
}

// Annotations of ExternalWorker.
func (ExternalWorker) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
