package engine

import (
	"context"
	"database/sql"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/audit"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// CreateResult is the answer to one item of CreateMany: the task (created
// now, or earlier with the same idempotency key), or the item's own error.
type CreateResult struct {
	Task    *ent.Task
	Created bool
	Err     error
}

// CreateMany validates, masks and creates up to MaxBulk tasks owned by the
// context's viewer, in a few multi-row statements of one transaction. Each
// item is treated as Create treats one (validation, masking, sealing,
// idempotency) and answered on its own: a refused item does not stop the
// others. The call is one audit record, committed with the tasks it
// creates, listing them and every item's outcome. The error result is for
// the call as a whole (not allowed, too many items, rate limited, the
// database failed).
func (e *Engine) CreateMany(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	return e.createMany(ctx, reqs, e.store.Write, false)
}

// CreateManyTx creates tasks as CreateMany does, in sqlTx, a transaction
// of the caller's (see CreateTx).
func (e *Engine) CreateManyTx(ctx context.Context, sqlTx *sql.Tx, reqs []CreateRequest) ([]CreateResult, error) {
	return e.createMany(ctx, reqs, e.in(sqlTx), true)
}

func (e *Engine) createMany(ctx context.Context, reqs []CreateRequest, write writer, foreign bool) ([]CreateResult, error) {
	if e.tracer == nil {
		return e.createManyTraced(ctx, reqs, write, foreign)
	}
	ctx, span := e.tracer.Start(ctx, telemetry.SpanCreate, trace.WithAttributes(telemetry.AttrCount.Int(len(reqs))))
	out, err := e.createManyTraced(ctx, reqs, write, foreign)
	telemetry.End(span, err)
	return out, err
}

func (e *Engine) createManyTraced(ctx context.Context, reqs []CreateRequest, write writer, foreign bool) ([]CreateResult, error) {
	v, err := e.admit(ctx, len(reqs))
	if err != nil {
		return nil, err
	}
	refuse := func(err error) ([]CreateResult, error) {
		e.record(ctx, write, foreign, audit.Entry{Action: audit.Create, Details: map[string]any{"items": len(reqs)}, Err: err})
		return nil, err
	}
	if err := v.AllowMutate("create tasks"); err != nil {
		return refuse(err)
	}
	if len(reqs) > MaxBulk {
		return refuse(&ValidationError{Problems: []Problem{{Field: "inputs", Message: fmt.Sprintf("%d items; the limit is %d", len(reqs), MaxBulk)}}})
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
	// The tasks and the record of every item's outcome: one commit.
	err = write(ctx, func(tx *store.Tx) error {
		if len(news) > 0 {
			created, err := tx.CreateTasks(ctx, news)
			if err != nil {
				return err
			}
			for j, c := range created {
				out[idx[j]] = CreateResult{Task: c.Task, Created: c.Created, Err: c.Err}
			}
		}
		return e.audit.Insert(ctx, tx.Ent(), e.createManyEntry(reqs, out))
	})
	if err != nil {
		return refuse(err)
	}
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
