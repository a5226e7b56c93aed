// Package schema declares the ent entities of taskgraph (one file per entity)
// and what of them GraphQL exposes.
package schema

import (
	"time"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"
)

// CreatedAt adds an immutable, orderable creation time.
type CreatedAt struct{ mixin.Schema }

// Fields of the mixin.
func (CreatedAt) Fields() []ent.Field {
	return []ent.Field{
		field.Time("created_at").
			Default(utcNow).
			Immutable().
			Annotations(entgql.OrderField("CREATED_AT")),
	}
}

// utcNow keeps every stored time in UTC, so that SQLite's text timestamps
// compare in the same order as the instants they name.
func utcNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
