package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPingsDoNotStopDelivery: the listener pings its connection while a
// flood of notifications arrives on it, and delivers every one. pq answers
// a ping only after the notifications received before it: a ping made by
// the goroutine that drains them waited for ever once more than the
// notification channel holds had arrived (seen under 10,000 transactions
// of callers creating tasks, each notifying every node).
func TestPingsDoNotStopDelivery(t *testing.T) {
	t.Parallel()
	b := setupResync(t, 1, Config{PingInterval: time.Millisecond})
	ctx := context.Background()
	var channel string
	require.NoError(t, b.store.DB().QueryRowContext(ctx, "SELECT "+channelExpr).Scan(&channel))
	const n = 2000
	for sent := 0; sent < n; sent += 100 {
		var q strings.Builder
		q.WriteString("SELECT ")
		for i := range 100 {
			if i > 0 {
				q.WriteString(", ")
			}
			// Each its own: PostgreSQL delivers one of identical payloads
			// sent in one transaction.
			payload, err := json.Marshal(message{Node: "other", T: [][4]int64{{1, int64(sent + i + 1), 0, 0}}})
			require.NoError(t, err)
			fmt.Fprintf(&q, "pg_notify('%s', '%s')", channel, payload)
		}
		_, err := b.store.DB().ExecContext(ctx, q.String())
		require.NoError(t, err)
	}
	waitStats(t, b.l, func(s Stats) bool { return s.Received >= n })
}
