package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// reviewOutcome is an execution's outcome sent to review.
func reviewOutcome(c store.Claimed) store.Outcome {
	return store.Outcome{Token: c.Token(), Status: lifecycle.ReviewPending, Kind: lifecycle.KindNonRetryable, Error: "the totals differ",
		Review: &store.ReviewRequest{Trigger: "NON_RETRYABLE", Reason: "the totals differ"}}
}

func finishOne(t *testing.T, s *store.Store, o store.Outcome) {
	t.Helper()
	res, err := s.Finish(sysCtx, []store.Outcome{o})
	require.NoError(t, err)
	require.NoError(t, res[0])
}

func decide(t *testing.T, s *store.Store, d store.Decision) (*ent.Task, error) {
	t.Helper()
	var out *ent.Task
	err := s.Write(sysCtx, func(tx *store.Tx) error {
		var err error
		out, _, err = tx.DecideReview(sysCtx, d)
		return err
	})
	return out, err
}

// TestAReviewHoldsItsDependents: a step in REVIEW_PENDING releases and
// cancels nothing below it (WAITING_DEPENDENCY's release rules: only an
// ending parent moves its children); its decision does, as a finish would:
// an accept releases them, a reject cancels them along CANCEL_DEPENDENTS
// edges, an approve leaves them waiting for the new execution.
func TestAReviewHoldsItsDependents(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, drv dbtest.Driver) {
		s, _ := setup(t, drv.DSN(t))
		for _, c := range []struct {
			name     string
			decision store.Decision
			children lifecycle.Status
		}{
			{"Accept", store.Decision{Decision: store.DecisionAccepted, By: "bob"}, lifecycle.Pending},
			{"Reject", store.Decision{Decision: store.DecisionRejected, By: "bob", Reason: "no"}, lifecycle.Cancelled},
			{"Approve", store.Decision{Decision: store.DecisionApproved, By: "bob"}, lifecycle.WaitingDependency},
		} {
			t.Run(c.name, func(t *testing.T) {
				a, b, cc, d := diamond(t, s, "")
				cl := claimAll(t, s)
				finishOne(t, s, reviewOutcome(cl[a.ID]))
				requireStatus(t, s, lifecycle.ReviewPending, a)
				requireStatus(t, s, lifecycle.WaitingDependency, b, cc, d)
				require.Empty(t, claimAll(t, s), "nothing is claimable while A waits for review")
				rv, err := s.Reviews(sysCtx, a.ID)
				require.NoError(t, err)
				require.Len(t, rv, 1)
				require.Nil(t, rv[0].DecidedAt)

				c.decision.TaskID = a.ID
				_, err = decide(t, s, c.decision)
				require.NoError(t, err)
				requireStatus(t, s, c.children, b, cc)
				// D waits for B and C still, or was cancelled with them.
				join := lifecycle.WaitingDependency
				if c.children == lifecycle.Cancelled {
					join = lifecycle.Cancelled
				}
				requireStatus(t, s, join, d)
				// A second decision finds it decided.
				_, err = decide(t, s, store.Decision{TaskID: a.ID, Decision: store.DecisionRejected, By: "carol", Reason: "late"})
				require.ErrorIs(t, err, lifecycle.ErrInvalidTransition)
				rv, err = s.Reviews(sysCtx, a.ID)
				require.NoError(t, err)
				require.Equal(t, c.decision.Decision, *rv[0].Decision)
				require.Equal(t, "bob", *rv[0].DecidedBy)
			})
		}
	})
}
