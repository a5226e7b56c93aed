package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// TestReviewOptInAndOut: a task's own review (createTask's review) wins
// over its type's policy, both ways.
func TestReviewOptInAndOut(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			registerChecker(r)
			// "reviewed" sends its NON_RETRYABLE failures to review.
			tasktype.Register(r, "reviewed", func(ctx context.Context, job *tasktype.Job, in checkInput) error {
				if in.Fail {
					return tasktype.NonRetryable(errors.New("the totals differ"))
				}
				return nil
			}, tasktype.WithReview(tasktype.ReviewPolicy{OnNonRetryable: true}))
		}})
		// A type without a policy, a task that opts in: its NON_RETRYABLE
		// failure waits for review.
		in := s.create(t, "alice", map[string]any{"type": "plain", "review": true, "input": map[string]any{"fail": true}})
		got := s.waitStatus(t, "alice", in.ID, "REVIEW_PENDING")
		require.NotNil(t, got.Review)
		require.Equal(t, "NON_RETRYABLE", got.Review.Trigger)
		require.Contains(t, got.Review.Reason, "bad input")
		require.False(t, got.Review.FourEyes, "the type asks for no four eyes")
		// Its submitter may decide (no four eyes): approve runs it again.
		var a struct{ ApproveReview struct{ Status string } }
		s.QueryAs(t, s.tok["alice"], `mutation($id: ID!) { approveReview(id: $id, reason: "once more") { status } }`, map[string]any{"id": in.ID}, &a)
		require.Equal(t, "RETRY_PENDING", a.ApproveReview.Status)
		again := s.waitStatus(t, "alice", in.ID, "REVIEW_PENDING")
		require.Len(t, again.Instances, 2, "the approved retry failed again and waits for review again")

		// The same type without the opt-in ends FAILED.
		plain := s.create(t, "alice", map[string]any{"type": "plain", "input": map[string]any{"fail": true}})
		require.Nil(t, s.waitStatus(t, "alice", plain.ID, "FAILED").Review)

		// A type with a policy, a task that opts out: FAILED, no review.
		out := s.create(t, "alice", map[string]any{"type": "reviewed", "review": false, "input": map[string]any{"fail": true}})
		require.Nil(t, s.waitStatus(t, "alice", out.ID, "FAILED").Review)
		// Its handler's explicit "needs review" too.
		nr := s.create(t, "alice", map[string]any{"type": "checker", "review": false, "input": map[string]any{"fail": true}})
		require.Nil(t, s.waitStatus(t, "alice", nr.ID, "FAILED").Review)
		// Without the opt-out, the policy holds.
		pol := s.create(t, "alice", map[string]any{"type": "reviewed", "input": map[string]any{"fail": true}})
		require.Equal(t, "NON_RETRYABLE", s.waitStatus(t, "alice", pol.ID, "REVIEW_PENDING").Review.Trigger)
	})
}

// partialResult is what "partial"'s handler reports: some of its work
// done, its verdict PARTIAL_SUCCESS.
const partialResult = `{"written":7,"refused":3}`

