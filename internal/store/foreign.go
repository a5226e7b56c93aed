package store

import (
	"context"
	"sync"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/events"
)

// foreignWait is how long the store looks for the commit of a caller's
// transaction on SQLite (foreignCommits) before it forgets what it wrote
// there: its tasks still run (a claim finds them), but their creation is
// not published.
const foreignWait = 10 * time.Minute

// foreignCommits publishes, on SQLite, the tasks the store created in its
// callers' transactions (Store.In) once those committed. SQLite has no
// notifications and the store does not see its caller's COMMIT: it looks
// for the rows instead, by id and code (a code is drawn at random, so a
// row of a rolled-back transaction whose id a later one took is not
// mistaken for it), soon after the call and less and less often for up to
// foreignWait. On PostgreSQL the relay's notifications, sent in the
// caller's transaction, do this work.
type foreignCommits struct {
	s    *Store
	mu   sync.Mutex
	wait []foreignChange
	wake chan struct{}
	stop chan struct{}
	done chan struct{} // closed when the watch ended; nil: none runs
}

type foreignChange struct {
	change events.TaskChange
	since  time.Time
}

// add starts watching for the commit of changes. Only creations are
// watched: they are what a caller's transaction holds (Tx.CreateTasks).
func (f *foreignCommits) add(changes []events.TaskChange) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range changes {
		if c.Kind == events.Created {
			f.wait = append(f.wait, foreignChange{change: c, since: now})
		}
	}
	if len(f.wait) == 0 {
		return
	}
	if f.done == nil {
		f.wake, f.stop, f.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go f.watch(f.stop, f.done)
		return
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// close stops the watch and waits for it.
func (f *foreignCommits) close() {
	f.mu.Lock()
	stop, done := f.stop, f.done
	f.stop = nil
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// watch looks for the rows until none is awaited: at once, then with a
// delay that doubles from 5 ms to a second, back to 5 ms when more come.
func (f *foreignCommits) watch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	delay := 5 * time.Millisecond
	for {
		select {
		case <-stop:
			return
		case <-f.wake:
			delay = 5 * time.Millisecond
		case <-time.After(delay):
			delay = min(2*delay, time.Second)
		}
		if !f.pass() {
			return
		}
	}
}

// pass publishes what committed and forgets what waited too long; it
// reports false when nothing is left to wait for (the watch then ends).
func (f *foreignCommits) pass() bool {
	f.mu.Lock()
	waiting := append([]foreignChange(nil), f.wait...)
	f.mu.Unlock()
	ids := make([]int, len(waiting))
	for i, w := range waiting {
		ids[i] = w.change.Task.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rows, err := f.s.client.Task.Query().Where(task.IDIn(ids...)).Select(task.FieldID, task.FieldCode).All(internal(ctx))
	cancel()
	if err != nil {
		f.s.log.Warn("looking for the commit of tasks created in a caller's transaction failed", "err", err, "count", len(ids))
		return true
	}
	code := make(map[int]string, len(rows))
	for _, r := range rows {
		code[r.ID] = r.Code
	}
	var committed []events.TaskChange
	settled := make(map[*ent.Task]bool, len(waiting)) // published or given up
	now := time.Now()
	for _, w := range waiting {
		t := w.change.Task
		switch {
		case code[t.ID] == t.Code:
			committed = append(committed, w.change)
			settled[t] = true
		case now.Sub(w.since) > foreignWait:
			f.s.log.Debug("gave up waiting for the commit of a task created in a caller's transaction", "task_id", t.ID, "code", t.Code)
			settled[t] = true
		}
	}
	if len(committed) > 0 {
		f.s.pub.PublishTasks(committed)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.wait[:0]
	for _, w := range f.wait {
		if !settled[w.change.Task] {
			kept = append(kept, w)
		}
	}
	f.wait = kept
	if len(f.wait) == 0 {
		f.done, f.stop = nil, nil
		return false
	}
	return true
}
