// Package events carries what the store commits to whoever watches: task
// changes and log lines, published after commit (never before), re-ordered
// per task by version, and fanned out to subscribers through bounded buffers
// so that a slow subscriber is dropped rather than allowed to block a worker.
package events

import "github.com/taskgraph/taskgraph/ent"

// ChangeKind says what a committed task change was.
type ChangeKind uint8

// Change kinds.
const (
	// Created is a new task (its first instance is PENDING).
	Created ChangeKind = iota + 1
	// Transitioned is a status change.
	Transitioned
	// Progressed is a progress update of a running task.
	Progressed
	// CancelRequested is a cancel asked of a running task.
	CancelRequested
	// StallChanged is a running execution flagged as stalled by the
	// watchdog, or un-flagged because it moved again (its instance's
	// stalled_at says which).
	StallChanged
	// DeadlineChanged is a task flagged at risk of missing its deadline,
	// or as having missed it, by the deadlines loop (its
	// deadline_at_risk_at and deadline_missed_at say which).
	DeadlineChanged
)

func (k ChangeKind) String() string {
	switch k {
	case Created:
		return "created"
	case Transitioned:
		return "transitioned"
	case Progressed:
		return "progressed"
	case CancelRequested:
		return "cancel_requested"
	case StallChanged:
		return "stall_changed"
	case DeadlineChanged:
		return "deadline_changed"
	}
	return "unknown"
}

// TaskChange is one committed change of a task. Task is the row as committed
// by that change (its Version identifies the change) and is shared by every
// subscriber: treat it as read-only.
type TaskChange struct {
	Kind ChangeKind
	Task *ent.Task
	// Partial changes come from another node and carry only the task's ID,
	// Version, Status and CancelRequested. They are delivered to internal
	// subscribers (a worker pool waiting for work or cancels) only.
	Partial bool
	// Relayed changes come from another node. Such a change of a task the
	// broker has no history of may overtake this node's own earlier change
	// of it (a task created here and claimed there), so it waits for its
	// predecessors, for at most the hold-back.
	Relayed bool
	// Latest changes are a task's current row, re-read after changes of it
	// may have been lost (a relay outage): delivered at once if newer than
	// what was delivered, after any held predecessors, and never twice.
	Latest bool
}

// Publisher receives what the store committed, after the commit.
type Publisher interface {
	PublishTasks(changes []TaskChange)
	PublishLogs(logs []*ent.TaskLog)
}

// Discard is a Publisher that drops everything.
type Discard struct{}

// PublishTasks drops changes.
func (Discard) PublishTasks([]TaskChange) {}

// PublishLogs drops logs.
func (Discard) PublishLogs([]*ent.TaskLog) {}
