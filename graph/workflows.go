package graph

import (
	"context"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
)

// related returns the tasks at the other end of the edges where selects,
// column field of them (a parent's or a child's id), as the viewer sees
// them.
func (r *taskResolver) related(ctx context.Context, where predicate.TaskDependency, field string) ([]*ent.Task, error) {
	ids, err := r.Client.TaskDependency.Query().Where(where).Select(field).Ints(ctx)
	if err != nil || len(ids) == 0 {
		return []*ent.Task{}, err
	}
	return r.Client.Task.Query().Where(task.IDIn(ids...)).Order(ent.Asc(task.FieldID)).All(ctx)
}

// workflowStatuses reads the statuses of a workflow's steps the viewer
// sees (all of them: a step has its workflow's owner).
func (r *workflowResolver) workflowStatuses(ctx context.Context, wf *ent.Workflow) ([]lifecycle.Status, error) {
	var rows []struct {
		Status lifecycle.Status `json:"status"`
	}
	err := r.Client.Task.Query().Where(task.WorkflowID(wf.ID)).Select(task.FieldStatus).Scan(ctx, &rows)
	out := make([]lifecycle.Status, len(rows))
	for i, row := range rows {
		out[i] = row.Status
	}
	return out, err
}
