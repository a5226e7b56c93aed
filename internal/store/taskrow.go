package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
)

// changingTaskColumns are the columns of tasks that may change after the
// insert, id first. Every other column is immutable (the schema says so and
// a test holds this list to it), so a change of a task we already hold is
// read back as these columns alone and merged into the copy we hold.
var changingTaskColumns = []string{
	task.FieldID, task.FieldStatus, task.FieldVersion, task.FieldUpdatedAt, task.FieldFinishedAt,
	task.FieldResult, task.FieldLastError, task.FieldResultStatus, task.FieldProgressDone,
	task.FieldProgressTotal, task.FieldCancelRequested, task.FieldCancelReason, task.FieldRunAt,
	task.FieldAttentionStatus, task.FieldDeadlineAtRiskAt, task.FieldDeadlineMissedAt, task.FieldDeadlineMetAt,
}

// editedTaskColumns are the task's columns an edit of its input (edit and
// retry, replay with input) writes, and no transition: a finish takes them
// from the task as its execution was claimed, which was read after the
// edit (an edit happens only while no execution is live), so they are not
// read back with the changing ones.
var editedTaskColumns = []string{task.FieldInput, task.FieldInputSealed, task.FieldInputVersion}

// changingColumns is changingTaskColumns qualified by table, for RETURNING.
func changingColumns(table string) string {
	var b strings.Builder
	for i, c := range changingTaskColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(table + "." + c)
	}
	return b.String()
}

// scanChanged reads rows of changingTaskColumns into tasks: a copy of the
// snapshot held for the task, with the changed columns set; tasks without a
// snapshot are read whole, in the same transaction. It closes rows.
func (s *Store) scanChanged(ctx context.Context, t *txn, rows *sql.Rows, snapshots map[int]*ent.Task) ([]*ent.Task, error) {
	defer rows.Close()
	var out []*ent.Task
	var missing []int
	for rows.Next() {
		var (
			id, version, done, total  int64
			status                    string
			updatedAt, runAt          time.Time
			finishedAt                sql.NullTime
			result                    []byte
			lastErr, resStatus, cause sql.NullString
			attention                 sql.NullString
			cancel                    bool
			atRisk, missed, met       sql.NullTime
		)
		if err := rows.Scan(&id, &status, &version, &updatedAt, &finishedAt, &result, &lastErr, &resStatus, &done, &total, &cancel, &cause, &runAt, &attention, &atRisk, &missed, &met); err != nil {
			return nil, err
		}
		snap := snapshots[int(id)]
		if snap == nil {
			missing = append(missing, int(id))
			continue
		}
		tk := *snap
		tk.Status, tk.Version, tk.UpdatedAt, tk.RunAt = lifecycle.Status(status), version, updatedAt, runAt
		tk.FinishedAt = nil
		if finishedAt.Valid {
			at := finishedAt.Time
			tk.FinishedAt = &at
		}
		tk.Result = nil
		if len(result) > 0 {
			tk.Result = json.RawMessage(result)
		}
		tk.LastError, tk.CancelReason = lastErr.String, cause.String
		tk.ResultStatus = nil
		if resStatus.Valid {
			rs := task.ResultStatus(resStatus.String)
			tk.ResultStatus = &rs
		}
		tk.ProgressDone, tk.ProgressTotal, tk.CancelRequested = done, total, cancel
		tk.AttentionStatus = nil
		if attention.Valid {
			a := lifecycle.Status(attention.String)
			tk.AttentionStatus = &a
		}
		tk.DeadlineAtRiskAt, tk.DeadlineMissedAt, tk.DeadlineMetAt = nullTime(atRisk), nullTime(missed), nullTime(met)
		out = append(out, &tk)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		whole, err := t.Task.Query().Where(task.IDIn(missing...)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read changed tasks: %w", err)
		}
		out = append(out, whole...)
	}
	return out, nil
}

// scanInts reads rows of cols integers and closes rows.
func scanInts(rows *sql.Rows, cols int) ([][]int64, error) {
	defer rows.Close()
	var out [][]int64
	for rows.Next() {
		row := make([]int64, cols)
		ptrs := make([]any, cols)
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// nullTime is t as a pointer, nil when NULL.
func nullTime(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	at := t.Time
	return &at
}
