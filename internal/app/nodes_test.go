package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/clusternode"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

type clusterNode struct {
	ID                string
	State             string
	Busy, Total       int
	Leading, Draining bool
	Roles             []string
	Files             string
	Version           string
	RunningExecutions []struct {
		TaskID   string
		TaskType string
	}
}

const nodesQuery = `{ clusterNodes { id state busy total leading draining roles files version runningExecutions { taskId taskType } } }`

// TestClusterNodes: a node registers itself and shows its load, its
// running executions and that it leads; only admins see the details
// (others read counts); a drained node claims nothing until undrained;
// a node shut down says STOPPED.
func TestClusterNodes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		path, tokens := apptest.Tokens(t,
			auth.Viewer{User: "ada", Role: auth.RoleAdmin},
			auth.Viewer{User: "otto", Role: auth.RoleOperator},
			auth.Viewer{User: "vera", Role: auth.RoleViewer},
		)
		release := make(chan struct{})
		opts := app.Options{Register: func(r *tasktype.Registry) {
			tasktype.Register(r, "block", func(ctx context.Context, _ *tasktype.Job, _ struct{}) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}}
		s := apptest.Start(t, dsn, opts, func(c *app.Config) {
			c.Access.TokenFile = path
			c.NodeRefresh = 50 * time.Millisecond
			// Fast refreshes (the drain applies at once), a lease no busy
			// machine runs out of.
			c.NodeLease = time.Minute
		})
		admin := tokens["ada"]
		nodesAs := func(token string) []clusterNode {
			var out struct{ ClusterNodes []clusterNode }
			s.QueryAs(t, token, nodesQuery, nil, &out)
			return out.ClusterNodes
		}

		// A blocked execution shows on its node.
		var created struct{ CreateTask struct{ ID string } }
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "block"}) { id } }`, nil, &created)
		apptest.Eventually(t, 20*time.Second, func() (bool, string) {
			list := nodesAs(admin)
			if len(list) != 1 || len(list[0].RunningExecutions) != 1 || list[0].Busy != 1 || !list[0].Leading {
				return false, "waiting for the node to show its execution and lead: " + mustJSON(list)
			}
			return true, ""
		})
		n := nodesAs(admin)[0]
		require.Equal(t, s.App.Node, n.ID)
		require.Equal(t, "LIVE", n.State)
		require.Equal(t, 8, n.Total)
		require.Equal(t, []string{"api", "worker", "watchdog"}, n.Roles)
		require.Contains(t, n.Files, "file://")
		require.NotEmpty(t, n.Version)
		require.Equal(t, created.CreateTask.ID, n.RunningExecutions[0].TaskID)
		require.Equal(t, "block", n.RunningExecutions[0].TaskType)
		close(release)

		// Others read counts only.
		for _, who := range []string{"otto", "vera"} {
			r := s.DoAs(t, tokens[who], nodesQuery, nil)
			require.NotEmpty(t, r.Errors, who)
			require.Equal(t, "FORBIDDEN", r.Errors[0].Code(), who)
			var sum struct {
				ClusterSummary struct{ Live, Gone, Total int }
			}
			s.QueryAs(t, tokens[who], `{ clusterSummary { live gone total } }`, nil, &sum)
			require.Equal(t, 1, sum.ClusterSummary.Live, who)
			require.Equal(t, 8, sum.ClusterSummary.Total, who)
		}

		// Draining: refused to operators, then done by the admin; the node
		// stops claiming at its next refresh.
		const drain = `mutation($id: String!, $d: Boolean!) { drainClusterNode(id: $id, drain: $d) { id state draining } }`
		r := s.DoAs(t, tokens["otto"], drain, map[string]any{"id": s.App.Node, "d": true})
		require.Equal(t, "FORBIDDEN", r.Errors[0].Code())
		r = s.DoAs(t, admin, drain, map[string]any{"id": "no-such-node", "d": true})
		require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		var drained struct{ DrainClusterNode clusterNode }
		s.QueryAs(t, admin, drain, map[string]any{"id": s.App.Node, "d": true}, &drained)
		require.Equal(t, "DRAINING", drained.DrainClusterNode.State)
		apptest.Eventually(t, 10*time.Second, func() (bool, string) { return s.App.Nodes.Draining(), "node not drained yet" })
		readyz := func() (int, string) {
			resp, err := http.Get(s.URL + "/readyz")
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		code, body := readyz()
		require.Equal(t, http.StatusServiceUnavailable, code, "a drained node says so on /readyz")
		require.Contains(t, body, "draining")

		var noop struct{ CreateTask struct{ ID string } }
		s.QueryAs(t, tokens["otto"], `mutation { createTask(input: {type: "noop"}) { id } }`, nil, &noop)
		s.App.Pool.Wake()
		// Many polls of the pool (every 50ms) later, the task still waits.
		time.Sleep(600 * time.Millisecond)
		status := func() string {
			var out struct{ Task struct{ Status string } }
			s.QueryAs(t, admin, `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": noop.CreateTask.ID}, &out)
			return out.Task.Status
		}
		require.Equal(t, "PENDING", status(), "a drained node claimed work")

		s.QueryAs(t, admin, drain, map[string]any{"id": s.App.Node, "d": false}, &drained)
		require.Equal(t, "LIVE", drained.DrainClusterNode.State)
		apptest.Eventually(t, 20*time.Second, func() (bool, string) {
			st := status()
			return st == "SUCCESS", "undrained node has not run the task: " + st
		})
		code, body = readyz()
		require.Equal(t, http.StatusOK, code, body)

		var audit struct {
			AuditLogs struct {
				Edges []struct {
					Node struct{ Action, Actor, Outcome string }
				}
			}
		}
		s.QueryAs(t, admin, `{ auditLogs(where: {actionIn: [NODE_DRAIN, NODE_UNDRAIN]}, orderBy: {field: CREATED_AT, direction: ASC}) { edges { node { action actor outcome } } } }`, nil, &audit)
		var got []string
		for _, e := range audit.AuditLogs.Edges {
			got = append(got, e.Node.Action+" "+e.Node.Actor+" "+e.Node.Outcome)
		}
		require.Equal(t, []string{"NODE_DRAIN otto FAILED", "NODE_DRAIN ada FAILED", "NODE_DRAIN ada OK", "NODE_UNDRAIN ada OK"}, got)

		// A clean shutdown marks the node STOPPED.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.App.Shutdown(ctx))
		st, err := store.Open(ctx, store.Config{DSN: dsn})
		require.NoError(t, err)
		defer st.Close()
		row, err := st.Client().ClusterNode.Query().Where(clusternode.Name(s.App.Node)).Only(auth.NewSystemContext(ctx))
		require.NoError(t, err)
		require.NotNil(t, row.StoppedAt)
		require.Zero(t, row.Busy)
	})
}

