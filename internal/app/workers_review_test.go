package app_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/external"
)

// TestWorkerProtocolNeedsReview: a worker in another language hands a
// failure to a person through the protocol's complete (error.needsReview,
// with evidence): the task waits in REVIEW_PENDING with the evidence
// masked, unless it opted out of review; a task that opted in has its
// NON_RETRYABLE failures reviewed as the pool's are. Sent as raw JSON,
// the field names as docs/workers.md spells them.
func TestWorkerProtocolNeedsReview(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{}, func(c *app.Config) { c.HeartbeatTimeout = 10 * time.Second })
		ctx := context.Background()
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		const phone = "13912345678"

		// run creates a py.a task (with review when set), claims it and
		// completes it with body (its token put in), and returns the task
		// and the call's error.
		run := func(t *testing.T, review any, body string) (int, external.CompleteResponse, error) {
			t.Helper()
			in := map[string]any{"type": "py.a", "input": map[string]any{"n": 1}}
			if review != nil {
				in["review"] = review
			}
			var out struct{ CreateTask struct{ ID string } }
			s.QueryAs(t, tokens["otto"], `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`, map[string]any{"in": in}, &out)
			id, err := strconv.Atoi(out.CreateTask.ID)
			require.NoError(t, err)
			got, err := wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-r", Types: []string{"py.a"}, Max: 1, WaitSeconds: 5})
			require.NoError(t, err)
			require.Len(t, got.Tasks, 1)
			require.Equal(t, id, got.Tasks[0].TaskID)
			var res external.CompleteResponse
			err = wa.CallRaw(ctx, "complete", []byte(`{"token":"`+got.Tasks[0].Token+`",`+body+`}`), &res)
			return id, res, err
		}
		type review struct {
			Status string
			Review *struct {
				Trigger, Reason string
				Evidence        json.RawMessage
			}
			Instances []struct{ Status string }
		}
		read := func(t *testing.T, id int) review {
			t.Helper()
			var out struct{ Task review }
			s.QueryAs(t, tokens["otto"], `query($id: ID!) { task(id: $id) { status review { trigger reason evidence } instances { status } } }`, map[string]any{"id": id}, &out)
			return out.Task
		}

		// Bad outcomes are refused, and the execution goes on.
		id, _, err := run(t, nil, `"status":"FAILED","error":{"kind":"RETRYABLE","message":"x","needsReview":true}`)
		require.Equal(t, "VALIDATION", codeOf(t, err), "a failure for review is never retried")
		require.Equal(t, "EXECUTING", read(t, id).Status)
		id2, _, err := run(t, nil, `"status":"FAILED","error":{"kind":"NON_RETRYABLE","message":"x","evidence":{"a":1}}`)
		require.Equal(t, "VALIDATION", codeOf(t, err), "evidence without needsReview")
		require.Equal(t, "EXECUTING", read(t, id2).Status)
		for _, id := range []int{id, id2} {
			r := s.DoAs(t, tokens["otto"], `mutation($id: ID!) { cancelTask(id: $id) { id } }`, map[string]any{"id": id})
			require.Empty(t, r.Errors)
		}

		// needsReview: REVIEW_PENDING, with the evidence masked.
		id, res, err := run(t, nil, `"status":"FAILED","error":{"message":"3 of 10 rows refused","needsReview":true,"evidence":{"failedRows":3,"phone":"`+phone+`"}}`)
		require.NoError(t, err)
		require.Equal(t, "REVIEW_PENDING", res.TaskStatus)
		got := read(t, id)
		require.Equal(t, "REVIEW_PENDING", got.Status)
		require.NotNil(t, got.Review)
		require.Equal(t, "NEEDS_REVIEW", got.Review.Trigger)
		require.Equal(t, "3 of 10 rows refused", got.Review.Reason)
		require.Contains(t, string(got.Review.Evidence), `"failedRows":3`)
		require.NotContains(t, string(got.Review.Evidence), phone, "the evidence is masked")
		// A person decides: approve runs it again, on a new execution the
		// worker claims.
		var a struct{ ApproveReview struct{ Status string } }
		s.QueryAs(t, tokens["ada"], `mutation($id: ID!) { approveReview(id: $id, reason: "the rows are fixed") { status } }`, map[string]any{"id": id}, &a)
		require.Equal(t, "RETRY_PENDING", a.ApproveReview.Status)
		again, err := wa.Claim(ctx, external.ClaimRequest{WorkerID: "py-r", Types: []string{"py.a"}, Max: 1, WaitSeconds: 5})
		require.NoError(t, err)
		require.Len(t, again.Tasks, 1)
		require.Equal(t, id, again.Tasks[0].TaskID)
		done, err := wa.Complete(ctx, external.CompleteRequest{Token: again.Tasks[0].Token, Status: "SUCCESS"})
		require.NoError(t, err)
		require.Equal(t, "SUCCESS", done.TaskStatus)
		require.Len(t, read(t, id).Instances, 2)

		// A task that opted out: needsReview ends it FAILED.
		id, res, err = run(t, false, `"status":"FAILED","error":{"kind":"NON_RETRYABLE","message":"look","needsReview":true}`)
		require.NoError(t, err)
		require.Equal(t, "FAILED", res.TaskStatus)
		require.Nil(t, read(t, id).Review)

		// A task that opted in: its NON_RETRYABLE failure is reviewed.
		id, res, err = run(t, true, `"status":"FAILED","error":{"kind":"NON_RETRYABLE","message":"bad number"}`)
		require.NoError(t, err)
		require.Equal(t, "REVIEW_PENDING", res.TaskStatus)
		require.Equal(t, "NON_RETRYABLE", read(t, id).Review.Trigger)
		// Without either, a NON_RETRYABLE failure ends FAILED.
		id, res, err = run(t, nil, `"status":"FAILED","error":{"kind":"NON_RETRYABLE","message":"bad number"}`)
		require.NoError(t, err)
		require.Equal(t, "FAILED", res.TaskStatus)
		require.Nil(t, read(t, id).Review)
	})
}
