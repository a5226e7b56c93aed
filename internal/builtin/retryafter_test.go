package builtin

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		value, date string
		want        time.Duration
		ok          bool
	}{
		{"2", "", 2 * time.Second, true},
		{" 120 ", "", 2 * time.Minute, true},
		{"0", "", 0, true},
		{"Mon, 30 Nov 2026 12:00:30 GMT", "", 30 * time.Second, true},
		// Against the reply's own Date, not this clock.
		{"Mon, 30 Nov 2026 12:00:30 GMT", "Mon, 30 Nov 2026 12:00:25 GMT", 5 * time.Second, true},
		{"Mon, 30 Nov 2026 11:00:00 GMT", "", 0, true},
		{"Monday, 30-Nov-26 12:01:00 GMT", "", time.Minute, true},
		{"-1", "", 0, false},
		{"soon", "", 0, false},
		{"", "", 0, false},
		{"99999999999999999999", "", 0, false},
	} {
		d, ok := parseRetryAfter(c.value, c.date, now)
		require.Equal(t, c.ok, ok, c.value)
		require.Equal(t, c.want, d, c.value)
	}
	resp := &http.Response{Header: http.Header{"Retry-After": {"2"}}}
	err := withRetryAfter(tasktype.Resource(errors.New("POST x answered 429 Too Many Requests")), resp)
	d, ok := tasktype.RetryAfterOf(err)
	require.True(t, ok)
	require.Equal(t, 2*time.Second, d)
	require.Equal(t, lifecycle.KindResource, tasktype.Classify(err))
	require.Contains(t, err.Error(), "Retry-After 2s")
}
