package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"taskgraph/access"
	"taskgraph/auth"
	"taskgraph/internal/dbtest"
	"taskgraph/lifecycle"
	"taskgraph/store"
)

// TestABatchThatTheDatabaseRefusesFailsOnlyItsBadOutcome gives the flusher
// a batch in which one outcome is refused by the database for good (a
// result PostgreSQL cannot read as JSON): it is split until that outcome is
// alone, the others are written, and nothing is retried for ever.
func TestABatchThatTheDatabaseRefusesFailsOnlyItsBadOutcome(t *testing.T) {
	t.Parallel()
	ctx := auth.NewSystemContext(context.Background())
	s, err := store.Open(ctx, store.Config{DSN: dbtest.PostgresOnly(t)})
	require.NoError(t, err)
	access.Install(s.Client())
	t.Cleanup(func() { _ = s.Close() })
	batch := make([]store.NewTask, 7)
	for i := range batch {
		batch[i] = store.NewTask{Type: "noop", Owner: "o", Input: json.RawMessage(`{}`), InputHash: "h", TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
	}
	_, err = s.CreateTasks(ctx, batch)
	require.NoError(t, err)
	cl, err := s.Claim(ctx, "w", []string{"noop"}, 10)
	require.NoError(t, err)
	require.Len(t, cl, 7)
	outcomes := make([]store.Outcome, len(cl))
	for i, c := range cl {
		outcomes[i] = store.Outcome{Token: c.Token(), Status: lifecycle.Success, Task: c.Task}
	}
	outcomes[4].Result = json.RawMessage(`{"not json`)

	f := newFlusher(s, slog.New(slog.NewTextHandler(io.Discard, nil)), FlushIntervalDefault, 16)
	errs, done, err := f.write(ctx, outcomes)
	require.NoError(t, err, "a refusal for good is not a transient failure")
	require.Equal(t, len(outcomes), done)
	for i, e := range errs {
		if i == 4 {
			require.Error(t, e)
			continue
		}
		require.NoError(t, e)
		tk, err := s.TaskByID(ctx, cl[i].Task.ID)
		require.NoError(t, err)
		require.Equal(t, lifecycle.Success, tk.Status)
	}
	tk, err := s.TaskByID(ctx, cl[4].Task.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.Executing, tk.Status, "left for the watchdog")
}

func TestDBTextIsStorable(t *testing.T) {
	require.Equal(t, "a\uFFFDb\uFFFDc", dbText("a\x00b\xffc"))
	require.Equal(t, "plain", dbText("plain"))
}
