package worker

import (
	"context"
	"sync"

	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// execution is one claimed instance being run by a pool's handler.
type execution struct {
	c      store.Claimed
	job    *tasktype.Job
	ctl    tasktype.JobControl
	typ    *tasktype.Type // nil: the type is not registered here
	cancel context.CancelCauseFunc
	done   chan struct{}

	// mu guards what other goroutines tell the execution while it runs.
	mu sync.Mutex
	// abandoned: its outcome was written without it (at shutdown, its
	// handler ignoring its context); what it returns later is ignored.
	abandoned bool
	// cancelReason is why a cancel was requested while it ran (it may
	// arrive after the claim read the task).
	cancelReason string
}

// stop cancels the execution's context with cause.
func (ex *execution) stop(cause error) { ex.cancel(cause) }

// requestCancel records why a cancel was requested and stops the
// execution with errCancelRequested.
func (ex *execution) requestCancel(reason string) {
	ex.mu.Lock()
	ex.cancelReason = reason
	ex.mu.Unlock()
	ex.cancel(errCancelRequested)
}

// abandon marks the execution as abandoned.
func (ex *execution) abandon() {
	ex.mu.Lock()
	ex.abandoned = true
	ex.mu.Unlock()
}

// ending reads what decides the execution's outcome besides its handler's
// error: whether it was abandoned, and why a cancel was requested.
func (ex *execution) ending() (abandoned bool, cancelReason string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.abandoned, ex.cancelReason
}

// runningSet is the one owner of what a pool is running: its executions by
// instance and by task, and how many of each type. Claims add to it,
// finished handlers remove from it, and the heartbeat loop, the event loop,
// the flusher (an execution moved on) and Stop look executions up and
// cancel them; every method is safe for concurrent use. Its lock guards
// these maps only, and is never held while calling out, except to an
// execution's own small lock (always in that order).
type runningSet struct {
	mu      sync.Mutex
	byInst  map[int]*execution
	byTask  map[int]*execution
	perType map[string]int
}

func newRunningSet() *runningSet {
	return &runningSet{
		byInst:  make(map[int]*execution),
		byTask:  make(map[int]*execution),
		perType: make(map[string]int),
	}
}

// add records ex as running.
func (r *runningSet) add(ex *execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byInst[ex.c.Instance.ID] = ex
	r.byTask[ex.c.Task.ID] = ex
	r.perType[ex.c.Task.Type]++
}

// remove forgets ex. It reports false when ex was not the execution
// running its instance (already removed).
func (r *runningSet) remove(ex *execution) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byInst[ex.c.Instance.ID] != ex {
		return false
	}
	delete(r.byInst, ex.c.Instance.ID)
	if r.byTask[ex.c.Task.ID] == ex {
		delete(r.byTask, ex.c.Task.ID)
	}
	if r.perType[ex.c.Task.Type]--; r.perType[ex.c.Task.Type] == 0 {
		delete(r.perType, ex.c.Task.Type)
	}
	return true
}

// instance returns the execution running instanceID, or nil.
func (r *runningSet) instance(instanceID int) *execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byInst[instanceID]
}

// task returns the execution running one of taskID's instances, or nil.
func (r *runningSet) task(taskID int) *execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byTask[taskID]
}

// cancel stops the execution running instanceID, if any, with cause.
func (r *runningSet) cancel(instanceID int, cause error) {
	if ex := r.instance(instanceID); ex != nil {
		ex.stop(cause)
	}
}

// count returns how many executions are running.
func (r *runningSet) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byInst)
}

// usage returns how many executions are running, in all and per type (a
// copy; types with none are absent).
func (r *runningSet) usage() (total int, perType map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	perType = make(map[string]int, len(r.perType))
	for t, n := range r.perType {
		perType[t] = n
	}
	return len(r.byInst), perType
}

// snapshot returns the executions running now, the abandoned ones left
// out (nothing of theirs is to be written any more).
func (r *runningSet) snapshot() []*execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*execution, 0, len(r.byInst))
	for _, ex := range r.byInst {
		if abandoned, _ := ex.ending(); !abandoned {
			out = append(out, ex)
		}
	}
	return out
}

// abandonAll marks every running execution abandoned and returns them.
// They stay in the set until their handlers return.
func (r *runningSet) abandonAll() []*execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*execution, 0, len(r.byInst))
	for _, ex := range r.byInst {
		ex.abandon()
		out = append(out, ex)
	}
	return out
}
