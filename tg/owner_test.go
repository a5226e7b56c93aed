package tg_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/tg"
)

// TestOnBehalfOf: a task created on behalf of a user of the API is theirs:
// they read it, another user of their tenant does not, the program does;
// an owner without a user or a known source is refused. SQLite (the rule
// is the access package's, tested on both databases there).
func TestOnBehalfOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := tg.New(ctx, tg.Config{Database: dbtest.SQLite(t), DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(sctx))
	})
	alice := tg.OnBehalfOf(ctx, tg.Owner{Source: "token", Tenant: "acme", User: "alice"})
	bob := tg.OnBehalfOf(ctx, tg.Owner{Source: "token", Tenant: "acme", User: "bob"})
	task, err := c.Create(alice, "noop", map[string]any{}, tg.Title("alice's"))
	require.NoError(t, err)
	require.Equal(t, "alice", task.Owner)
	require.Equal(t, "acme", task.Tenant)
	_, err = c.Task(alice, task.ID)
	require.NoError(t, err)
	_, err = c.Task(bob, task.ID)
	var nf *tg.NotFoundError
	require.ErrorAs(t, err, &nf, "another operator does not see it")
	_, err = c.Task(ctx, task.ID)
	require.NoError(t, err, "the program sees every task")
	_, err = c.Cancel(bob, task.ID, "not mine")
	require.ErrorAs(t, err, &nf)

	var ve *tg.ValidationError
	_, err = c.Create(tg.OnBehalfOf(ctx, tg.Owner{Source: "token"}), "noop", nil)
	require.ErrorAs(t, err, &ve)
	_, err = c.Create(tg.OnBehalfOf(ctx, tg.Owner{Source: "ldap", User: "carol"}), "noop", nil)
	require.ErrorAs(t, err, &ve)
	require.Contains(t, ve.Error(), `"ldap" is not token, jwt or local`)
}
