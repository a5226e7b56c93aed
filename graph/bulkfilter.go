package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/engine"
)

// whereJSON is the where argument of the field being resolved, as the
// client sent it (variables substituted), as JSON: what a bulk action
// keeps, to decode again when it runs (TaskWhereDecoder) — custom fields
// such as search included, which the decoded input holds only as
// functions.
func whereJSON(ctx context.Context) (json.RawMessage, error) {
	raw := whereArgument(ctx)
	if raw == nil {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("where: %w", err)
	}
	return b, nil
}

// TaskWhereDecoder decodes a TaskWhereInput kept by whereJSON as the API
// decodes the argument, with r's input resolvers: the filter a bulk action
// applies when it runs is the one it was submitted with.
func TaskWhereDecoder(r *Resolver) engine.WhereDecoder {
	es := NewExecutableSchema(Config{Resolvers: r}).(*executableSchema)
	return func(ctx context.Context, raw json.RawMessage) (*ent.TaskWhereInput, error) {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("where: %w", err)
		}
		if m == nil {
			return &ent.TaskWhereInput{}, nil
		}
		w, err := newExecutionContext(nil, es, nil).unmarshalInputTaskWhereInput(ctx, m)
		if err != nil {
			return nil, err
		}
		return &w, nil
	}
}
