package mask_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/mask"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(mask.NewHandler(slog.NewJSONHandler(&buf, nil), mask.Default()))
	log = log.With("dsn", "postgres://app:hunter2@db/x")
	log.Info("calling 13912345678 about tel_13812345678",
		"phone", int64(13700001111),
		"err", errors.New("refused by alice@intranet"),
		"password", "hunter3",
		slog.Group("req", "url", "https://h/?pwd=hunter4", "headers", map[string]any{"X-Access-Key": "hunter5"}),
		"count", 3,
		"artifact_id", int64(17179869186),
	)
	out := buf.String()
	for _, secret := range []string{"13912345678", "13812345678", "13700001111", "alice@intranet", "hunter2", "hunter3", "hunter4", "hunter5"} {
		require.NotContains(t, out, secret)
	}
	for _, kept := range []string{`"count":3`, `"msg":"calling 139****5678 about tel_138****5678"`, `"password":"******"`, `"phone":"137****1111"`, `app:******@db`, `"artifact_id":17179869186`} {
		require.Contains(t, out, kept)
	}
}
