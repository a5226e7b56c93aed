package graph

import (
	"errors"
	"time"

	"github.com/taskgraph/taskgraph/graph/model"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/flow"
	"github.com/taskgraph/taskgraph/internal/schedule"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

var errNoSchedules = errors.New("schedules are not available on this server")

func scheduleTask(in *model.ScheduleTaskInput) engine.CreateRequest {
	return engine.CreateRequest{
		Type: in.Type, Title: deref(in.Title), Input: in.Input,
		Priority: in.Priority, TimeoutSeconds: in.TimeoutSeconds, RetryPolicy: in.RetryPolicy, MaxAttempts: in.MaxAttempts,
	}
}

func createScheduleInput(in model.CreateScheduleInput) schedule.Input {
	out := schedule.Input{
		Name: in.Name, Cron: deref(in.Cron), IntervalSeconds: in.IntervalSeconds, Timezone: deref(in.Timezone),
		StartAt: in.StartAt, EndAt: in.EndAt, Paused: deref(in.Paused),
		FinishBy: deref(in.FinishBy), FinishWithinSeconds: in.FinishWithinSeconds,
	}
	if in.MisfirePolicy != nil {
		out.MisfirePolicy = *in.MisfirePolicy
	}
	if in.OverlapPolicy != nil {
		out.OverlapPolicy = *in.OverlapPolicy
	}
	if in.Task != nil {
		out.Task = scheduleTask(in.Task)
	}
	if in.Workflow != nil {
		wf := workflowRequest(*in.Workflow)
		out.Workflow = &wf
	}
	return out
}

// applyScheduleUpdate changes what an update gives and leaves the rest.
func applyScheduleUpdate(in model.UpdateScheduleInput) func(*schedule.Input) {
	return func(s *schedule.Input) {
		if in.Name != nil {
			s.Name = *in.Name
		}
		if in.Cron != nil {
			s.Cron, s.IntervalSeconds = *in.Cron, nil
		}
		if in.IntervalSeconds != nil {
			s.IntervalSeconds, s.Cron = in.IntervalSeconds, ""
		}
		if in.Timezone != nil {
			s.Timezone = *in.Timezone
		}
		if in.StartAt != nil {
			s.StartAt = in.StartAt
		}
		if deref(in.ClearStartAt) {
			s.StartAt = nil
		}
		if in.EndAt != nil {
			s.EndAt = in.EndAt
		}
		if deref(in.ClearEndAt) {
			s.EndAt = nil
		}
		if in.MisfirePolicy != nil {
			s.MisfirePolicy = *in.MisfirePolicy
		}
		if in.OverlapPolicy != nil {
			s.OverlapPolicy = *in.OverlapPolicy
		}
		if in.Task != nil {
			s.Task, s.Workflow = scheduleTask(in.Task), nil
		}
		if in.Workflow != nil {
			wf := workflowRequest(*in.Workflow)
			s.Task, s.Workflow = engine.CreateRequest{}, &wf
		}
		if in.FinishBy != nil {
			s.FinishBy, s.FinishWithinSeconds = *in.FinishBy, nil
		}
		if in.FinishWithinSeconds != nil {
			s.FinishWithinSeconds, s.FinishBy = in.FinishWithinSeconds, ""
			if *in.FinishWithinSeconds == 0 {
				s.FinishWithinSeconds = nil
			}
		}
	}
}

func previewInput(in model.SchedulePreviewInput) schedule.SpecInput {
	out := schedule.SpecInput{Cron: deref(in.Cron), Timezone: deref(in.Timezone), Start: in.StartAt, End: in.EndAt}
	if in.IntervalSeconds != nil {
		out.Interval = time.Duration(*in.IntervalSeconds) * time.Second
		if *in.IntervalSeconds <= 0 {
			out.Interval = -1 // refused by ParseSpec, naming the field
		}
	}
	return out
}

func timePtrs(ts []time.Time) []*time.Time {
	out := make([]*time.Time, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out
}

var errNoFlow = errors.New("flow control is not available on this server")

var errNoExternal = errors.New("external task types are not available on this server")

// taskTypeModel is a registered type as the API shows it.
func taskTypeModel(t *tasktype.Type) *model.TaskType {
	return &model.TaskType{
		Name:                  t.Name,
		Description:           t.Description,
		InputSchema:           t.InputSchema,
		DefaultTimeoutSeconds: int(t.Timeout / time.Second),
		DefaultRetryPolicy:    t.RetryPolicy,
		StallAfterSeconds:     int(t.StallAfter / time.Second),
		StallAction:           string(t.StallAction),
		External:              t.External,
		Review:                reviewPolicyModel(t.Review),
	}
}

func controlOrNil(c flow.Control, err error) (*flow.Control, error) {
	if err != nil {
		return nil, err
	}
	return &c, nil
}
