package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

const (
	bulkPreviewQ = `query($a: TaskAction!, $w: TaskWhereInput!) { bulkPreview(action: $a, where: $w) { matched accepted refused byStatus { status count accepted } } }`
	bulkActionQ  = `mutation($a: TaskAction!, $w: TaskWhereInput!, $r: String, $c: Int!, $k: String) { bulkTaskAction(action: $a, where: $w, reason: $r, confirm: $c, idempotencyKey: $k) { id code type status } }`
)

type bulkPreview struct {
	Matched, Accepted, Refused int
	ByStatus                   []struct {
		Status   string
		Count    int
		Accepted bool
	}
}

// insertWaiting creates n PENDING noop tasks of owner's, due in a day (no
// worker claims them), through the store's multi-row insert.
func insertWaiting(t *testing.T, st *store.Store, owner auth.Viewer, title string, n int) {
	t.Helper()
	ctx := auth.NewSystemContext(context.Background())
	later := time.Now().Add(24 * time.Hour)
	for done := 0; done < n; {
		batch := make([]store.NewTask, min(1000, n-done))
		for i := range batch {
			batch[i] = store.NewTask{Type: "noop", Title: title, Owner: owner.User, OwnerRole: string(owner.Role),
				OwnerSource: owner.Source, Tenant: owner.Tenant, Input: []byte(`{}`), InputHash: strconv.Itoa(done + i),
				Priority: 5, TimeoutSeconds: 60, RetryPolicy: "default", MaxAttempts: 1, RunAt: later}
		}
		res, err := st.CreateTasks(ctx, batch)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		done += len(batch)
	}
}

func operator(user string) auth.Viewer {
	return auth.Viewer{User: user, Role: auth.RoleOperator, Source: auth.SourceToken}
}

