package scalar

import (
	"fmt"
	"time"

	"github.com/99designs/gqlgen/graphql"
)

// MarshalTime writes a time as RFC 3339 with nanoseconds, in UTC.
func MarshalTime(t time.Time) graphql.Marshaler {
	return graphql.MarshalTime(t.UTC())
}

// UnmarshalTime reads an RFC 3339 time and keeps it as the databases do: in
// UTC, to the microsecond. SQLite compares stored times as text, so a filter
// given in another zone, or finer than a microsecond, would otherwise match
// differently there than on PostgreSQL.
func UnmarshalTime(v any) (time.Time, error) {
	t, err := graphql.UnmarshalTime(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("a Time is an RFC 3339 string such as 2026-11-29T09:00:00Z: %w", err)
	}
	return t.UTC().Truncate(time.Microsecond), nil
}
