//go:build long

package reliability

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// smallDisk mounts a size-limited tmpfs on a new temporary directory and
// unmounts it when the test ends (after everything registered later, such
// as the node using it). Mounting needs root: without it the test is
// skipped, saying so; as root a failure to mount fails the test.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "taskgraph-disk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		_ = os.Remove(dir)
		if os.Geteuid() != 0 {
			t.Skipf("mounting a small filesystem needs root (%v); CI runs this test as root", err)
		}
		t.Fatalf("mount a %d-byte tmpfs: %v", size, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		_ = os.Remove(dir)
	})
	return dir
}

// fill writes path until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}

// TestDiskFull fills the disk of a SQLite node (its data directory on a
// small tmpfs) while it works and is watched: requests then fail with
// UNAVAILABLE (reason "disk full"), never INTERNAL; /readyz says the node
// is not ready; a handler whose write fails on the full disk fails with
// error kind RESOURCE. Once space is freed the node is ready again and
// everything finishes: every task it created has its audit record, every
// watcher sees every final state, the database is intact.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, 48<<20)
	logs := &syncBuffer{}
	release := make(chan struct{})
	spilled := make(chan error, 1) // the first attempt's write
	opts := app.Options{
		Register: func(r *tasktype.Registry) {
			// spill writes a file next to the database, once released.
			tasktype.Register(r, "spill", func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
				select {
				case <-release:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("spill-%d", job.Instance.ID)), make([]byte, 256<<10), 0o600)
				if job.Attempt() == 1 {
					spilled <- err
				}
				return err
			})
		},
		Policies: append(tasktype.DefaultPolicies(), reliablePolicy),
		Logger:   nodeOptions(nil, logs).Logger,
	}
	s := apptest.Start(t, filepath.Join(dir, "taskgraph.db"), opts, func(c *app.Config) { c.DataDir = dir })
	ctx, cancel := context.WithCancel(context.Background())
	watchers := []*watcher{startWatcher(ctx, "sse", s, true, "df-"), startWatcher(ctx, "ws", s, false, "df-")}
	t.Cleanup(func() { cancel(); stop(watchers) })
	waitStarted(t, watchers...)
	s.WaitSubscribers(t, 2)

	create := func(title, typ string) apptest.Response {
		return s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"type": typ, "title": title, "retryPolicy": reliablePolicy.Name}})
	}
	for i := range 20 {
		if r := create(fmt.Sprintf("df-%d", i), "noop"); len(r.Errors) > 0 {
			t.Fatalf("before the disk is full: %+v", r.Errors)
		}
	}
	if r := create("df-spill", "spill"); len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "taskgraph.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cnt := counter{t, db}
	waitFor(t, "the spill task running", 30*time.Second, func() (bool, error) {
		n, err := cnt.try(`SELECT count(*) FROM tasks WHERE title = 'df-spill' AND status = 'EXECUTING'`)
		return err == nil && n == 1, err
	})

	fill(t, filepath.Join(dir, "filler"))
	t.Log("the disk is full")
	full := 0
	for i := 0; full < 5; i++ {
		if i == 2000 {
			t.Fatal("2,000 creates on a full disk all succeeded")
		}
		r := create(fmt.Sprintf("df-full-%d", i), "noop")
		if len(r.Errors) == 0 {
			continue // room was left in the database's own pages
		}
		e := r.Errors[0]
		if e.Code() != "UNAVAILABLE" || e.Extensions["reason"] != "disk full" || e.Extensions["retryable"] != true {
			t.Fatalf("on a full disk: %+v, want UNAVAILABLE (disk full, retryable)", r.Errors)
		}
		full++
	}
	waitFor(t, "unready on a full disk", 30*time.Second, func() (bool, error) {
		status, _, err := get(s.URL + "/readyz")
		return status == http.StatusServiceUnavailable, err
	})
	close(release) // the handler's write now fails: no space left
	select {
	case err := <-spilled:
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("the handler's write on a full disk: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never wrote")
	}

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	t.Log("space freed")
	waitFor(t, "ready again", time.Minute, func() (bool, error) {
		status, _, err := get(s.URL + "/readyz")
		return status == http.StatusOK, err
	})
	for i := range 20 {
		if r := create(fmt.Sprintf("df-after-%d", i), "noop"); len(r.Errors) > 0 {
			t.Fatalf("after space was freed: %+v", r.Errors)
		}
	}
	waitFor(t, "every task finished", 2*time.Minute, func() (bool, error) {
		n, err := cnt.try(`SELECT count(*) FROM tasks WHERE status NOT IN ('SUCCESS', 'FAILED', 'CANCELLED')`)
		return err == nil && n == 0, err
	})
	if n := cnt.n(`SELECT count(*) FROM tasks WHERE status <> 'SUCCESS'`); n != 0 {
		t.Errorf("%d tasks did not succeed", n)
	}
	// The spill task's first attempt met the full disk: RESOURCE.
	var kind string
	if err := db.QueryRow(`SELECT i.error_kind FROM task_instances i JOIN tasks t ON t.id = i.task_id WHERE t.title = 'df-spill' AND i.instance_no = 1`).Scan(&kind); err != nil {
		t.Fatal(err)
	}
	if kind != "RESOURCE" {
		t.Errorf("the spill handler's failure on a full disk is %q, want RESOURCE", kind)
	}

	// Every task has its CREATE record.
	sys := auth.NewSystemContext(context.Background())
	recs, err := s.App.Store.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionCREATE), auditlog.OutcomeEQ(auditlog.OutcomeOK)).All(sys)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[int]bool{}
	for _, r := range recs {
		for _, id := range r.TaskIds {
			recorded[id] = true
		}
	}
	ids, err := s.App.Store.Client().Task.Query().IDs(sys)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !recorded[id] {
			t.Errorf("task %d has no audit record of its creation", id)
		}
	}
	waitWatchers(t, watchers, finalStates(t, db, "df-"), time.Minute)
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity check: %q %v", check, err)
	}
	if n := logs.count(`msg="outage: `); n != 1 {
		t.Errorf("the full disk was logged as %d outages, want 1", n)
	}
	if n := logs.count("internal error"); n > 0 {
		t.Errorf("%d internal errors logged:\n%s", n, grep(logs.String(), "internal error"))
	}
	t.Logf("%d creates refused on the full disk; outage log:\n%s", full, grep(logs.String(), "outage"))
}