// TestBulkActionOverAFilter: a cancel over 2,500 matching tasks, in five
// pages, interrupted exactly after its third page and resumed, counted, on
// both databases. The same at 100,000 tasks, with the server killed between
// pages, is the root package's TestBulkCancelOfAHundredThousandSurvivesAKill
// (long tier: a process of its own, since SQLite under -race is ten times
// slower).
func TestBulkActionOverAFilter(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("LargeCancelIsPagedResumableAndCountsAddUp", func(t *testing.T) {
			t.Parallel()
			n, page := 2_500, 500
			// No worker: the test runs the bulk task's executions itself.
			s := startSecured(t, d.DSN(t), app.Options{Engine: []engine.Option{engine.WithBulkPageSize(page)}},
				func(c *app.Config) { c.Roles = []app.Role{app.RoleAPI} })
			st := s.App.Store
			insertWaiting(t, st, operator("alice"), "sweep", n)
			insertWaiting(t, st, operator("bob"), "sweep", 300) // not alice's: never touched
			// Five of alice's are cancelled one by one first: the bulk
			// cancel meets them and refuses them by state.
			sys := auth.NewSystemContext(context.Background())
			first, err := st.Client().Task.Query().Where(task.Owner("alice")).Order(ent.Asc(task.FieldID)).Limit(5).IDs(sys)
			require.NoError(t, err)
			for _, id := range first {
				var out struct{ CancelTask taskView }
				s.QueryAs(t, s.tok["alice"], `mutation($id: ID!) { cancelTask(id: $id) { status } }`, map[string]any{"id": id}, &out)
			}
			where := map[string]any{"type": "noop", "search": "SWEEP"}
			var pv struct{ BulkPreview bulkPreview }
			s.QueryAs(t, s.tok["alice"], bulkPreviewQ, map[string]any{"a": "CANCEL", "w": where}, &pv)
			require.Equal(t, n, pv.BulkPreview.Matched, "alice sees her own tasks only")
			require.Equal(t, n-5, pv.BulkPreview.Accepted)
			require.Equal(t, 5, pv.BulkPreview.Refused)

			var sub struct{ BulkTaskAction taskView }
			s.QueryAs(t, s.tok["alice"], bulkActionQ, map[string]any{"a": "CANCEL", "w": where, "r": "sweep", "c": n}, &sub)
			bulkID, err := strconv.Atoi(sub.BulkTaskAction.ID)
			require.NoError(t, err)
			// Created after the submission: matches the filter, never swept in.
			insertWaiting(t, st, operator("alice"), "sweep", 7)

			claimed, err := st.Claim(sys, "test", []string{engine.BulkType}, 1)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.Equal(t, bulkID, claimed[0].Task.ID)
			var in engine.BulkInput
			require.NoError(t, json.Unmarshal(claimed[0].Task.Input, &in))
			run := engine.BulkRun{TaskID: bulkID, Code: claimed[0].Task.Code, Owner: operator("alice"), Token: claimed[0].Token(), Input: in}

			// The first execution is interrupted after 3 pages.
			ctx, cancel := context.WithCancelCause(sys)
			pages := 0
			run.Progress = func(done, total int64) {
				if done > 0 {
					pages++
				}
				if pages == 3 {
					cancel(errors.New("node stopped"))
				}
			}
			res, err := s.App.Engine.RunBulk(ctx, run)
			require.ErrorContains(t, err, "node stopped")
			require.Equal(t, 3, res.Pages)
			require.Equal(t, 3*page, res.Processed)
			cancelled, err := st.Client().Task.Query().Where(task.Owner("alice"), task.StatusEQ(lifecycle.Cancelled)).Count(sys)
			require.NoError(t, err)
			require.Equal(t, 3*page, cancelled, "three pages committed, no more (the 5 cancelled before among them)")

			// Started again, it resumes after the last committed page.
			run.Progress = nil
			res, err = s.App.Engine.RunBulk(sys, run)
			require.NoError(t, err)
			require.Equal(t, n, res.Matched)
			require.Equal(t, n, res.Processed, "every task met once across both executions")
			require.Equal(t, n-5, res.Done)
			require.Equal(t, map[string]int{"CANCELLED": 5}, res.Refused)
			require.Zero(t, res.NotFound+res.Failed)
			require.Equal(t, (n+page-1)/page, res.Pages)

			byStatus := func(owner string, s lifecycle.Status) int {
				c, err := st.Client().Task.Query().Where(task.Owner(owner), task.StatusEQ(s)).Count(sys)
				require.NoError(t, err)
				return c
			}
			require.Equal(t, n, byStatus("alice", lifecycle.Cancelled))
			require.Equal(t, 7+1, byStatus("alice", lifecycle.Pending)+byStatus("alice", lifecycle.Executing), "the 7 created later, and the bulk task")
			require.Equal(t, 300, byStatus("bob", lifecycle.Pending))
			// Each task was cancelled once: one CANCELLED instance each.
			insts, err := st.Client().TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Cancelled)).Count(sys)
			require.NoError(t, err)
			require.Equal(t, n, insts)

			// Memory is bounded by the page: every page (an audit record
			// and a checkpoint line) names at most page tasks.
			recs, err := st.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionCANCEL_MANY)).All(sys)
			require.NoError(t, err)
			require.Len(t, recs, res.Pages)
			total := 0
			for _, r := range recs {
				require.LessOrEqual(t, len(r.TaskIds), page)
				require.Equal(t, "alice", r.Actor, "the pages are acted as the owner")
				require.Equal(t, sub.BulkTaskAction.Code, r.Details["bulkTask"])
				total += len(r.TaskIds)
			}
			require.Equal(t, n, total)
			sub1, err := st.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionBULK_CANCEL)).All(sys)
			require.NoError(t, err)
			require.Len(t, sub1, 1)
			require.Equal(t, []int{bulkID}, sub1[0].TaskIds)

			// A third run finds nothing left after its checkpoint.
			again, err := s.App.Engine.RunBulk(sys, run)
			require.NoError(t, err)
			require.Equal(t, res.Processed, again.Processed)

			// A page of an execution moved on is refused, whole.
			_, err = st.CancelTask(sys, bulkID, "")
			require.NoError(t, err)
			errs, err := st.Finish(sys, []store.Outcome{{Token: run.Token, Status: lifecycle.Cancelled, Kind: lifecycle.KindCancelled, Error: "cancelled"}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			_, err = st.ActPage(auth.NewContext(sys, operator("alice")), store.Page{Token: run.Token, TaskID: bulkID, Action: lifecycle.ActionCancel, IDs: []int{first[0]},
				Checkpoint: func([]store.Each) (string, map[string]any) { return "x", nil }})
			require.ErrorIs(t, err, store.ErrStaleToken)
		})
	})
}

