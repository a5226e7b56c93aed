package tg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

// A cleanup step runs after its parents whatever they did, and receives
// each one's outcome: a result, an error, a cancel's reason.
func TestACleanupStepReceivesItsParentsOutcomes(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		_, err = tg.Register(c, "ra.ok", func(ctx context.Context, job *tg.Job, in count) (count, error) { return in, nil })
		require.NoError(t, err)
		_, err = tg.Register(c, "ra.bad", func(ctx context.Context, job *tg.Job, in struct{}) (struct{}, error) {
			return struct{}{}, tg.NonRetryable(errors.New("quota exceeded"))
		})
		require.NoError(t, err)
		got := make(chan map[string]tg.ParentOutcome, 1)
		_, err = tg.Register(c, "ra.cleanup", func(ctx context.Context, job *tg.Job, in struct{}) (struct{}, error) {
			got <- job.ParentOutcomes()
			return struct{}{}, nil
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Stop(ctx) })

		wf, err := c.CreateWorkflow(ctx, "", "with cleanup", []tg.Step{
			{Key: "load", Type: "ra.ok", Input: count{N: 7}},
			{Key: "push", Type: "ra.bad", DependsOn: []string{"load"}},
			{Key: "notify", Type: "ra.ok", Input: count{N: 1}, DependsOn: []string{"push"}},
			{Key: "cleanup", Type: "ra.cleanup", DependsOn: []string{"load", "push", "notify"}, OnParentFailure: "RUN_ANYWAY"},
		})
		require.NoError(t, err)
		done, err := c.Wait(ctx, wf.Steps["cleanup"])
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status, done.LastError)
		out := <-got
		require.Len(t, out, 3)
		require.Equal(t, tgtype.Success, out["load"].Status)
		require.JSONEq(t, `{"n":7}`, string(out["load"].Result))
		require.Empty(t, out["load"].Error)
		require.Equal(t, tgtype.Failed, out["push"].Status)
		require.Equal(t, "quota exceeded", out["push"].Error)
		require.Equal(t, tgtype.Cancelled, out["notify"].Status)
		push, err := c.Task(ctx, wf.Steps["push"])
		require.NoError(t, err)
		require.Equal(t, "parent "+push.Code+" failed", out["notify"].Error)
	})
}

// 100,001 steps: a typed error naming the limit, and nothing created.
func TestAWorkflowOfAHundredThousandStepsIsRefused(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Stop(ctx) })
		steps := make([]tg.Step, 100_001)
		for i := range steps {
			steps[i] = tg.Step{Key: fmt.Sprintf("s%d", i), Type: "noop"}
			if i > 0 {
				steps[i].DependsOn = []string{steps[i-1].Key}
			}
		}
		_, err = c.CreateWorkflow(ctx, "big", "", steps)
		var ve *tg.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Contains(t, err.Error(), "100001 steps; the limit is 10000")
		var n int
		require.NoError(t, c.DB().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM tasks) + (SELECT COUNT(*) FROM workflows)`).Scan(&n))
		require.Zero(t, n, "nothing was created")
	})
}
