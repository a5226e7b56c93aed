//go:build long

package reliability

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestBulkCancelOfAHundredThousandSurvivesAKill: a bulk cancel over the
// 100,000 tasks a filter matches, on both databases, run by a real server
// killed with SIGKILL after a few pages and started again. The pages
// committed before the kill stay, whole; the next execution resumes after
// the last of them; every task is acted on exactly once across the two;
// tasks of another owner, and those created after the submission, are
// never touched; no page names more tasks than a page holds.
//
// The server is its own process (built without the race detector, like
// every process test): SQLite under -race runs ten times slower, and the
// rules of a bulk action at a small scale, interrupted exactly between
// pages, are tested in process (graph's TestBulkActionOverAFilter).
func TestBulkCancelOfAHundredThousandSurvivesAKill(t *testing.T) {
	t.Parallel()
	bin := serverbin.Build(t)
	dbtest.Run(t, func(t *testing.T, dsn string) {
		const n, page, others = 100_000, 500, 300 // page: engine.BulkPageDefault
		sys := auth.NewSystemContext(context.Background())
		dir := t.TempDir()
		tokens := map[string]string{"alice": strings.Repeat("a1", 20), "bob": strings.Repeat("b2", 20)}
		var lines strings.Builder
		for user, tok := range tokens {
			fmt.Fprintf(&lines, "%s %s operator\n", auth.HashToken(tok), user)
		}
		tokenFile := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tokenFile, []byte(lines.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		dataDir := filepath.Join(dir, "data")
		var srv *exec.Cmd
		var addr string
		var stderr bytes.Buffer
		start := func() {
			addr = serverbin.FreeAddr(t)
			srv = exec.Command(bin, "-addr", addr, "-db", dsn, "-data-dir", dataDir, "-token-file", tokenFile,
				"-rate-limit", "0", "-heartbeat-timeout", "3s", "-log-level", "warn", "-secret-key", strings.Repeat("ab", 32))
			srv.Stderr = &stderr
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			cmd := srv
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			serverbin.WaitReady(t, addr, 60*time.Second, stderr.String)
		}
		as := func(user, query string, vars map[string]any, out any) {
			t.Helper()
			serverbin.Query(t, addr, tokens[user], query, vars, out)
		}
		later := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
		// create makes count waiting "sweep" tasks of user's, due in a day
		// (nothing claims them), through the bulk mutation.
		create := func(user string, count int) []string {
			var ids []string
			for done := 0; done < count; {
				inputs := make([]map[string]any, min(page, count-done))
				for i := range inputs {
					inputs[i] = map[string]any{"type": "noop", "title": "sweep", "runAt": later}
				}
				var out struct {
					CreateTasks []struct {
						Task  *struct{ ID string }
						Error *struct{ Code, Message string }
					}
				}
				as(user, `mutation($in: [CreateTaskInput!]!) { createTasks(inputs: $in) { task { id } error { code message } } }`,
					map[string]any{"in": inputs}, &out)
				for _, r := range out.CreateTasks {
					if r.Error != nil || r.Task == nil {
						t.Fatalf("createTasks: %+v", r.Error)
					}
					ids = append(ids, r.Task.ID)
				}
				done += len(inputs)
			}
			return ids
		}

		start()
		st, err := store.Open(sys, store.Config{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		access.Install(st.Client())
		defer st.Close()
		count := func(what string, q interface {
			Count(context.Context) (int, error)
		}) int {
			t.Helper()
			c, err := q.Count(sys)
			if err != nil {
				t.Fatalf("count %s: %v", what, err)
			}
			return c
		}

		alices := create("alice", n)
		create("bob", others)
		// Five of alice's are cancelled one by one first: the bulk cancel
		// meets them in its first page and refuses them by state.
		for _, id := range alices[:5] {
			var out struct{ CancelTask struct{ Status string } }
			as("alice", `mutation($id: ID!) { cancelTask(id: $id) { status } }`, map[string]any{"id": id}, &out)
		}
		where := map[string]any{"type": "noop", "search": "SWEEP"}
		var pv struct {
			BulkPreview struct{ Matched, Accepted, Refused int }
		}
		as("alice", `query($w: TaskWhereInput!) { bulkPreview(action: CANCEL, where: $w) { matched accepted refused } }`, map[string]any{"w": where}, &pv)
		if pv.BulkPreview.Matched != n || pv.BulkPreview.Accepted != n-5 || pv.BulkPreview.Refused != 5 {
			t.Fatalf("preview %+v: alice sees her %d tasks, 5 of them cancelled", pv.BulkPreview, n)
		}
		var sub struct {
			BulkTaskAction struct{ ID, Code string }
		}
		as("alice", `mutation($w: TaskWhereInput!, $c: Int!) { bulkTaskAction(action: CANCEL, where: $w, reason: "sweep", confirm: $c) { id code } }`,
			map[string]any{"w": where, "c": n}, &sub)
		bulkID, err := strconv.Atoi(sub.BulkTaskAction.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Created after the submission: match the filter, never swept in.
		create("alice", 7)

		pages := st.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionCANCEL_MANY))
		waitUntil(t, 120*time.Second, func() bool { return count("pages", pages.Clone()) >= 3 },
			func() string { return "the bulk action committed fewer than 3 pages: " + stderr.String() })
		if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = srv.Wait()
		committed := count("pages", pages.Clone())
		bulk, err := st.Client().Task.Get(sys, bulkID)
		if err != nil {
			t.Fatal(err)
		}
		if bulk.Status != lifecycle.Executing || committed*page >= n {
			t.Fatalf("killed with %d of %d pages committed and the bulk task %s: the kill came too late to test a resumption", committed, n/page, bulk.Status)
		}
		cancelled := st.Client().Task.Query().Where(task.Owner("alice"), task.StatusEQ(lifecycle.Cancelled))
		if got := count("cancelled", cancelled.Clone()); got != committed*page {
			t.Fatalf("%d of alice's tasks cancelled after %d pages of %d: a page commits whole or not at all (the 5 cancelled before are in the first)", got, committed, page)
		}

		// Started again, the killed execution is recovered by its lease
		// and the next one resumes after the last committed page.
		start()
		var res struct {
			Task struct {
				Status string
				Result struct {
					Matched, Processed, Done, NotFound, Failed, Pages int
					Refused                                           map[string]int
				}
			}
		}
		waitUntil(t, 180*time.Second, func() bool {
			as("alice", `query($id: ID!) { task(id: $id) { status result } }`, map[string]any{"id": sub.BulkTaskAction.ID}, &res)
			return lifecycle.Status(res.Task.Status).Terminal()
		}, func() string {
			return "the bulk task did not finish after the restart: " + res.Task.Status + "\n" + stderr.String()
		})
		r := res.Task.Result
		if res.Task.Status != string(lifecycle.Success) || r.Matched != n || r.Processed != n || r.Done != n-5 ||
			r.NotFound+r.Failed != 0 || r.Pages != n/page || len(r.Refused) != 1 || r.Refused["CANCELLED"] != 5 {
			t.Fatalf("bulk task %s: %+v; want every one of %d tasks met once, in %d pages", res.Task.Status, r, n, n/page)
		}
		execs := count("executions", st.Client().TaskInstance.Query().Where(taskinstance.TaskID(bulkID)))
		if execs < 2 {
			t.Fatalf("the bulk task ran %d executions: the killed one and a resumed one expected", execs)
		}

		byStatus := func(owner string, s lifecycle.Status) int {
			return count(owner, st.Client().Task.Query().Where(task.Owner(owner), task.TypeEQ("noop"), task.StatusEQ(s)))
		}
		if got := byStatus("alice", lifecycle.Cancelled); got != n {
			t.Errorf("alice: %d cancelled, want %d", got, n)
		}
		if got := byStatus("alice", lifecycle.Pending); got != 7 {
			t.Errorf("alice: %d pending, want the 7 created after the submission", got)
		}
		if got := byStatus("bob", lifecycle.Pending); got != others {
			t.Errorf("bob: %d pending, want all %d untouched", got, others)
		}
		// Each task was cancelled once: one CANCELLED instance each.
		if got := count("instances", st.Client().TaskInstance.Query().Where(taskinstance.TaskType("noop"), taskinstance.StatusEQ(lifecycle.Cancelled))); got != n {
			t.Errorf("%d cancelled instances, want %d", got, n)
		}
		// Every page, across both executions, is one audit record acted
		// as alice and names at most a page of tasks, all told n.
		recs, err := pages.Clone().Select(auditlog.FieldTaskIds, auditlog.FieldActor).All(sys)
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[int]bool, n)
		for _, rec := range recs {
			if len(rec.TaskIds) > page || rec.Actor != "alice" {
				t.Fatalf("a page of %d tasks acted as %q", len(rec.TaskIds), rec.Actor)
			}
			for _, id := range rec.TaskIds {
				if seen[id] {
					t.Fatalf("task %d in two pages", id)
				}
				seen[id] = true
			}
		}
		if len(recs) != n/page || len(seen) != n {
			t.Errorf("%d pages naming %d tasks, want %d naming %d", len(recs), len(seen), n/page, n)
		}
	})
}
