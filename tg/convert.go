package tg

import (
	"github.com/taskgraph/taskgraph/internal/store"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// taskOf is the value of an ent task (with its instances, if loaded).
func taskOf(t *ent.Task) *tgtype.Task {
	if t == nil {
		return nil
	}
	out := &tgtype.Task{
		ID: t.ID, Code: t.Code, Type: t.Type, Title: t.Title, BizID: t.BizID,
		Status: tgtype.Status(t.Status), Priority: t.Priority,
		Input: t.Input, Result: t.Result, LastError: t.LastError,
		ProgressDone: t.ProgressDone, ProgressTotal: t.ProgressTotal,
		MaxAttempts: t.MaxAttempts, RetryPolicy: t.RetryPolicy, Timeout: time.Duration(t.TimeoutSeconds) * time.Second,
		CancelRequested: t.CancelRequested, Owner: t.Owner, Tenant: t.Tenant,
		RunAt: t.RunAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, FinishedAt: deref(t.FinishedAt),
	}
	if t.IdempotencyKey != nil {
		out.IdempotencyKey = *t.IdempotencyKey
	}
	if t.Deadline != nil {
		out.Deadline, out.DeadlineState = *t.Deadline, tgtype.DeadlineState(store.DeadlineState(t))
	}
	if t.ResultStatus != nil {
		out.ResultStatus = tgtype.ResultStatus(*t.ResultStatus)
	}
	if ins, err := t.Edges.InstancesOrErr(); err == nil {
		out.Instances = make([]tgtype.Instance, len(ins))
		for i, in := range ins {
			out.Instances[i] = tgtype.Instance{
				ID: in.ID, No: in.InstanceNo, Attempt: in.Attempt, Status: tgtype.Status(in.Status),
				LastError: in.LastError, WorkerID: in.WorkerID, StartedAt: deref(in.StartedAt), FinishedAt: deref(in.FinishedAt),
			}
			if in.ErrorKind != nil {
				out.Instances[i].ErrorKind = tgtype.ErrorKind(*in.ErrorKind)
			}
		}
	}
	return out
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
