// Package external runs task types whose handlers live outside the
// process: the types an admin declares through the API (the catalog,
// persisted in external_task_types and loaded into the one task type
// registry on every node), and the worker protocol over HTTP and JSON
// (/worker/v1/) through which a worker in any language claims their
// tasks, beats, logs, reports progress and completes them, with the same
// claim, fencing and outcomes as the in-process pool.
package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/externaltasktype"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/service"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// SyncInterval is how often every node reads the declared types again,
// so that a type declared or deleted on another node reaches this one.
const SyncInterval = 2 * time.Second

// Catalog is the declared external task types.
type Catalog struct {
	store    *store.Store
	engine   *engine.Engine
	registry *tasktype.Registry
	policies *tasktype.Policies
}

// NewCatalog returns the catalog of the types e's registry runs.
func NewCatalog(st *store.Store, e *engine.Engine) *Catalog {
	return &Catalog{store: st, engine: e, registry: e.Registry(), policies: e.Policies()}
}

// Declaration is what an admin declares of an external type.
type Declaration struct {
	Name              string
	Description       string
	InputSchema       json.RawMessage
	TimeoutSeconds    int
	RetryPolicy       string
	StallAfterSeconds int
	StallAction       string
}

func (d Declaration) def() tasktype.ExternalDef {
	return tasktype.ExternalDef{
		Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
		Timeout: time.Duration(d.TimeoutSeconds) * time.Second, RetryPolicy: d.RetryPolicy,
		StallAfter: time.Duration(d.StallAfterSeconds) * time.Second, StallAction: tasktype.StallAction(d.StallAction),
	}
}

func invalid(field, msg string) error {
	return &engine.ValidationError{Problems: []engine.Problem{{Field: field, Message: msg}}}
}

// Declare creates or changes an external type (an admin's action,
// audited) and registers it on this node; the others load it at their
// next sync.
func (c *Catalog) Declare(ctx context.Context, d Declaration) (*tasktype.Type, error) {
	var typ *tasktype.Type
	err := c.act(ctx, audit.Entry{Action: audit.TaskTypeDeclare, Details: map[string]any{"type": d.Name, "timeoutSeconds": d.TimeoutSeconds, "retryPolicy": d.RetryPolicy}}, func(v auth.Viewer) error {
		if d.TimeoutSeconds <= 0 {
			return invalid("timeoutSeconds", "must be at least 1")
		}
		if d.RetryPolicy != "" {
			if _, ok := c.policies.Get(d.RetryPolicy); !ok {
				return invalid("retryPolicy", fmt.Sprintf("unknown retry policy %q", d.RetryPolicy))
			}
		}
		t, err := tasktype.NewExternal(d.def())
		if err != nil {
			return invalid("input", err.Error())
		}
		if old, ok := c.registry.Lookup(d.Name); ok && !old.External {
			return &store.ConflictError{Message: fmt.Sprintf("task type %q is built in", d.Name)}
		}
		sys := auth.NewSystemContext(ctx)
		now := c.store.Now()
		err = c.store.Tx(sys, func(tx *ent.Tx) error {
			old, err := tx.ExternalTaskType.Query().Where(externaltasktype.Name(t.Name)).Only(sys)
			switch {
			case ent.IsNotFound(err):
				return tx.ExternalTaskType.Create().
					SetName(t.Name).SetDescription(t.Description).SetInputSchema(string(t.InputSchema)).
					SetTimeoutSeconds(d.TimeoutSeconds).SetRetryPolicy(t.RetryPolicy).
					SetStallAfterSeconds(d.StallAfterSeconds).SetStallAction(string(t.StallAction)).
					SetUpdatedBy(v.User).SetUpdatedAt(now).
					Exec(sys)
			case err != nil:
				return err
			}
			return tx.ExternalTaskType.UpdateOne(old).
				SetDescription(t.Description).SetInputSchema(string(t.InputSchema)).
				SetTimeoutSeconds(d.TimeoutSeconds).SetRetryPolicy(t.RetryPolicy).
				SetStallAfterSeconds(d.StallAfterSeconds).SetStallAction(string(t.StallAction)).
				SetUpdatedBy(v.User).SetUpdatedAt(now).
				Exec(sys)
		})
		if err != nil {
			return err
		}
		typ = t
		return c.registry.Declare(t)
	})
	return typ, err
}

// Delete removes an external type (an admin's action, audited): no task
// of it can be created any more; those that exist stay, and a worker
// still claims them until it is gone from every node (next sync).
func (c *Catalog) Delete(ctx context.Context, name string) (bool, error) {
	var deleted bool
	err := c.act(ctx, audit.Entry{Action: audit.TaskTypeDelete, Details: map[string]any{"type": name}}, func(v auth.Viewer) error {
		if t, ok := c.registry.Lookup(name); ok && !t.External {
			return &store.ConflictError{Message: fmt.Sprintf("task type %q is built in", name)}
		}
		sys := auth.NewSystemContext(ctx)
		n, err := c.store.Client().ExternalTaskType.Delete().Where(externaltasktype.Name(name)).Exec(sys)
		if err != nil {
			return err
		}
		c.registry.Remove(name)
		deleted = n > 0
		if !deleted {
			return &notFoundError{name: name}
		}
		return nil
	})
	return deleted, err
}

func (c *Catalog) act(ctx context.Context, entry audit.Entry, fn func(v auth.Viewer) error) error {
	v, err := c.engine.Admit(ctx, 1)
	if err != nil {
		return err
	}
	if !v.IsAdmin() {
		err = &auth.ForbiddenError{Role: v.Role, Action: "declare or delete task types"}
	}
	if err == nil {
		err = fn(v)
	}
	entry.Err = err
	c.engine.Record(ctx, entry)
	return err
}

// Sync loads the declared types into the registry: new and changed ones
// are registered, deleted ones removed. It returns how many types are
// declared.
func (c *Catalog) Sync(ctx context.Context) (int, error) {
	rows, err := c.store.Client().ExternalTaskType.Query().All(auth.NewSystemContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("read external task types: %w", err)
	}
	declared := make(map[string]bool, len(rows))
	var errs []error
	for _, r := range rows {
		declared[r.Name] = true
		t, err := tasktype.NewExternal(Declaration{
			Name: r.Name, Description: r.Description, InputSchema: json.RawMessage(r.InputSchema),
			TimeoutSeconds: r.TimeoutSeconds, RetryPolicy: r.RetryPolicy,
			StallAfterSeconds: r.StallAfterSeconds, StallAction: r.StallAction,
		}.def())
		if err == nil {
			err = c.registry.Declare(t)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range c.registry.Types() {
		if t.External && !declared[t.Name] {
			c.registry.Remove(t.Name)
		}
	}
	return len(rows), errors.Join(errs...)
}

// NewSyncer returns the loop that syncs the catalog every SyncInterval
// (every node runs one: a type declared on one node reaches the others).
func (c *Catalog) NewSyncer(interval time.Duration, log *slog.Logger) (*service.Loop[int], error) {
	if interval <= 0 {
		interval = SyncInterval
	}
	return service.New(service.Config[int]{Name: "external-types", Interval: interval, Delay: interval, Logger: log}, c.Sync)
}

// notFoundError is a type that is not declared.
type notFoundError struct{ name string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("external task type %q is not declared", e.name)
}

// Is makes errors.Is(err, store.ErrNotFound) true (NOT_FOUND in the API).
func (e *notFoundError) Is(target error) bool { return target == store.ErrNotFound }
