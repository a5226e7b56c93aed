package app_test

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/worker"
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
		require.Equal(t, worker.ConcurrencyDefault, c.Workers)
		require.Equal(t, 10*time.Second, c.ShutdownGrace)
		require.Equal(t, slog.LevelInfo, c.LogLevel)
		require.False(t, c.Playground, "introspection and the playground are off unless enabled")
		require.True(t, c.Access.Open())
		require.Equal(t, 10.0, c.Access.RateLimit)
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
			{"-jwt-leeway", "forever"}, {"-trusted-proxies", "10.0.0.0/33"}, {"-allowed-origins", "console.example.com"},
			{"-gql-complexity", "1"}, {"-gql-depth", "deep"}, {"-ws-max-subscriptions", "0"}, {"-ws-max-connections", "-1"},
			{"-rate-limit", "fast"}, {"-rate-burst", "0"}, {"-max-upload-size", "big"}, {"-import-unzip-limit", "1KiB"},
			{"-artifact-ttl", "1s"}, {"-retention", "a month"}, {"-secret-key", "abc"}, {"-log-format", "xml"},
		} {
			_, err := app.ParseFlags(args, env(nil), io.Discard)
			require.Error(t, err, "%v", args)
			if args[0] != "-nope" && args[0] != "extra" {
				require.Contains(t, err.Error(), args[0], "the error names the flag")
				require.Regexp(t, `is not (a|an|all|true|text|debug|64|host)|=true or`, err.Error(), "the error says what the value should be")
			}
		}
	})
	t.Run("BadEnvironmentValuesAreRefusedWithTheVariableNamed", func(t *testing.T) {
		t.Parallel()
		_, err := app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_WORKERS": "many"}), io.Discard)
		require.EqualError(t, err, `TASKGRAPH_WORKERS: "many" is not a whole number between 1 and 10000`)
		_, err = app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_PLAYGROUND": "yes please"}), io.Discard)
		require.EqualError(t, err, `TASKGRAPH_PLAYGROUND: "yes please" is not true or false`)
		_, err = app.ParseFlags([]string{"--workers", "4"}, env(map[string]string{"TASKGRAPH_WORKERS": "many"}), io.Discard)
		require.NoError(t, err, "a flag on the command line replaces its variable")
	})
	t.Run("SecretsStayOutOfErrors", func(t *testing.T) {
		t.Parallel()
		_, err := app.ParseFlags([]string{"--secret-key", "s3cr3t-but-short"}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--secret-key")
		require.ErrorContains(t, err, "64 hex characters")
		require.NotContains(t, err.Error(), "s3cr3t")
	})
	t.Run("ABareBooleanNeedsNoValue", func(t *testing.T) {
		t.Parallel()
		c, err := app.ParseFlags([]string{"--playground", "--addr", "127.0.0.1:9"}, env(nil), io.Discard)
		require.NoError(t, err)
		require.True(t, c.Playground)
		require.Equal(t, "127.0.0.1:9", c.Addr, "the flag after the boolean is a flag, not its value")
		c, err = app.ParseFlags([]string{"--playground=false"}, env(map[string]string{"TASKGRAPH_PLAYGROUND": "true"}), io.Discard)
		require.NoError(t, err)
		require.False(t, c.Playground)
		c, err = app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_PLAYGROUND": "1"}), io.Discard)
		require.NoError(t, err)
		require.True(t, c.Playground)
	})
	t.Run("TypedValues", func(t *testing.T) {
		t.Parallel()
		c, err := app.ParseFlags([]string{"--artifact-ttl", "3d", "--retention", "720h", "--max-upload-size", "2GiB",
			"--import-unzip-limit", "10MB", "--rate-limit", "0.5", "--jwt-leeway", "0s", "--log-level", "debug"}, env(nil), io.Discard)
		require.NoError(t, err)
		require.Equal(t, 72*time.Hour, c.ArtifactTTL)
		require.Equal(t, 30*24*time.Hour, c.Retention)
		require.Equal(t, int64(2<<30), c.MaxUploadSize)
		require.Equal(t, int64(10_000_000), c.ImportUnzipLimit)
		require.Equal(t, 0.5, c.Access.RateLimit)
		require.Equal(t, time.Duration(0), c.Access.JWTLeeway)
		require.Equal(t, slog.LevelDebug, c.LogLevel)
	})
	t.Run("HelpListsEveryFlagTypedWithItsVariable", func(t *testing.T) {
		t.Parallel()
		var out strings.Builder
		_, err := app.ParseFlags([]string{"-h"}, env(nil), &out)
		require.ErrorIs(t, err, flag.ErrHelp)
		for _, want := range []string{"--workers int\n", "--playground\n", "--shutdown-grace duration\n", "--max-upload-size size\n",
			"(default 2000) [$TASKGRAPH_WORKERS]", "(default 50MiB)", "(default 7d)", "(default 10m) [$TASKGRAPH_JANITOR_INTERVAL]", "(default all)",
			"--token-file string\n"} {
			require.Contains(t, out.String(), strings.ReplaceAll(want, "\\n", "\n"))
		}
		require.Equal(t, 1, strings.Count(out.String(), "--workers"), "the usage is printed once")
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

func TestAnOpenServerListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.10:8080", "example.com:80"} {
		_, err := app.ParseFlags([]string{"-addr", addr}, env(nil), io.Discard)
		require.ErrorContains(t, err, "not a loopback address", addr)
		require.ErrorContains(t, err, "-token-file", "the error says how to fix it")
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
		_, err := app.ParseFlags([]string{"-addr", addr}, env(nil), io.Discard)
		require.NoError(t, err, addr)
	}
	c, err := app.ParseFlags([]string{"-addr", "0.0.0.0:8080"}, env(map[string]string{"TASKGRAPH_TOKEN_FILE": "/etc/taskgraph/tokens"}), io.Discard)
	require.NoError(t, err, "with authentication any address will do")
	require.False(t, c.Access.Open())
	c, err = app.ParseFlags([]string{"-addr", ":8080", "-jwt-rs256-key-file", "idp.pem", "-trusted-proxies", "10.0.0.0/8, 192.0.2.1",
		"-allowed-origins", "https://console.example.com", "-mask-keys", "iban, salary"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Len(t, c.Access.TrustedProxies, 2)
	require.Equal(t, "192.0.2.1/32", c.Access.TrustedProxies[1].String())
	require.Equal(t, []string{"iban", "salary"}, c.Access.MaskKeys)
}

func TestPlatformAdminsFlag(t *testing.T) {
	t.Parallel()
	c, err := app.ParseFlags([]string{"--platform-admins", "token:root, jwt:acme:alice"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []auth.Identity{{Source: "token", User: "root"}, {Source: "jwt", Tenant: "acme", User: "alice"}}, c.Access.PlatformAdmins)
	c, err = app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_PLATFORM_ADMINS": "jwt:ops"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []auth.Identity{{Source: "jwt", User: "ops"}}, c.Access.PlatformAdmins)
	for _, bad := range []string{"root", "ldap:root", "token:"} {
		_, err := app.ParseFlags([]string{"--platform-admins", bad}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--platform-admins", bad)
	}
}

func TestDatabaseFlag(t *testing.T) {
	t.Parallel()
	t.Run("AcceptsPostgreSQLAndSQLite", func(t *testing.T) {
		t.Parallel()
		for _, db := range []string{
			"postgres://postgres@127.0.0.1:5432/taskgraph?sslmode=disable",
			"postgresql://u:p@db/x",
			"host=127.0.0.1 port=5432 dbname=taskgraph user=postgres sslmode=disable",
			"dbname=x search_path=tg",
			"./data/other.db", "/var/lib/taskgraph/tasks.db", "file:tasks.db", "file:/tmp/x.db?mode=rwc", "sqlite://tasks.db", "tasks",
		} {
			c, err := app.ParseFlags([]string{"--db", db}, env(nil), io.Discard)
			require.NoError(t, err, db)
			require.Equal(t, db, c.DSN())
		}
	})
	t.Run("RefusesOtherDatabasesAndNearMissesWithASuggestion", func(t *testing.T) {
		t.Parallel()
		for db, want := range map[string]string{
			"mysql://root@127.0.0.1/x":         "mysql is not supported",
			"sqlserver://sa@db/x":              "sqlserver is not supported",
			"postgress://postgres@127.0.0.1/x": "did you mean postgres://postgres@127.0.0.1/x?",
			"postgre://u@h/x":                  "did you mean postgres://u@h/x?",
			"pg://u@h/x":                       "did you mean postgres://u@h/x?",
			"postgres:/u@h/x":                  "did you mean postgres://",
			"sqlite3://tasks.db":               "did you mean file:tasks.db?",
			"host=db dbnmae=x":                 `"dbnmae" is not a connection keyword; did you mean "dbname"?`,
			"postgres://u@h/x?sslmod=disable":  `did you mean "sslmode"?`,
			"host='db dbname=x":                "not a valid PostgreSQL DSN",
		} {
			_, err := app.ParseFlags([]string{"--db", db}, env(nil), io.Discard)
			require.ErrorContains(t, err, "--db: ", db)
			require.ErrorContains(t, err, want, db)
		}
		_, err := app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_DB": "mysql://x"}), io.Discard)
		require.ErrorContains(t, err, "TASKGRAPH_DB: ")
	})
}
