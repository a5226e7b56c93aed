package store

import (
	"context"
	"fmt"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/events"
)

// Deadline states of a task (the API's deadlineState): flags beside its
// lifecycle state, never states of it.
const (
	DeadlineOnTime = "ON_TIME"
	DeadlineAtRisk = "AT_RISK"
	DeadlineMissed = "MISSED"
	DeadlineMet    = "MET"
)

// DeadlineState is tk's deadline state, "" when it has no deadline.
func DeadlineState(tk *ent.Task) string {
	switch {
	case tk.Deadline == nil:
		return ""
	case tk.DeadlineMissedAt != nil:
		return DeadlineMissed
	case tk.DeadlineMetAt != nil:
		return DeadlineMet
	case tk.DeadlineAtRiskAt != nil:
		return DeadlineAtRisk
	}
	return DeadlineOnTime
}

// deadlineOpen reports whether tk has a deadline neither met nor missed.
func deadlineOpen(tk *ent.Task) bool {
	return tk.Deadline != nil && tk.DeadlineMissedAt == nil && tk.DeadlineMetAt == nil
}

// OpenDeadline is a task still open against its deadline, as the deadlines
// loop reads it.
type OpenDeadline struct {
	TaskID   int
	Type     string
	Deadline time.Time
	AtRisk   bool
}

// OpenDeadlines returns up to limit tasks whose deadline is neither met
// nor missed and falls at or before until (the loop passes now plus the
// largest margin), earliest first, after the task id after (0: from the
// start; a page's last id). It reads the partial index task_deadline_open
// only: its cost is that of the tasks near their deadline, not of history.
func (s *Store) OpenDeadlines(ctx context.Context, until time.Time, after, limit int) ([]OpenDeadline, error) {
	rows, err := s.client.Task.Query().
		Where(task.DeadlineNotNil(), task.DeadlineMissedAtIsNil(), task.DeadlineMetAtIsNil(), task.DeadlineLTE(until), task.IDGT(after)).
		Order(ent.Asc(task.FieldID)).
		Limit(limit).
		Select(task.FieldID, task.FieldType, task.FieldDeadline, task.FieldDeadlineAtRiskAt).
		All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]OpenDeadline, len(rows))
	for i, r := range rows {
		out[i] = OpenDeadline{TaskID: r.ID, Type: r.Type, Deadline: *r.Deadline, AtRisk: r.DeadlineAtRiskAt != nil}
	}
	return out, nil
}

// FlagDeadline sets task id's deadline flag (DeadlineAtRisk or
// DeadlineMissed) at the database's time, once: a conditional UPDATE that
// changes nothing when the flag is set already (by another node too), the
// deadline was met meanwhile, or (at risk) it was missed first. The task
// is published as changed when it was flagged. A missed deadline is
// flagged only once it has passed by the database's clock; a task that
// ended SUCCESS is never flagged here (its finish decided).
func (tx *Tx) FlagDeadline(ctx context.Context, id int, flag string) (bool, error) {
	now := tx.s.Now()
	var q string
	switch flag {
	case DeadlineAtRisk:
		q = `UPDATE tasks SET deadline_at_risk_at = ?, updated_at = ?, version = version + 1 WHERE id = ? AND deadline IS NOT NULL AND deadline_at_risk_at IS NULL AND deadline_missed_at IS NULL AND deadline_met_at IS NULL AND status <> ` + lifecycle.QuotedList(lifecycle.Success)
	case DeadlineMissed:
		q = `UPDATE tasks SET deadline_missed_at = ?, updated_at = ?, version = version + 1 WHERE id = ? AND deadline IS NOT NULL AND deadline_missed_at IS NULL AND deadline_met_at IS NULL AND status <> ` + lifecycle.QuotedList(lifecycle.Success) + ` AND deadline < ?`
	default:
		return false, fmt.Errorf("store: no deadline flag %q", flag)
	}
	args := []any{now, now, id}
	if flag == DeadlineMissed {
		args = append(args, now)
	}
	rows, err := tx.s.query(ctx, tx.t, q+` RETURNING `+changingColumns("tasks"), args...)
	if err != nil {
		return false, fmt.Errorf("flag deadline: %w", err)
	}
	tasks, err := tx.s.scanChanged(ctx, tx.t, rows, nil)
	if err != nil || len(tasks) == 0 {
		return false, err
	}
	tx.t.changed(events.DeadlineChanged, tasks...)
	return true, nil
}