func TestBulkActionRules(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("EndToEnd", func(t *testing.T) {
			t.Parallel()
			s := startSecured(t, d.DSN(t), app.Options{Engine: []engine.Option{engine.WithBulkPageSize(3)}})
			later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			for i := range 10 {
				s.create(t, "alice", map[string]any{"type": "noop", "title": fmt.Sprintf("batch %d", i), "runAt": later})
			}
			for range 4 {
				s.create(t, "bob", map[string]any{"type": "noop", "title": "batch of bob", "runAt": later})
			}
			where := map[string]any{"search": "batch", "statusIn": []string{"PENDING"}}

			var cnt struct{ CountTasks int }
			s.QueryAs(t, s.tok["alice"], `query($w: TaskWhereInput!) { countTasks(where: $w) }`, map[string]any{"w": where}, &cnt)
			require.Equal(t, 10, cnt.CountTasks)
			s.QueryAs(t, s.tok["root"], `query($w: TaskWhereInput!) { countTasks(where: $w) }`, map[string]any{"w": where}, &cnt)
			require.Equal(t, 14, cnt.CountTasks, "an admin sees its tenant's")
			// taskCount says the same, counted (a few tasks count at once),
			// and refuses a budget out of its range.
			type taskCount struct {
				Count, Low, High int
				Exact            bool
				Sampled          float64
			}
			var tc struct{ TaskCount taskCount }
			const taskCountQ = `query($w: TaskWhereInput, $ms: Int) { taskCount(where: $w, exactWithinMs: $ms) { count exact low high sampled } }`
			s.QueryAs(t, s.tok["alice"], taskCountQ, map[string]any{"w": where}, &tc)
			require.Equal(t, taskCount{Count: 10, Low: 10, High: 10, Exact: true}, tc.TaskCount)
			s.QueryAs(t, s.tok["root"], taskCountQ, map[string]any{"w": where, "ms": 60000}, &tc)
			require.Equal(t, taskCount{Count: 14, Low: 14, High: 14, Exact: true}, tc.TaskCount)
			for _, ms := range []int{0, 60001} {
				resp := s.DoAs(t, s.tok["alice"], taskCountQ, map[string]any{"w": where, "ms": ms})
				require.Len(t, resp.Errors, 1, ms)
				require.Equal(t, "VALIDATION", resp.Errors[0].Code(), ms)
			}

			// A count that is not the current one: CONFLICT with the new count.
			resp := s.DoAs(t, s.tok["alice"], bulkActionQ, map[string]any{"a": "CANCEL", "w": where, "c": 9})
			require.Len(t, resp.Errors, 1)
			require.Equal(t, "CONFLICT", resp.Errors[0].Code())
			require.EqualValues(t, 10, resp.Errors[0].Extensions["matched"])
			require.EqualValues(t, 9, resp.Errors[0].Extensions["confirmed"])
			// A read-only token may not act.
			resp = s.DoAs(t, s.tok["aliceRO"], bulkActionQ, map[string]any{"a": "CANCEL", "w": where, "c": 10})
			require.Len(t, resp.Errors, 1)
			require.Equal(t, "FORBIDDEN", resp.Errors[0].Code())
			// No one may create the internal type directly.
			resp = s.DoAs(t, s.tok["alice"], createNoop, map[string]any{"in": map[string]any{"type": engine.BulkType}})
			require.Len(t, resp.Errors, 1)
			require.Equal(t, "VALIDATION", resp.Errors[0].Code())

			var sub struct{ BulkTaskAction taskView }
			vars := map[string]any{"a": "CANCEL", "w": where, "c": 10, "k": "sweep-1", "r": "no longer needed"}
			s.QueryAs(t, s.tok["alice"], bulkActionQ, vars, &sub)
			var again struct{ BulkTaskAction taskView }
			s.QueryAs(t, s.tok["alice"], bulkActionQ, vars, &again)
			require.Equal(t, sub.BulkTaskAction.ID, again.BulkTaskAction.ID, "the same key returns the first task")

			var res struct {
				Task struct {
					Status       string
					ResultStatus *string
					Result       map[string]any
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { status resultStatus result } }`, map[string]any{"id": sub.BulkTaskAction.ID}, &res)
				if res.Task.Status == "SUCCESS" || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			require.Equal(t, "SUCCESS", res.Task.Status)
			require.EqualValues(t, 10, res.Task.Result["done"])
			require.EqualValues(t, 10, res.Task.Result["matched"])
			require.EqualValues(t, 4, res.Task.Result["pages"], "pages of 3")
			// The same key again, after it ran (the count is 0 now): the first task.
			s.QueryAs(t, s.tok["alice"], bulkActionQ, vars, &again)
			require.Equal(t, sub.BulkTaskAction.ID, again.BulkTaskAction.ID)
			vars["r"] = "another reason"
			resp = s.DoAs(t, s.tok["alice"], bulkActionQ, vars)
			require.Len(t, resp.Errors, 1)
			require.Equal(t, "CONFLICT", resp.Errors[0].Code())

			s.QueryAs(t, s.tok["root"], `query($w: TaskWhereInput!) { countTasks(where: $w) }`, map[string]any{"w": where}, &cnt)
			require.Equal(t, 4, cnt.CountTasks, "bob's tasks were not touched")

			// A retry over the cancelled ones refuses them all, by state.
			var pv struct{ BulkPreview bulkPreview }
			s.QueryAs(t, s.tok["alice"], bulkPreviewQ, map[string]any{"a": "RETRY", "w": map[string]any{"search": "batch"}}, &pv)
			require.Equal(t, 10, pv.BulkPreview.Matched)
			require.Zero(t, pv.BulkPreview.Accepted)
			require.Len(t, pv.BulkPreview.ByStatus, 1)
			require.Equal(t, "CANCELLED", pv.BulkPreview.ByStatus[0].Status)
		})
	})
}
