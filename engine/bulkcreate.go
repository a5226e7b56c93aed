package engine

import (
	"context"
	"fmt"

	"taskgraph/audit"
	"taskgraph/auth"
	"taskgraph/ent"
	"taskgraph/store"
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
// audit record listing the tasks it created or found, with every item's
// outcome. The error result is for the call as a whole (not allowed, too
// many items, rate limited, the database failed).
func (e *Engine) CreateMany(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	v, err := e.admit(ctx, len(reqs))
	if err != nil {
		return nil, err
	}
	out, err := e.createMany(ctx, v, reqs)
	entry := audit.Entry{Action: audit.Create, Err: err, Details: map[string]any{"items": len(reqs)}}
	if err == nil {
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
		entry.Details["results"] = results
		switch {
		case failed == len(out) && failed > 0:
			entry.Err = out[0].Err
		case failed > 0:
			entry.Partial = true
		}
	}
	e.record(ctx, entry)
	return out, err
}

func (e *Engine) createMany(ctx context.Context, v auth.Viewer, reqs []CreateRequest) ([]CreateResult, error) {
	if err := v.AllowMutate("create tasks"); err != nil {
		return nil, err
	}
	if len(reqs) > MaxBulk {
		return nil, &ValidationError{Problems: []Problem{{Field: "inputs", Message: fmt.Sprintf("%d items; the limit is %d", len(reqs), MaxBulk)}}}
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
	if len(news) == 0 {
		return out, nil
	}
	created, err := e.store.CreateTasks(ctx, news)
	if err != nil {
		return nil, err
	}
	for j, c := range created {
		out[idx[j]] = CreateResult{Task: c.Task, Created: c.Created, Err: c.Err}
	}
	return out, nil
}
