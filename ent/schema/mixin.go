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
// compare in the same order as the instants they name. It is ent's default
// for created_at and updated_at, read from this process's wall clock: the
// store and the services set every such time that another node compares
// (orders, filters, retention) from Store.Now, the database's clock, and
// leave the default to nothing but a row no other node judges.
func utcNow() time.Time { return WallClock().UTC().Truncate(time.Microsecond) }

// WallClock is the clock ent's defaults read: time.Now. A test replaces it
// (never while other tests run) to play a process whose wall clock is off,
// and sees which stamps would follow it.
var WallClock = time.Now
