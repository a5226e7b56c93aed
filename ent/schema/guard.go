package schema

import (
	"context"
	"fmt"

	"entgo.io/ent"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// statusGuard refuses a status change made through ent unless the store
// makes it (lifecycle.Guarded) along the transition table: "only the store
// writes status" is enforced here, not left to a comment. The store's own
// transitions are hand-written conditional UPDATEs (package store); what
// goes through ent is checked by this hook. initial lists the states a new
// row may start in.
func statusGuard(entity string, initial ...lifecycle.Status) ent.Hook {
	return func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			if _, set := m.Field("attention_status"); set && !lifecycle.IsGuarded(ctx) {
				return nil, fmt.Errorf("%s attention_status follows status and is written by package store only", entity)
			}
			v, set := m.Field("status")
			if !set {
				return next.Mutate(ctx, m)
			}
			to, err := statusOf(v)
			if err != nil {
				return nil, err
			}
			if !lifecycle.IsGuarded(ctx) {
				return nil, fmt.Errorf("%s status may only be changed by package store, through the transition table (attempted: %s)", entity, to)
			}
			switch op := m.Op(); {
			case op.Is(ent.OpCreate):
				if !slicesContains(initial, to) {
					return nil, &lifecycle.TransitionError{Entity: entity, To: to, Reason: "a new " + entity + " starts " + lifecycle.QuotedList(initial...)}
				}
			case op.Is(ent.OpUpdateOne):
				old, err := m.OldField(ctx, "status")
				if err != nil {
					return nil, fmt.Errorf("%s status guard: %w", entity, err)
				}
				from, err := statusOf(old)
				if err != nil {
					return nil, err
				}
				if from != to {
					var n int
					if m, ok := m.(interface{ ID() (int, bool) }); ok {
						n, _ = m.ID()
					}
					if err := lifecycle.Check(entity, n, from, to); err != nil {
						return nil, err
					}
				}
			default:
				// A bulk update or delete cannot be checked row by row.
				return nil, fmt.Errorf("%s status cannot be changed by a bulk ent mutation", entity)
			}
			return next.Mutate(ctx, m)
		})
	}
}

func statusOf(v ent.Value) (lifecycle.Status, error) {
	switch s := v.(type) {
	case lifecycle.Status:
		return s, nil
	case string:
		return lifecycle.Status(s), nil
	}
	return "", fmt.Errorf("status guard: unexpected status value %T", v)
}

func slicesContains(ss []lifecycle.Status, s lifecycle.Status) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
