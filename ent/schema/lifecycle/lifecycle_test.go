package lifecycle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// The table of ARCHITECTURE.md, "The lifecycle", written out independently
// of the code.
var designTable = map[lifecycle.Status][]lifecycle.Status{
	lifecycle.Pending:   {lifecycle.Executing, lifecycle.Cancelled},
	lifecycle.Executing: {lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled, lifecycle.RetryPending, lifecycle.ReviewPending},
	lifecycle.Success:   {},
	// A manual retry; a workflow's retry (with parents to wait for).
	lifecycle.Failed:       {lifecycle.RetryPending, lifecycle.WaitingDependency},
	lifecycle.RetryPending: {lifecycle.Executing, lifecycle.Cancelled},
	// A workflow's retry re-runs a cancelled step.
	lifecycle.Cancelled: {lifecycle.WaitingDependency},
	// A task with parents waits for them; it is released or cancelled.
	lifecycle.WaitingDependency: {lifecycle.Pending, lifecycle.Cancelled},
	// A person decides: retry (approve, edit), accept, reject, or cancel.
	lifecycle.ReviewPending: {lifecycle.RetryPending, lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled},
}

func TestTransitionTableMatchesTheDesign(t *testing.T) {
	t.Parallel()
	for _, from := range lifecycle.AllStatuses {
		for _, to := range lifecycle.AllStatuses {
			legal := false
			for _, s := range designTable[from] {
				legal = legal || s == to
			}
			t.Run(fmt.Sprintf("%sTo%s", from, to), func(t *testing.T) {
				require.Equal(t, legal, lifecycle.CanMove(from, to))
				err := lifecycle.Check("task", 7, from, to)
				if legal {
					require.NoError(t, err)
					return
				}
				var te *lifecycle.TransitionError
				require.True(t, errors.As(err, &te))
				require.ErrorIs(t, err, lifecycle.ErrInvalidTransition)
				require.Equal(t, from, te.From)
				require.Equal(t, to, te.To)
				require.Contains(t, err.Error(), string(from))
				require.Contains(t, err.Error(), string(to))
			})
		}
	}
}

func TestTerminalStatesHaveNoWayOutButManualRetry(t *testing.T) {
	t.Parallel()
	for _, s := range lifecycle.AllStatuses {
		if !s.Terminal() {
			continue
		}
		targets := lifecycle.Targets(s)
		switch s {
		case lifecycle.Failed:
			require.Equal(t, []lifecycle.Status{lifecycle.RetryPending, lifecycle.WaitingDependency}, targets)
		case lifecycle.Cancelled:
			require.Equal(t, []lifecycle.Status{lifecycle.WaitingDependency}, targets, "a workflow's retry only")
		default:
			require.Empty(t, targets, "%s", s)
		}
	}
}

func TestWorkflowActionsProjectTheTable(t *testing.T) {
	t.Parallel()
	W := lifecycle.ActionRetryWorkflow
	C := lifecycle.ActionCancel
	cases := []struct {
		states []lifecycle.Status
		want   []lifecycle.Action
	}{
		{nil, []lifecycle.Action{}},
		{[]lifecycle.Status{lifecycle.Success, lifecycle.Success}, []lifecycle.Action{}},
		{[]lifecycle.Status{lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled}, []lifecycle.Action{W}},
		{[]lifecycle.Status{lifecycle.Executing, lifecycle.Cancelled}, []lifecycle.Action{C, W}},
		{[]lifecycle.Status{lifecycle.Pending, lifecycle.WaitingDependency}, []lifecycle.Action{C}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, lifecycle.WorkflowActions(c.states), "%v", c.states)
	}
	require.Equal(t, []lifecycle.Action{lifecycle.ActionRetry, lifecycle.ActionReplayWithInput, W}, lifecycle.StepActions(lifecycle.Failed, false))
	require.Equal(t, []lifecycle.Action{W}, lifecycle.StepActions(lifecycle.Cancelled, false))
	require.Empty(t, lifecycle.StepActions(lifecycle.Success, false))
	require.Equal(t, []lifecycle.Action{C}, lifecycle.StepActions(lifecycle.WaitingDependency, false))
}

func TestAvailableActionsProjectTheTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status          lifecycle.Status
		cancelRequested bool
		want            []lifecycle.Action
	}{
		{lifecycle.Pending, false, []lifecycle.Action{lifecycle.ActionCancel}},
		{lifecycle.Executing, false, []lifecycle.Action{lifecycle.ActionCancel}},
		{lifecycle.Executing, true, nil},
		{lifecycle.RetryPending, false, []lifecycle.Action{lifecycle.ActionCancel}},
		{lifecycle.Failed, false, []lifecycle.Action{lifecycle.ActionRetry, lifecycle.ActionReplayWithInput}},
		{lifecycle.ReviewPending, false, []lifecycle.Action{lifecycle.ActionCancel, lifecycle.ActionApproveReview, lifecycle.ActionEditAndRetry, lifecycle.ActionAcceptReview, lifecycle.ActionRejectReview}},
		{lifecycle.Success, false, nil},
		{lifecycle.Cancelled, false, nil},
		{lifecycle.WaitingDependency, false, []lifecycle.Action{lifecycle.ActionCancel}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, lifecycle.AvailableActions(c.status, c.cancelRequested), "%s cancelRequested=%v", c.status, c.cancelRequested)
	}
}

func TestErrorKinds(t *testing.T) {
	t.Parallel()
	require.False(t, lifecycle.KindNonRetryable.Retryable())
	require.False(t, lifecycle.KindCancelled.Retryable())
	for _, k := range []lifecycle.ErrorKind{lifecycle.KindRetryable, lifecycle.KindResource, lifecycle.KindTimeout, lifecycle.KindInterrupted, lifecycle.KindStalled} {
		require.True(t, k.Retryable(), "%s", k)
	}
	require.False(t, lifecycle.KindInterrupted.ConsumesAttempt())
	require.True(t, lifecycle.KindTimeout.ConsumesAttempt())
	require.True(t, lifecycle.KindStalled.ConsumesAttempt(), "a handler that always hangs must run out of attempts")
	// Every kind says both, explicitly: a new kind must be placed here.
	want := map[lifecycle.ErrorKind][2]bool{ // retryable, consumes an attempt
		lifecycle.KindRetryable:    {true, true},
		lifecycle.KindNonRetryable: {false, true},
		lifecycle.KindResource:     {true, true},
		lifecycle.KindTimeout:      {true, true},
		lifecycle.KindCancelled:    {false, true},
		lifecycle.KindInterrupted:  {true, false},
		lifecycle.KindStalled:      {true, true},
	}
	require.Len(t, lifecycle.AllErrorKinds, len(want))
	for _, k := range lifecycle.AllErrorKinds {
		w, ok := want[k]
		require.True(t, ok, "kind %s has no expectation", k)
		require.Equal(t, w, [2]bool{k.Retryable(), k.ConsumesAttempt()}, "%s", k)
	}
}

func TestGraphQLEnums(t *testing.T) {
	t.Parallel()
	var s lifecycle.Status
	require.NoError(t, s.UnmarshalGQL("FAILED"))
	require.Equal(t, lifecycle.Failed, s)
	require.Error(t, s.UnmarshalGQL("DONE"))
	require.Error(t, s.UnmarshalGQL(3))
}