// TestClusterNodesSubscription: the subscription sends the nodes at once
// and again when one changes (here: drained).
func TestClusterNodesSubscription(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.NodeRefresh, c.NodeLease = 50*time.Millisecond, time.Minute })
		apptest.Eventually(t, 10*time.Second, func() (bool, string) {
			var out struct{ ClusterNodes []clusterNode }
			s.Query(t, nodesQuery, nil, &out)
			return len(out.ClusterNodes) == 1, "node not registered"
		})
		sub := s.SubscribeSSE(t, `subscription { clusterNodesChanged { id state draining } }`, nil)
		next := func() []clusterNode {
			e, ok := sub.Next()
			require.True(t, ok, "stream ended")
			r, err := e.Response()
			require.NoError(t, err)
			require.Empty(t, r.Errors)
			var out struct{ ClusterNodesChanged []clusterNode }
			require.NoError(t, json.Unmarshal(r.Data, &out))
			return out.ClusterNodesChanged
		}
		first := next()
		require.Len(t, first, 1)
		require.Equal(t, "LIVE", first[0].State)
		s.Query(t, `mutation($id: String!) { drainClusterNode(id: $id, drain: true) { id } }`, map[string]any{"id": s.App.Node}, nil)
		for {
			list := next()
			if list[0].State == "DRAINING" {
				break
			}
		}
	})
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
