package app_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/app"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlags(t *testing.T) {
	t.Parallel()
	t.Run("DefaultsServeSQLiteOnLoopback", func(t *testing.T) {
		t.Parallel()
		c, err := app.ParseFlags(nil, env(nil), io.Discard)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:8080", c.Addr)
		require.Equal(t, "data/taskgraph.db", c.DSN())
		require.Equal(t, []app.Role{app.RoleAPI, app.RoleWatchdog, app.RoleWorker}, c.Roles)
		require.Equal(t, 16, c.Workers)
		require.Equal(t, 10*time.Second, c.ShutdownGrace)
		require.Equal(t, slog.LevelInfo, c.LogLevel)
	})
	t.Run("EnvironmentTwinsAndFlagsWin", func(t *testing.T) {
		t.Parallel()
		e := env(map[string]string{"TASKGRAPH_ADDR": "127.0.0.1:9", "TASKGRAPH_WORKERS": "3", "TASKGRAPH_DB": "postgres://x@y/z", "TASKGRAPH_ROLE": "watchdog"})
		c, err := app.ParseFlags([]string{"-workers", "5"}, e, io.Discard)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:9", c.Addr)
		require.Equal(t, 5, c.Workers, "the flag wins")
		require.Equal(t, "postgres://x@y/z", c.DSN())
		require.Equal(t, []app.Role{app.RoleWatchdog}, c.Roles)
	})
	t.Run("BadValuesAreRefusedWithTheFlagNamed", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"-workers", "many"}, {"-workers", "0"}, {"-role", "boss"}, {"-addr", "nowhere"},
			{"-shutdown-grace", "soon"}, {"-heartbeat-timeout", "1s"}, {"-log-level", "loud"}, {"-playground", "maybe"}, {"-nope"}, {"extra"},
		} {
			_, err := app.ParseFlags(args, env(nil), io.Discard)
			require.Error(t, err, "%v", args)
			if args[0] != "-nope" && args[0] != "extra" {
				require.Contains(t, err.Error(), args[0], "the error names the flag")
			}
		}
	})
	t.Run("RolesCombine", func(t *testing.T) {
		t.Parallel()
		c, err := app.ParseFlags([]string{"-role", "worker, api,worker"}, env(nil), io.Discard)
		require.NoError(t, err)
		require.Equal(t, []app.Role{app.RoleAPI, app.RoleWorker}, c.Roles)
		require.True(t, c.Has(app.RoleWorker))
		require.False(t, c.Has(app.RoleWatchdog))
	})
}
