package app_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"taskgraph/app"
	"taskgraph/auth"
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
		require.Equal(t, 256, c.Workers)
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
			{"-rate-limit", "fast"}, {"-rate-burst", "0"},
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
	c, err := app.ParseFlags([]string{"-platform-admins", "token:root, jwt:acme:alice"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []auth.Identity{{Source: "token", User: "root"}, {Source: "jwt", Tenant: "acme", User: "alice"}}, c.Access.PlatformAdmins)
	c, err = app.ParseFlags(nil, env(map[string]string{"TASKGRAPH_PLATFORM_ADMINS": "jwt:ops"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []auth.Identity{{Source: "jwt", User: "ops"}}, c.Access.PlatformAdmins)
	for _, bad := range []string{"root", "ldap:root", "token:"} {
		_, err := app.ParseFlags([]string{"-platform-admins", bad}, env(nil), io.Discard)
		require.ErrorContains(t, err, "-platform-admins", bad)
	}
}