// TestReviewConfirmPartial: a PARTIAL_SUCCESS its type asks a person to
// confirm waits for review; accept ends it SUCCESS with the result as it
// was, reject FAILED with the reason, approve runs it again.
func TestReviewConfirmPartial(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "partial", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				job.SetResultStatus(tasktype.TriggerPartialSuccess)
				return job.SetResult(map[string]any{"written": 7, "refused": 3})
			}, tasktype.WithReview(tasktype.ReviewPolicy{ConfirmPartial: true}))
			// "whole" reports a partial success too, with no policy: it
			// stands as it is.
			tasktype.Register(r, "whole", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				job.SetResultStatus(tasktype.TriggerPartialSuccess)
				return nil
			})
		}})
		type outcome struct {
			Task struct {
				Status       string
				ResultStatus *string
				Result       json.RawMessage
				LastError    *string
			}
		}
		read := func(t *testing.T, id string) outcome {
			var o outcome
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { status resultStatus result lastError } }`, map[string]any{"id": id}, &o)
			return o
		}
		start := func(t *testing.T) string {
			tk := s.create(t, "alice", map[string]any{"type": "partial"})
			got := s.waitStatus(t, "alice", tk.ID, "REVIEW_PENDING")
			require.Equal(t, "PARTIAL_SUCCESS", got.Review.Trigger)
			require.Len(t, got.Instances, 1)
			return tk.ID
		}

		t.Run("Accept", func(t *testing.T) {
			id := start(t)
			var a struct{ AcceptReview struct{ Status string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { acceptReview(id: $id, reason: "3 refused rows are known") { status } }`, map[string]any{"id": id}, &a)
			require.Equal(t, "SUCCESS", a.AcceptReview.Status)
			got := s.reviewOf(t, "alice", id)
			require.Equal(t, "SUCCESS", got.Status)
			require.Equal(t, "ACCEPTED", *got.Review.Decision)
			require.Len(t, got.Instances, 1, "accept runs nothing again")
			require.Equal(t, "SUCCESS", got.Instances[0].Status)
			o := read(t, id)
			require.Equal(t, "PARTIAL_SUCCESS", *o.Task.ResultStatus)
			require.JSONEq(t, partialResult, string(o.Task.Result))
		})
		t.Run("Reject", func(t *testing.T) {
			id := start(t)
			var a struct{ RejectReview struct{ Status string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { rejectReview(id: $id, reason: "too many refused rows") { status } }`, map[string]any{"id": id}, &a)
			require.Equal(t, "FAILED", a.RejectReview.Status)
			got := s.reviewOf(t, "alice", id)
			require.Equal(t, "REJECTED", *got.Review.Decision)
			require.Equal(t, "too many refused rows", *got.Review.DecisionReason)
			require.Equal(t, "FAILED", got.Instances[0].Status)
			o := read(t, id)
			require.Equal(t, "FAILED", o.Task.Status)
			require.NotNil(t, o.Task.LastError)
			require.Contains(t, *o.Task.LastError, "too many refused rows", "a rejected task says why it failed")
			require.Contains(t, *o.Task.LastError, "bob")
		})
		t.Run("Approve", func(t *testing.T) {
			id := start(t)
			var a struct{ ApproveReview struct{ Status string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { approveReview(id: $id, reason: "run it again") { status } }`, map[string]any{"id": id}, &a)
			require.Equal(t, "RETRY_PENDING", a.ApproveReview.Status)
			// The new execution reports a partial success again: it waits
			// for review again, on its own instance.
			apptest.Eventually(t, 30*time.Second, func() (bool, string) {
				got := s.reviewOf(t, "alice", id)
				return got.Status == "REVIEW_PENDING" && len(got.Instances) == 2, fmt.Sprintf("%s, %d instances", got.Status, len(got.Instances))
			})
			got := s.reviewOf(t, "alice", id)
			require.Equal(t, "PARTIAL_SUCCESS", got.Review.Trigger)
			require.Nil(t, got.Review.Decision, "the new review is open")
		})
		t.Run("WithoutThePolicyAPartialSuccessStands", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "whole"})
			got := s.waitStatus(t, "alice", tk.ID, "SUCCESS")
			require.Nil(t, got.Review)
			require.Equal(t, "PARTIAL_SUCCESS", *read(t, tk.ID).Task.ResultStatus)
		})
	})
}

