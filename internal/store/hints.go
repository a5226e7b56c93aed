package store

import (
	"slices"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
)

// attentionStatuses are the states kept in tasks.attention_status as well
// as in status: those a person looks for among many tasks, and that few
// tasks are in. tasks has no index on status (its claim and finish updates
// stay HOT); an index on attention_status serves filters on these, and a
// claim or a success, which leave attention_status empty, stay HOT.
var attentionStatuses = []lifecycle.Status{lifecycle.Failed, lifecycle.Cancelled, lifecycle.RetryPending, lifecycle.ReviewPending}

// attentionCase is the SQL value of attention_status for a status
// expression.
func attentionCase(status string) string {
	return `CASE WHEN ` + status + ` IN (` + lifecycle.QuotedList(attentionStatuses...) + `) THEN ` + status + ` END`
}

// StatusHints adds to w, when its status filter can use an index, a
// predicate the filter implies and an index serves: attention_status for
// the rare statuses, the running instances for EXECUTING. It changes which
// rows a query reads first, never which rows it returns. Only a status
// filter at w's top level is used (one under Or or Not is left as it is).
func StatusHints(w *ent.TaskWhereInput) {
	if w == nil {
		return
	}
	var want []lifecycle.Status
	switch {
	case w.Status != nil:
		want = []lifecycle.Status{*w.Status}
	case len(w.StatusIn) > 0:
		want = w.StatusIn
	default:
		return
	}
	if !slices.ContainsFunc(want, func(s lifecycle.Status) bool { return !slices.Contains(attentionStatuses, s) }) {
		w.AddPredicates(task.AttentionStatusIn(want...))
		return
	}
	if len(want) == 1 && want[0] == lifecycle.Executing {
		w.AddPredicates(predicate.Task(func(s *sql.Selector) {
			s.Where(sql.In(s.C(task.FieldID),
				sql.Select("task_id").From(sql.Table("task_instances")).Where(sql.EQ("status", string(lifecycle.Executing)))))
		}))
	}
}
