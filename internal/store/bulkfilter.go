package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/tasklog"
)

// ErrStaleToken is the error of a write fenced by an execution's token
// after the execution was moved on (timed out, recovered, cancelled).
var ErrStaleToken = errors.New("the execution was moved on: its fencing token is stale")

// CheckpointPrefix starts the message of every checkpoint line ActPage
// writes (see LastCheckpoint).
const CheckpointPrefix = "bulk checkpoint: "

// Page is one page of a bulk action over a filter, run by the execution
// holding Token of the task TaskID (the bulk task itself).
type Page struct {
	Token  Token
	TaskID int
	// Action is CANCEL or RETRY: each id goes through CancelTask's or
	// RetryTask's guarded transitions.
	Action lifecycle.Action
	IDs    []int
	Reason string
	// Checkpoint makes the log line committed with the page from its
	// per-id outcomes: the message (after CheckpointPrefix) and fields.
	Checkpoint func([]Each) (string, map[string]any)
}

// ActPage acts on a page of tasks in one transaction: it checks that the
// execution still holds its token (holding the instance's row until
// commit, so that no recovery moves it meanwhile; ErrStaleToken
// otherwise), applies the action to each id as CancelTasks and RetryTasks
// do (an id the action refuses fails alone), and writes the page's
// checkpoint line in the bulk task's trace. The page and its checkpoint
// commit together or not at all: an execution resumed from the last
// checkpoint neither skips nor repeats a page.
func (s *Store) ActPage(ctx context.Context, p Page) (out []Each, err error) {
	err = s.Write(ctx, func(tx *Tx) error {
		out, err = tx.ActPage(ctx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ActPage acts on a page as Store.ActPage does, in tx.
func (tx *Tx) ActPage(ctx context.Context, p Page) ([]Each, error) {
	s, t := tx.s, tx.t
	ctx = lifecycle.Guarded(ctx)
	var act func(t *txn, id int) (*ent.Task, error)
	switch p.Action {
	case lifecycle.ActionCancel:
		act = func(t *txn, id int) (*ent.Task, error) { return s.cancelIn(ctx, t, id, p.Reason) }
	case lifecycle.ActionRetry:
		act = func(t *txn, id int) (*ent.Task, error) { return s.retryIn(ctx, t, id) }
	default:
		return nil, fmt.Errorf("act page: unknown action %q", p.Action)
	}
	n, err := s.exec(ctx, t, `
UPDATE task_instances SET version = version
WHERE id = ? AND version = ? AND status = `+sqlExecuting, p.Token.InstanceID, p.Token.Version)
	if err != nil {
		return nil, fmt.Errorf("act page: check token: %w", err)
	}
	if n != 1 {
		return nil, ErrStaleToken
	}
	var out []Each
	if p.Action == lifecycle.ActionCancel {
		// The waiting tasks of the page (most of a large cancel) move
		// together; the others one by one, as act would.
		out, err = s.cancelAll(ctx, t, p.IDs, p.Reason)
	} else {
		out, err = s.eachIn(ctx, t, p.IDs, act)
	}
	if err != nil {
		return nil, err
	}
	msg, fields := p.Checkpoint(out)
	lg, err := t.TaskLog.Create().
		SetTaskID(p.TaskID).
		SetInstanceID(p.Token.InstanceID).
		SetLevel(tasklog.LevelINFO).
		SetMessage(CheckpointPrefix + msg).
		SetFields(fields).
		SetCreatedAt(s.Now()).
		Save(ctx)
	if err != nil {
		return nil, fmt.Errorf("act page: write checkpoint: %w", err)
	}
	t.logged(lg)
	return out, nil
}

// LastCheckpoint returns the fields of the newest checkpoint line of a
// task (written by ActPage, by any of its executions), or nil if it has
// none.
func (s *Store) LastCheckpoint(ctx context.Context, taskID int) (map[string]any, error) {
	lg, err := s.client.TaskLog.Query().
		Where(tasklog.TaskID(taskID), tasklog.MessageHasPrefix(strings.TrimSpace(CheckpointPrefix))).
		Order(ent.Desc(tasklog.FieldID)).
		First(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint of task %d: %w", taskID, err)
	}
	return lg.Fields, nil
}
