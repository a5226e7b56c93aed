package tg

import (
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// Job is what a handler is given besides its input: which task and which
// execution it runs, and the means to report on it. Every write carries
// the execution's fencing token: once the execution was moved on (its
// timeout passed, it was cancelled, the watchdog recovered it from a node
// taken for dead), its writes are dropped, so that a late or duplicate
// worker cannot overwrite the live one's. The handler's context is
// cancelled when the task is cancelled or times out.
type Job struct {
	j *tasktype.Job
}

// ID is the task's id.
func (j *Job) ID() int { return j.j.Task.ID }

// Code is the task's readable unique code (RECONC-20261201-7K3Q9D2M).
func (j *Job) Code() string { return j.j.Task.Code }

// Title is the task's title, BizID the business key it was created with.
func (j *Job) Title() string { return j.j.Task.Title }

// BizID is the caller's business key (an order number, a file name).
func (j *Job) BizID() string { return j.j.Task.BizID }

// Attempt is the attempt of the retry policy this execution is: 1 for the
// first (a manual retry starts again at 1).
func (j *Job) Attempt() int { return j.j.Instance.Attempt }

// Execution is this execution's number among the task's executions: 1, 2,
// 3... (a retry, automatic or manual, is a new execution).
func (j *Job) Execution() int { return j.j.Instance.No }

// Owner is who created the task.
func (j *Job) Owner() Owner {
	return Owner{Source: j.j.Task.OwnerSource, Tenant: j.j.Task.Tenant, User: j.j.Task.Owner}
}

// Task is the task as the claim committed it (its input masked: the
// handler's typed input is the unmasked one).
func (j *Job) Task() tgtype.Task {
	t := j.j.Task
	return tgtype.Task{
		ID: t.ID, Code: t.Code, Type: t.Type, Title: t.Title, BizID: t.BizID, Input: t.Input,
		Priority: t.Priority, Owner: t.Owner, Tenant: t.Tenant, Status: tgtype.Executing, CreatedAt: t.CreatedAt,
	}
}

// Progress reports done out of total units of work; the latest value is
// written a few times a second at most, and shown live in the console.
// Reporting progress also tells stall detection the handler moves.
func (j *Job) Progress(done, total int64) { j.j.Progress(done, total) }

// Heartbeat tells stall detection that the handler is moving, without a
// log line or progress. The node itself keeps the execution's lease alive
// while the handler runs: a handler never needs to call Heartbeat for its
// timeout or the watchdog.
func (j *Job) Heartbeat() { j.j.Touch() }

// Info writes a line to the task's trace, with alternating keys and
// values as log/slog takes them. The message and values are masked.
func (j *Job) Info(msg string, keyvals ...any) { j.j.Info(msg, keyvals...) }

// Warn writes a warning to the task's trace, as Info does.
func (j *Job) Warn(msg string, keyvals ...any) { j.j.Warn(msg, keyvals...) }

// Error writes an error line to the task's trace, as Info does. It does
// not fail the execution: the handler's returned error does.
func (j *Job) Error(msg string, keyvals ...any) { j.j.Error(msg, keyvals...) }

// PartialSuccess records the handler's verdict that the work was done in
// part (an import with some bad rows): the execution still succeeds when
// the handler returns no error, and the task shows PARTIAL_SUCCESS.
func (j *Job) PartialSuccess() { j.j.SetResultStatus(string(tgtype.ResultPartialSuccess)) }
