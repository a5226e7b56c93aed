package engine

import (
	"context"
	"fmt"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// CreateResult is the answer to one item of CreateMany: the task (created
// now, or earlier with the same idempotency key), or the item's own error.
type CreateResult struct {
	Task    *ent.Task
	Created bool
	Err     error
}

// CreateMany validates, masks and creates up to MaxBulk tasks owned by the
// context's viewer, in a few multi-row statements. Each item is treated as
// Create treats one (validation, masking, sealing, idempotency) and answered
// on its own: a refused item does not stop the others. The call is one
// audit record, committed with the tasks it creates, listing them and every
// item's outcome. The error result is for the call as a whole (not allowed,
// too many items, rate limited, the database failed).
func (e *Engine) CreateMany(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	v, err := e.admit(ctx, len(reqs))
	if err != nil {
		return nil, err
	}
	rec := e.audit.Begin(ctx, audit.Entry{Action: audit.Create, Details: map[string]any{"items": len(reqs)}})
	if err := v.AllowMutate("create tasks"); err != nil {
		_ = rec.End(err)
		return nil, err
	}
	if len(reqs) > MaxBulk {
		err := &ValidationError{Problems: []Problem{{Field: "inputs", Message: fmt.Sprintf("%d items; the limit is %d", len(reqs), MaxBulk)}}}
		_ = rec.End(err)
		return nil, err
	}
	out := make([]CreateResult, len(reqs))
	news := make([]store.NewTask, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, req := range reqs {
		n, err := e.prepare(v, req)
		if err != nil {
			out[i].Err = err
			continue
		}
		news = append(news, n)
		idx = append(idx, i)
	}
	rec.Entry = e.createManyEntry(reqs, out)
	rec.Fill = func(entry *audit.Entry, c store.Committing) bool {
		for _, ch := range c.Changes {
			if ch.Kind == events.Created {
				entry.TaskIDs = append(entry.TaskIDs, ch.Task.ID)
			}
		}
		return len(entry.TaskIDs) > 0
	}
	if len(news) > 0 {
		created, err := e.store.CreateTasks(rec.Context(), news)
		if err != nil {
			_ = rec.End(err)
			return nil, err
		}
		for j, c := range created {
			out[idx[j]] = CreateResult{Task: c.Task, Created: c.Created, Err: c.Err}
		}
	}
	rec.Entry = e.createManyEntry(reqs, out)
	_ = rec.End(nil) // a failure is logged (or counted) by the recorder
	return out, nil
}

// createManyEntry is the audit record of a CreateMany with its items'
// outcomes so far.
func (e *Engine) createManyEntry(reqs []CreateRequest, out []CreateResult) audit.Entry {
	entry := audit.Entry{Action: audit.Create}
	results := make([]map[string]any, len(out))
	failed := 0
	for i, r := range out {
		results[i] = map[string]any{"type": reqs[i].Type, "ok": r.Err == nil}
		if r.Task != nil {
			entry.TaskIDs = append(entry.TaskIDs, r.Task.ID)
			results[i]["id"], results[i]["existing"] = r.Task.ID, !r.Created
		}
		if r.Err != nil {
			failed++
			results[i]["error"] = e.audit.Code(r.Err)
		}
	}
	entry.Details = map[string]any{"items": len(reqs), "results": results}
	switch {
	case failed == len(out) && failed > 0:
		entry.Err = out[0].Err
	case failed > 0:
		entry.Partial = true
	}
	return entry
}
