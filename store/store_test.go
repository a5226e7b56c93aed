package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"taskgraph/internal/dbtest"
	"taskgraph/lifecycle"
	"taskgraph/store"
)

func TestSmoke(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, err := store.Open(ctx, store.Config{DSN: dsn})
		require.NoError(t, err)
		defer s.Close()
		tk, created, err := s.CreateTask(ctx, store.NewTask{Type: "noop", Owner: "u", Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 30, RetryPolicy: "default", MaxAttempts: 3})
		require.NoError(t, err)
		require.True(t, created)
		t.Logf("task id %d code %s", tk.ID, tk.Code)
		cl, err := s.Claim(ctx, "w1", []string{"noop"}, 10)
		require.NoError(t, err)
		require.Len(t, cl, 1)
		t.Logf("instance id %d", cl[0].Instance.ID)
		require.Equal(t, lifecycle.Executing, cl[0].Task.Status)
		errs, err := s.Finish(ctx, []store.Outcome{{Token: cl[0].Token(), Status: lifecycle.Success, Result: json.RawMessage(`{"ok":true}`)}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		got, err := s.TaskByID(ctx, tk.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Success, got.Status)
		require.JSONEq(t, `{"ok":true}`, string(got.Result))
		require.NotNil(t, got.FinishedAt)
	})
}