// TestReviewTenantsAndOverdueAlerts: an operator decides only on the
// reviews he may see (another tenant's is NOT_FOUND), a viewer on none;
// a REVIEW_OVERDUE rule raises one incident for its tenant's overdue
// review, and another tenant's rule sees nothing.
func TestReviewTenantsAndOverdueAlerts(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ts := startTenants(t, dsn, app.Options{
			Register: func(r *tasktype.Registry) {
				registerChecker(r)
				tasktype.Register(r, "late", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
					return tasktype.NonRetryable(errors.New("the totals differ"))
				}, tasktype.WithReview(tasktype.ReviewPolicy{OnNonRetryable: true, Deadline: time.Millisecond, OnDeadline: tasktype.DeadlineAlert}))
			},
			// The loops never pass by themselves during the test: their
			// passes are the test's.
			ReviewDeadlines: engine.DeadlinesConfig{Delay: time.Hour, Interval: time.Hour},
		})
		s := &secured{Server: ts.Server, tok: ts.tok}
		ctx := context.Background()

		t.Run("DecideOnlyOnWhatYouMaySee", func(t *testing.T) {
			tk := s.create(t, "opA", map[string]any{"type": "checker", "input": map[string]any{"fail": true}})
			s.waitStatus(t, "opA", tk.ID, "REVIEW_PENDING")
			decisions := map[string]string{
				"approve": `mutation($id: ID!) { approveReview(id: $id, reason: "ok") { id } }`,
				"edit":    `mutation($id: ID!) { editAndRetry(id: $id, input: {fail: false}, reason: "fixed") { id } }`,
				"accept":  `mutation($id: ID!) { acceptReview(id: $id) { id } }`,
				"reject":  `mutation($id: ID!) { rejectReview(id: $id, reason: "no") { id } }`,
			}
			for name, m := range decisions {
				// Tenant B's operator and admin do not see A's task.
				require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["opB"], m, map[string]any{"id": tk.ID})), "opB %s", name)
				require.Equal(t, "NOT_FOUND", code(t, s.DoAs(t, s.tok["adminB"], m, map[string]any{"id": tk.ID})), "adminB %s", name)
				// A's viewer sees it and may not decide.
				require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["viewA"], m, map[string]any{"id": tk.ID})), "viewA %s", name)
				// Its submitter may not either (four eyes).
				require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["opA"], m, map[string]any{"id": tk.ID})), "opA %s", name)
			}
			for _, m := range []string{
				`mutation($id: ID!) { approveReviews(ids: [$id], reason: "ok") { id error { code } } }`,
				`mutation($id: ID!) { rejectReviews(ids: [$id], reason: "no") { id error { code } } }`,
			} {
				var out map[string][]struct {
					ID    string
					Error *struct{ Code string }
				}
				s.QueryAs(t, s.tok["opB"], m, map[string]any{"id": tk.ID}, &out)
				for _, rs := range out {
					require.Len(t, rs, 1)
					require.NotNil(t, rs[0].Error, "opB decided on A's task: %+v", rs)
					require.Equal(t, "NOT_FOUND", rs[0].Error.Code)
				}
			}
			r := s.DoAs(t, s.tok["opB"], `query($id: ID!) { task(id: $id) { id } }`, map[string]any{"id": tk.ID})
			require.Equal(t, "NOT_FOUND", code(t, r))
			var q struct{ ReviewQueue struct{ TotalCount int } }
			s.QueryAs(t, s.tok["opB"], `{ reviewQueue { totalCount } }`, nil, &q)
			require.Zero(t, q.ReviewQueue.TotalCount, "B's queue holds none of A's reviews")
			// A's viewer is offered nothing; another operator of A is
			// offered the decisions, and his passes.
			require.Empty(t, s.reviewOf(t, "viewA", tk.ID).AvailableActions)
			require.Contains(t, s.reviewOf(t, "op2A", tk.ID).AvailableActions, "APPROVE_REVIEW")
			require.Equal(t, "REVIEW_PENDING", s.reviewOf(t, "opA", tk.ID).Status, "nothing refused moved it")
			var ok struct{ RejectReview struct{ Status string } }
			s.QueryAs(t, s.tok["op2A"], decisions["reject"], map[string]any{"id": tk.ID}, &ok)
			got := s.reviewOf(t, "opA", tk.ID)
			require.Equal(t, "FAILED", got.Status)
			require.Equal(t, "op2", *got.Review.DecidedBy)
		})

		t.Run("AnOverdueReviewRaisesOneIncidentInItsTenant", func(t *testing.T) {
			type incident struct {
				ID, Kind, Subject, Status, Summary string
				Occurrences                        int
			}
			rules := map[string]string{}
			for _, who := range []string{"adminA", "adminB"} {
				var rule struct{ CreateAlertRule struct{ ID string } }
				s.QueryAs(t, s.tok[who], `mutation { createAlertRule(input: {name: "reviews overdue", kind: REVIEW_OVERDUE, taskType: "late"}) { id } }`, nil, &rule)
				rules[who] = rule.CreateAlertRule.ID
			}
			incidents := func(t *testing.T, who string) []incident {
				var out struct{ AlertIncidents []incident }
				s.QueryAs(t, s.tok[who], `query($r: ID!) { alertIncidents(ruleId: $r) { id kind subject status summary occurrences } }`, map[string]any{"r": rules[who]}, &out)
				return out.AlertIncidents
			}
			pass := func(t *testing.T) {
				_, err := ts.App.Evaluator.Pass(ctx)
				require.NoError(t, err)
			}

			tk := s.create(t, "opA", map[string]any{"type": "late"})
			s.waitStatus(t, "opA", tk.ID, "REVIEW_PENDING")
			// The deadline's outcome: ALERT leaves it waiting, overdue.
			_, err := ts.App.ReviewDeadlines.Pass(ctx)
			require.NoError(t, err)
			got := s.reviewOf(t, "opA", tk.ID)
			require.Equal(t, "REVIEW_PENDING", got.Status)
			require.True(t, got.Review.Overdue)

			pass(t)
			pass(t)
			inA := incidents(t, "adminA")
			require.Len(t, inA, 1, "one incident, however many passes: %+v", inA)
			require.Equal(t, "REVIEW_OVERDUE", inA[0].Kind)
			require.Equal(t, "type:late", inA[0].Subject)
			require.Equal(t, "OPEN", inA[0].Status)
			require.Contains(t, inA[0].Summary, "1 task(s) of late")
			require.Empty(t, incidents(t, "adminB"), "B's rule sees no review of A")

			// Decided, the review is overdue no more: the incident resolves.
			var ok struct{ AcceptReview struct{ Status string } }
			s.QueryAs(t, s.tok["op2A"], `mutation($id: ID!) { acceptReview(id: $id, reason: "fine") { status } }`, map[string]any{"id": tk.ID}, &ok)
			pass(t)
			inA = incidents(t, "adminA")
			require.Len(t, inA, 1)
			require.Equal(t, "RESOLVED", inA[0].Status)
			require.Empty(t, incidents(t, "adminB"))
		})
	})
}
