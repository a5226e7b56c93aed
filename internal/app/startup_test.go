package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
)

// TestStartupProblemsNameWhatToFix checks the errors and warnings of a
// process that cannot start as configured: each names the flag (or file)
// to change.
func TestStartupProblemsNameWhatToFix(t *testing.T) {
	t.Parallel()
	base := func(t *testing.T) app.Config {
		c, err := app.ParseFlags([]string{"--data-dir", t.TempDir(), "--role", "api"}, func(string) string { return "" }, nil)
		require.NoError(t, err)
		return c
	}
	t.Run("ADataDirectoryThatCannotBeCreated", func(t *testing.T) {
		t.Parallel()
		c := base(t)
		file := filepath.Join(t.TempDir(), "a-file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		c.DataDir = filepath.Join(file, "data")
		_, err := app.New(context.Background(), c, app.Options{})
		require.ErrorContains(t, err, "data directory "+c.DataDir+": cannot create it (not a directory)")
		require.ErrorContains(t, err, "--data-dir")
		require.NotContains(t, err.Error(), "seal")
	})
	t.Run("AnUnreadableSecretKeyFile", func(t *testing.T) {
		t.Parallel()
		c := base(t)
		require.NoError(t, os.Mkdir(filepath.Join(c.DataDir, "secret.key"), 0o700)) // a directory: unreadable as a file
		_, err := app.New(context.Background(), c, app.Options{})
		require.ErrorContains(t, err, "the secret key file "+filepath.Join(c.DataDir, "secret.key"))
		require.ErrorContains(t, err, "--secret-key")
	})
	t.Run("ATrailingNewlineInTheHS256KeyFileIsSaid", func(t *testing.T) {
		t.Parallel()
		c := base(t)
		c.Access.JWTHS256KeyFile = filepath.Join(t.TempDir(), "hs256.key")
		require.NoError(t, os.WriteFile(c.Access.JWTHS256KeyFile, []byte(strings.Repeat("k", 32)+"\n"), 0o600))
		var logs bytes.Buffer
		a, err := app.New(context.Background(), c, app.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		require.Contains(t, logs.String(), "the HS256 key file ends with a line break, which is not part of the key")
		require.Contains(t, logs.String(), "key_bytes=32 file_bytes=33")
	})
	t.Run("AMissingKeyFileNamesItsFlag", func(t *testing.T) {
		t.Parallel()
		c := base(t)
		c.Access.JWTRS256KeyFile = filepath.Join(t.TempDir(), "missing.pem")
		_, err := app.New(context.Background(), c, app.Options{})
		require.ErrorContains(t, err, "--jwt-rs256-key-file: ")
	})
}
