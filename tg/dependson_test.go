package tg_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

type credentialed struct {
	N        int    `json:"n"`
	Password string `json:"password"`
}

// A task created with DependsOn gets its parent's result (by id, and by
// code), as the parent's result is stored and shown: masked.
func TestATaskAfterExistingOnesGetsTheirResultsMasked(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		src, err := tg.Register(c, "dep.src", func(ctx context.Context, job *tg.Job, in count) (credentialed, error) {
			return credentialed{N: in.N, Password: "hunter2"}, nil
		})
		require.NoError(t, err)
		type seen struct {
			byID, byCode credentialed
			outcomes     map[string]tg.ParentOutcome
		}
		got := make(chan seen, 2)
		child, err := tg.Register(c, "dep.child", func(ctx context.Context, job *tg.Job, in struct{}) (struct{}, error) {
			var s seen
			s.outcomes = job.ParentOutcomes()
			for _, o := range s.outcomes {
				var err error
				if s.byID, err = tg.ParentResultOf[credentialed](job, o.ID); err != nil {
					return struct{}{}, tg.NonRetryable(err)
				}
				if s.byCode, err = tg.ParentResult[credentialed](job, o.Code); err != nil {
					return struct{}{}, tg.NonRetryable(err)
				}
			}
			got <- s
			return struct{}{}, nil
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Stop(ctx) })

		parent, err := src.Create(ctx, count{N: 5})
		require.NoError(t, err)
		after, err := child.Create(ctx, struct{}{}, tg.DependsOn(parent.ID))
		require.NoError(t, err)
		done, err := c.Wait(ctx, after.ID)
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status, done.LastError)
		s := <-got
		require.Len(t, s.outcomes, 1)
		shown, err := c.Task(ctx, parent.ID)
		require.NoError(t, err)
		o := s.outcomes[shown.Code]
		require.Equal(t, parent.ID, o.ID)
		require.Equal(t, tgtype.Success, o.Status)
		var stored credentialed
		require.NoError(t, json.Unmarshal(shown.Result, &stored))
		require.Equal(t, 5, s.byID.N)
		require.NotEqual(t, "hunter2", stored.Password, "the stored result is masked")
		require.Equal(t, stored, s.byID, "the child gets the result as stored and shown")
		require.Equal(t, stored, s.byCode)

		// A task without parents has no outcomes.
		plain, err := child.Create(ctx, struct{}{})
		require.NoError(t, err)
		_, err = c.Wait(ctx, plain.ID)
		require.NoError(t, err)
		require.Nil(t, (<-got).outcomes)
	})
}
