//go:build long

package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/external"
)

// TestPythonWorkerKilled: a Python worker killed (-9) mid-task is
// recovered by the watchdog as a dead node's execution; a late complete
// replayed with its old token is FENCED; the task ends once.
func TestPythonWorkerKilled(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{WorkerHeartbeat: 300 * time.Millisecond}, func(c *app.Config) { c.HeartbeatTimeout = 3 * time.Second })
		id := createMany(t, s, "py.a", []map[string]any{{"n": 1, "sleepMs": 600000}})[0]
		w := startPython(t, s.URL, tokens["wa"], "py-doomed", 4)
		apptest.Eventually(t, 30*time.Second, func() (bool, string) { return w.token(id) != "", "not started" })
		old := w.token(id)
		require.NoError(t, w.cmd.Process.Kill())
		<-w.done
		apptest.Eventually(t, 60*time.Second, func() (bool, string) {
			st := statusOf(t, s, id)
			return st == lifecycle.Failed, string(st)
		})
		wa := &external.Client{URL: s.URL, Token: tokens["wa"]}
		_, err := wa.Complete(context.Background(), external.CompleteRequest{Token: old, Status: "SUCCESS"})
		require.Equal(t, "FENCED", codeOf(t, err))
		insts, err := s.App.Store.Client().TaskInstance.Query().Where(taskinstance.TaskID(id)).All(auth.NewSystemContext(context.Background()))
		require.NoError(t, err)
		require.Len(t, insts, 1, "retry policy none: one execution")
		require.Equal(t, lifecycle.Failed, insts[0].Status)
		require.Equal(t, lifecycle.KindTimeout, *insts[0].ErrorKind)
		require.Equal(t, lifecycle.Failed, statusOf(t, s, id), "the late complete changed nothing")
	})
}

// TestExternalCap: a cap of 2 on an external type holds across two
// Python workers of 10 slots each: never more than 2 running (sampled).
func TestExternalCap(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, tokens := workerNode(t, dsn, app.Options{WorkerHeartbeat: 300 * time.Millisecond}, func(c *app.Config) { c.HeartbeatTimeout = 3 * time.Second })
		r := s.DoAs(t, tokens["ada"], `mutation { setTypeControl(type: "py.a", input: {maxRunning: 2}) { maxRunning } }`, nil)
		require.Empty(t, r.Errors)
		const n = 20
		inputs := make([]map[string]any, n)
		for i := range inputs {
			inputs[i] = map[string]any{"n": i, "sleepMs": 300}
		}
		createMany(t, s, "py.a", inputs)
		startPython(t, s.URL, tokens["wa"], "py-1", 10)
		startPython(t, s.URL, tokens["wa"], "py-2", 10)
		ctx := auth.NewSystemContext(context.Background())
		c := s.App.Store.Client()
		most := 0
		apptest.Eventually(t, 120*time.Second, func() (bool, string) {
			running, err := c.TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Executing)).Count(ctx)
			require.NoError(t, err)
			most = max(most, running)
			require.LessOrEqual(t, running, 2, "the cap")
			done, err := c.Task.Query().Where(task.Type("py.a"), task.StatusEQ(lifecycle.Success)).Count(ctx)
			require.NoError(t, err)
			return done == n, ""
		})
		require.Equal(t, 2, most, "the workers ran up to the cap")
	})
}
