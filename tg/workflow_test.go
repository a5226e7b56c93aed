package tg_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/tg"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

type count struct {
	N int `json:"n"`
}

// TestWorkflowHandsParentsResultsTyped: a diamond of typed steps; the join
// receives both parents' results by step key, runs once, after both.
// Both databases.
func TestWorkflowHandsParentsResultsTyped(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c, err := tg.New(ctx, tg.Config{Database: dsn, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		var mu sync.Mutex
		var joins []int
		_, err = tg.Register(c, "wf.source", func(ctx context.Context, job *tg.Job, in count) (count, error) {
			return count{N: in.N}, nil
		})
		require.NoError(t, err)
		join, err := tg.Register(c, "wf.join", func(ctx context.Context, job *tg.Job, in struct{}) (count, error) {
			b, err := tg.ParentResult[count](job, "b")
			if err != nil {
				return count{}, tg.NonRetryable(err)
			}
			cc, err := tg.ParentResult[count](job, "c")
			if err != nil {
				return count{}, tg.NonRetryable(err)
			}
			if _, err := tg.ParentResult[count](job, "nope"); !errors.Is(err, tg.ErrNoParentResult) {
				return count{}, tg.NonRetryable(err)
			}
			mu.Lock()
			joins = append(joins, b.N+cc.N)
			mu.Unlock()
			return count{N: b.N + cc.N}, nil
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Stop(ctx) })

		wf, err := c.CreateWorkflow(ctx, "diamond-1", "diamond", []tg.Step{
			{Key: "a", Type: "wf.source", Input: count{N: 1}},
			{Key: "b", Type: "wf.source", Input: count{N: 20}, DependsOn: []string{"a"}},
			{Key: "c", Type: "wf.source", Input: count{N: 300}, DependsOn: []string{"a"}},
			{Key: "d", Type: "wf.join", DependsOn: []string{"b", "c"}},
		})
		require.NoError(t, err)
		again, err := c.CreateWorkflow(ctx, "diamond-1", "diamond", []tg.Step{
			{Key: "a", Type: "wf.source", Input: count{N: 1}},
			{Key: "b", Type: "wf.source", Input: count{N: 20}, DependsOn: []string{"a"}},
			{Key: "c", Type: "wf.source", Input: count{N: 300}, DependsOn: []string{"a"}},
			{Key: "d", Type: "wf.join", DependsOn: []string{"b", "c"}},
		})
		require.NoError(t, err)
		require.Equal(t, wf.ID, again.ID, "the same key and definition: the same workflow")
		_, err = c.CreateWorkflow(ctx, "cyclic", "", []tg.Step{
			{Key: "a", Type: "wf.source", DependsOn: []string{"b"}},
			{Key: "b", Type: "wf.source", DependsOn: []string{"a"}},
		})
		var ve *tg.ValidationError
		require.ErrorAs(t, err, &ve)

		require.Len(t, wf.Steps, 4)
		done, err := c.Wait(ctx, wf.Steps["d"])
		require.NoError(t, err)
		require.Equal(t, tgtype.Success, done.Status, done.LastError)
		got, err := join.Result(done)
		require.NoError(t, err)
		require.Equal(t, 320, got.N)
		mu.Lock()
		require.Equal(t, []int{320}, joins, "the join ran once")
		mu.Unlock()
	})
}
