package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestListenOnEveryDSNForm: the store and the listener open with a URL and
// with a key=value DSN, over TCP and over a Unix socket, and the listener
// receives another node's notification on each. The listener used to add
// its application_name as a URL query to whatever it was given, so that a
// key=value DSN named a host that does not exist, retried for ever.
func TestListenOnEveryDSNForm(t *testing.T) {
	t.Parallel()
	if dbtest.PostgresBase() == "" {
		t.Fatal("no PostgreSQL")
	}
	for _, f := range dbtest.PostgresForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			ctx := context.Background()
			st, err := store.Open(ctx, store.Config{DSN: f.DSN})
			require.NoError(t, err)
			access.Install(st.Client())
			defer st.Close()
			b := events.NewBroker(events.Config{Backlog: 100})
			defer b.Close()
			node := fmt.Sprintf("n%d", time.Now().UnixNano())
			l, err := Listen(ctx, Config{DSN: f.DSN, DB: st.DB(), Node: node, Client: st.Client(), Broker: b})
			require.NoError(t, err)
			defer l.Close()

			var channel string
			require.NoError(t, st.DB().QueryRowContext(ctx, "SELECT "+channelExpr).Scan(&channel))
			payload, err := json.Marshal(message{Node: "other", T: [][4]int64{{1, 1, 0, 0}}})
			require.NoError(t, err)
			_, err = st.DB().ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, string(payload))
			require.NoError(t, err)
			waitStats(t, l, func(s Stats) bool { return s.Received >= 1 })

			var named int
			require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, "taskgraph-relay-"+node).Scan(&named))
			require.Equal(t, 1, named, "the listening connection is named in pg_stat_activity")
		})
	}
}

// TestListenGivesUp: a listening connection that cannot be made ends
// Listen with an error (a refused connection at once, with its cause; a
// server that never answers when the context ends) instead of retrying
// for ever inside New, where a SIGTERM could not reach it.
func TestListenGivesUp(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresOnly(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DSN: dsn})
	require.NoError(t, err)
	access.Install(st.Client())
	t.Cleanup(func() { _ = st.Close() })
	b := events.NewBroker(events.Config{Backlog: 100})
	t.Cleanup(b.Close)

	t.Run("WhenTheConnectionIsRefused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		_, err = Listen(ctx, Config{DSN: fmt.Sprintf("host=127.0.0.1 port=%d dbname=none sslmode=disable", port), DB: st.DB(), Node: "a", Client: st.Client(), Broker: b})
		require.Error(t, err)
		require.Contains(t, err.Error(), fmt.Sprintf("127.0.0.1:%d", port))
	})
	t.Run("WhenTheContextEndsWhileTheServerSaysNothing", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		accepted := make(chan net.Conn, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c // held open, never answered
			}
		}()
		lctx, cancel := context.WithCancelCause(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := Listen(lctx, Config{DSN: "postgres://u@" + ln.Addr().String() + "/none?sslmode=disable", DB: st.DB(), Node: "a", Client: st.Client(), Broker: b})
			done <- err
		}()
		c := <-accepted // Listen is waiting on the silent server
		defer c.Close()
		stop := errors.New("shutting down")
		cancel(stop)
		require.ErrorIs(t, <-done, stop)
	})
}
