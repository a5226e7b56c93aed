package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/auditlog"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
)

// tally counts what a load test did, by action and outcome.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(action auditlog.Action, err error) {
	outcome := auditlog.OutcomeOK
	if err != nil {
		outcome = auditlog.OutcomeFAILED
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[string(action)+" "+string(outcome)]++
}

// TestNoAuditRecordIsLost runs creates, idempotent replays, refused
// creates, cancels, retries, bulk cancels and downloads from many
// goroutines while workers run tasks (on SQLite, every one of them a writer
// of the one database file), and compares what was done with what the
// audit log says: one record per action, none lost to a busy database.
func TestNoAuditRecordIsLost(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{}, func(c *app.Config) { c.Access.RateLimit = 0 })
		ctx := auth.NewContext(context.Background(), auth.Local)
		a, err := s.App.Artifacts.Save(ctx, artifact.Meta{Owner: auth.Local.User, Kind: artifact.KindExport, Filename: "x.csv", ContentType: "text/csv"}, strings.NewReader("a,b\n1,2\n"))
		require.NoError(t, err)
		link := s.URL + s.App.Links.Sign(a, auth.Local).Path

		done := tally{n: map[string]int{}}
		later := time.Now().Add(time.Hour)
		var wg sync.WaitGroup
		var seq atomic.Int64
		for g := range 4 {
			wg.Go(func() {
				for i := range 20 {
					n := seq.Add(1)
					// Work for the workers: short tasks that run now, so that
					// claims and completions write all along.
					_, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop", Input: []byte(`{"sleepMs": 5}`)})
					done.add(auditlog.ActionCREATE, err)
					waiting, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop", RunAt: &later,
						IdempotencyKey: ptr(fmt.Sprintf("k-%d-%d", g, i%5))}) // every fifth is a replay
					done.add(auditlog.ActionCREATE, err)
					_, err = s.App.Engine.Create(ctx, engine.CreateRequest{Type: "rocket"})
					assert.Error(t, err) // (not require: this is not the test's goroutine)
					done.add(auditlog.ActionCREATE, err)
					if waiting != nil && waiting.Status == lifecycle.Pending {
						_, err = s.App.Engine.Cancel(ctx, waiting.ID, "load")
						done.add(auditlog.ActionCANCEL, err)
					}
					_, err = s.App.Engine.Retry(ctx, int(900000+n))
					done.add(auditlog.ActionRETRY, err)
					res, err := s.App.Engine.CancelMany(ctx, []int{int(800000 + n), int(800001 + n)}, "")
					if !assert.NoError(t, err) {
						return
					}
					done.add(auditlog.ActionCANCEL_MANY, res[0].Err) // all failed: FAILED
					resp, err := http.Get(link)
					if !assert.NoError(t, err) {
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					assert.Equal(t, http.StatusOK, resp.StatusCode)
					done.add(auditlog.ActionDOWNLOAD, nil)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}

		sys := auth.NewSystemContext(context.Background())
		var rows []struct {
			Action  auditlog.Action  `json:"action"`
			Outcome auditlog.Outcome `json:"outcome"`
			Count   int              `json:"count"`
		}
		require.NoError(t, s.App.Store.Client().AuditLog.Query().GroupBy(auditlog.FieldAction, auditlog.FieldOutcome).Aggregate(ent.Count()).Scan(sys, &rows))
		recorded := map[string]int{}
		for _, r := range rows {
			recorded[string(r.Action)+" "+string(r.Outcome)] = r.Count
		}
		require.Equal(t, done.n, recorded, "every action has exactly one record")

		// Every task has the record of its creation, with its id.
		tasks, err := s.App.Store.Client().Task.Query().Count(sys)
		require.NoError(t, err)
		creates, err := s.App.Store.Client().AuditLog.Query().Where(auditlog.ActionEQ(auditlog.ActionCREATE), auditlog.OutcomeEQ(auditlog.OutcomeOK)).All(sys)
		require.NoError(t, err)
		ids := map[int]bool{}
		for _, r := range creates {
			if existing, _ := r.Details["existing"].(bool); !existing {
				require.Len(t, r.TaskIds, 1)
				require.False(t, ids[r.TaskIds[0]], "task %d recorded twice", r.TaskIds[0])
				ids[r.TaskIds[0]] = true
			}
		}
		require.Len(t, ids, tasks)
	})
}

// TestAnActionWhoseRecordCannotBeWrittenFails breaks the audit table: the
// actions that would change something fail and change nothing; a download
// is not served.
func TestAnActionWhoseRecordCannotBeWrittenFails(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := apptest.Start(t, dsn, app.Options{})
		ctx := auth.NewContext(context.Background(), auth.Local)
		sys := auth.NewSystemContext(context.Background())
		later := time.Now().Add(time.Hour)
		waiting, err := s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop", RunAt: &later})
		require.NoError(t, err)
		a, err := s.App.Artifacts.Save(ctx, artifact.Meta{Owner: auth.Local.User, Kind: artifact.KindExport, Filename: "x.csv", ContentType: "text/csv"}, strings.NewReader("x"))
		require.NoError(t, err)
		link := s.URL + s.App.Links.Sign(a, auth.Local).Path

		db := s.App.Store.DB()
		_, err = db.Exec(`ALTER TABLE audit_logs RENAME TO audit_logs_away`)
		require.NoError(t, err)

		_, err = s.App.Engine.Create(ctx, engine.CreateRequest{Type: "noop", RunAt: &later})
		require.Error(t, err)
		_, err = s.App.Engine.Cancel(ctx, waiting.ID, "")
		require.Error(t, err)
		res, err := s.App.Engine.CancelMany(ctx, []int{waiting.ID}, "")
		require.Error(t, err, "the whole bulk action fails with its record")
		require.Empty(t, res)
		resp, err := http.Get(link)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.NotEqual(t, "x", string(body), "the file is not served unrecorded")

		n, err := s.App.Store.Client().Task.Query().Count(sys)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the failed create created nothing")
		tk, err := s.App.Store.TaskByID(sys, waiting.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Pending, tk.Status, "the failed cancels changed nothing")

		_, err = db.Exec(`ALTER TABLE audit_logs_away RENAME TO audit_logs`)
		require.NoError(t, err)
		_, err = s.App.Engine.Cancel(ctx, waiting.ID, "")
		require.NoError(t, err)
		recs, err := s.App.Store.Client().AuditLog.Query().All(sys)
		require.NoError(t, err)
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Action)+" "+string(r.Outcome))
		}
		require.Equal(t, []string{"CREATE OK", "CANCEL OK"}, got, "what failed with its record left none (the log says why)")
	})
}
