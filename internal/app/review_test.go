package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

type sealedIn struct {
	Phone    string `json:"phone"`
	Password string `json:"password"`
	Fail     bool   `json:"fail"`
}

// TestAnEditedSecretNeverShowsInPlaintext: a reviewer edits a sensitive
// field (a password, a phone number) of a task waiting for review: the
// diff says changed and shows neither value, and neither the old nor the
// new value is in clear in the API, the database, the logs, the events or
// the audit; the handler gets the new value unmasked (sealed).
func TestAnEditedSecretNeverShowsInPlaintext(t *testing.T) {
	t.Parallel()
	const oldPass, newPass, newPhone = "s3cr3t-before-edit", "s3cr3t-after-edit", "13587654321"
	dbtest.Run(t, func(t *testing.T, dsn string) {
		logs := &syncBuffer{}
		s := apptest.Start(t, dsn, app.Options{
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Register: func(r *tasktype.Registry) {
				tasktype.Register(r, "sealed", func(ctx context.Context, job *tasktype.Job, in sealedIn) error {
					job.Info("calling "+in.Phone+" with "+in.Password, "password", in.Password)
					if in.Fail {
						return tasktype.NeedsReview(errors.New("refused for "+in.Phone+" with "+in.Password), map[string]any{"phone": in.Phone, "password": in.Password})
					}
					return job.SetResult(map[string]any{"editSeen": in.Password == newPass, "numberSeen": in.Phone == newPhone})
				})
			},
		})
		all := s.App.Broker.SubscribeTasks(func(events.TaskChange) bool { return true }, 1024)
		defer all.Close()
		var api strings.Builder
		r := s.Do(t, `mutation($in: CreateTaskInput!) { createTask(input: $in) { id input } }`, map[string]any{"in": map[string]any{
			"type": "sealed", "input": map[string]any{"phone": phone, "password": oldPass, "fail": true}}})
		require.Empty(t, r.Errors)
		api.Write(r.Data)
		var created struct{ CreateTask struct{ ID string } }
		require.NoError(t, json.Unmarshal(r.Data, &created))
		id := created.CreateTask.ID
		status := func() string {
			var st struct{ Task struct{ Status string } }
			s.Query(t, `query($id: ID!) { task(id: $id) { status } }`, map[string]any{"id": id}, &st)
			return st.Task.Status
		}
		apptest.Eventually(t, 30*time.Second, func() (bool, string) { st := status(); return st == "REVIEW_PENDING", st })
		r = s.Do(t, `mutation($id: ID!, $in: JSON!) { editAndRetry(id: $id, input: $in, reason: "new credentials for `+newPass+`") { id input } }`,
			map[string]any{"id": id, "in": map[string]any{"phone": newPhone, "password": newPass, "fail": false}})
		require.Empty(t, r.Errors)
		api.Write(r.Data)
		apptest.Eventually(t, 30*time.Second, func() (bool, string) { st := status(); return st == "SUCCESS", st })

		r = s.Do(t, `query($id: ID!) { task(id: $id) { input result lastError
			review { reason evidence decisionReason } reviews { reason evidence }
			inputVersions { input reason diff { path kind before after masked } }
			instances { lastError } logs { edges { node { message fields } } } }
			auditLogs(where: {taskID: $id}) { edges { node { action details } } } }`, map[string]any{"id": id})
		require.Empty(t, r.Errors)
		api.Write(r.Data)
		var got struct {
			Task struct {
				Result        map[string]bool
				InputVersions []struct {
					Diff []struct {
						Path, Kind    string
						Before, After json.RawMessage
						Masked        bool
					}
				}
			}
		}
		require.NoError(t, json.Unmarshal(r.Data, &got))
		require.Equal(t, map[string]bool{"editSeen": true, "numberSeen": true}, got.Task.Result, "the handler got the edit unmasked")
		require.Len(t, got.Task.InputVersions, 2)
		diff := map[string]string{}
		for _, c := range got.Task.InputVersions[1].Diff {
			require.True(t, c.Masked || c.Path == "/fail", "%+v", c)
			diff[c.Path] = c.Kind + " " + string(c.Before) + " " + string(c.After)
		}
		require.Equal(t, map[string]string{"/fail": "CHANGED true false", "/password": "CHANGED null null", "/phone": "CHANGED null null"}, diff)

		var evs strings.Builder
		for len(all.C) > 0 {
			c := <-all.C
			b, err := json.Marshal(c.Task)
			require.NoError(t, err)
			evs.Write(b)
		}
		dump := dumpDatabase(t, s.App.Store.DB(), s.App.Store.Postgres())
		require.Contains(t, dump, "REVIEW_EDIT", "the dump holds the audit")
		require.Contains(t, dump, "139****5678", "the dump holds the masked versions")
		require.Contains(t, evs.String(), "REVIEW_PENDING", "events were captured")
		require.Contains(t, logs.String(), "review", "the log was captured")
		for where, text := range map[string]string{"database": dump, "API": api.String(), "events": evs.String(), "log": logs.String()} {
			for _, secret := range []string{phone, oldPass, newPass, newPhone} {
				require.NotContains(t, text, secret, "%s shows %s in plaintext", where, secret)
			}
		}
	})
}
