package tasktype

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ExternalDef is a task type whose handler runs outside the process: a
// worker in any language claims its tasks over the worker protocol. It
// has everything a built-in type has but the Go handler.
type ExternalDef struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the input (empty: any object).
	InputSchema json.RawMessage
	Timeout     time.Duration
	RetryPolicy string
	StallAfter  time.Duration
	StallAction StallAction
}

// ErrExternal is the error of Handle on an external type: no process
// runs it (the pool never claims one).
var ErrExternal = errors.New("tasktype: an external type runs in an outside worker, not in the pool")

// NewExternal returns the registry's type for an external definition, or
// an error naming what is wrong with it (name, schema, settings).
func NewExternal(d ExternalDef) (*Type, error) {
	if !typeName.MatchString(d.Name) {
		return nil, fmt.Errorf("task type name %q must match %s", d.Name, typeName)
	}
	if d.Timeout <= 0 {
		return nil, fmt.Errorf("task type %q: the timeout must be positive", d.Name)
	}
	if d.StallAfter < 0 {
		return nil, fmt.Errorf("task type %q: stallAfter must not be negative", d.Name)
	}
	switch d.StallAction {
	case "":
		d.StallAction = StallFlag
	case StallFlag, StallCancel:
	default:
		return nil, fmt.Errorf("task type %q: stall action %q is not %s or %s", d.Name, d.StallAction, StallFlag, StallCancel)
	}
	raw := bytes.TrimSpace(d.InputSchema)
	if len(raw) == 0 {
		raw = []byte(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("task type %q: the input schema is not JSON: %v", d.Name, err)
	}
	c := jsonschema.NewCompiler()
	url := "mem://taskgraph/external/" + d.Name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("task type %q: input schema: %v", d.Name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("task type %q: input schema: %v", d.Name, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("task type %q: the input schema is not JSON: %v", d.Name, err)
	}
	return &Type{
		Name:        d.Name,
		Description: d.Description,
		InputSchema: compact.Bytes(),
		Timeout:     d.Timeout,
		RetryPolicy: cmpOr(d.RetryPolicy, DefaultPolicyName),
		StallAfter:  d.StallAfter,
		StallAction: d.StallAction,
		External:    true,
		schema:      sch,
		decode: func(input json.RawMessage) (any, error) {
			if !json.Valid(input) {
				return nil, errors.New("input is not valid JSON")
			}
			return input, nil
		},
		handle: func(context.Context, *Job, any) error { return NonRetryable(ErrExternal) },
	}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Remove unregisters the external type of that name; a built-in type is
// never removed (false).
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.types[name]
	if !ok || !t.External {
		return false
	}
	delete(r.types, name)
	return true
}

// Declare registers the external type t, in the place of an external type
// of its name if there is one; a built-in type of its name is never
// replaced (an error matching ErrDuplicate).
func (r *Registry) Declare(t *Type) error {
	if !t.External {
		return fmt.Errorf("tasktype: %q is not an external type", t.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.types[t.Name]; ok && !old.External {
		return fmt.Errorf("tasktype: task type %q is built in: %w", t.Name, ErrDuplicate)
	}
	r.types[t.Name] = t
	return nil
}
