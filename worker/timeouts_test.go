package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// limitStore records how long each hot-path call was given: a call without
// a deadline could hang the pool on a database that stopped answering (a
// half-open connection, a lock never released).
type limitStore struct {
	*fakeStore
	given chan callLimit
}

type callLimit struct {
	call string
	left time.Duration // time.Duration(-1): no deadline
}

func (s *limitStore) record(ctx context.Context, call string) {
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	select {
	case s.given <- callLimit{call, left}:
	default:
	}
}

func (s *limitStore) ClaimEach(ctx context.Context, node string, types []string, caps []int, limit int) ([]store.Claimed, error) {
	s.record(ctx, "claim")
	return s.fakeStore.ClaimEach(ctx, node, types, caps, limit)
}

func (s *limitStore) Pulse(ctx context.Context, p []store.Pulse) (store.Beat, error) {
	s.record(ctx, "heartbeat")
	return s.fakeStore.Pulse(ctx, p)
}

func (s *limitStore) Finish(ctx context.Context, batch []store.Outcome) ([]error, error) {
	s.record(ctx, "finish")
	return s.fakeStore.Finish(ctx, batch)
}

// Every call of the pool and the flusher to the database has a time limit:
// the claim claimTimeout, a heartbeat its interval, a flush
// flushCallTimeout. (What a failed call becomes — a wait and a retry, an
// outage counted — is tested with the fetch loop and the flusher.)
func TestHotPathCallsHaveATimeLimit(t *testing.T) {
	t.Parallel()
	var g gates
	defer g.openAll(1)
	s := &limitStore{fakeStore: newFakeStore(), given: make(chan callLimit, 64)}
	next := 0
	s.claim = func(n int, types []string, limit int) ([]store.Claimed, error) {
		if n > 1 {
			return nil, nil
		}
		next++
		return []store.Claimed{claimed(next, types[0])}, nil
	}
	policies, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	const beat = 20 * time.Millisecond
	p, err := NewPool(Config{Concurrency: 2, PollInterval: time.Hour, HeartbeatInterval: beat, FlushInterval: time.Millisecond, Logger: discard},
		Deps{Store: s, Registry: g.registry(), Policies: policies, Sealer: sealer, Masker: mask.Default()})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, p.Stop(ctx))
	})
	limits := map[string]time.Duration{"claim": claimTimeout, "heartbeat": beat, "finish": flushCallTimeout}
	seen := map[string]bool{}
	for len(seen) < len(limits) {
		c := await(t, s.given, "the pool's calls (claim, heartbeat, finish)")
		require.Greater(t, c.left, time.Duration(0), "%s was called without a time limit", c.call)
		require.LessOrEqual(t, c.left, limits[c.call], "%s was given more than its limit", c.call)
		if c.call == "heartbeat" && !seen["heartbeat"] {
			g.open(1) // the execution ends: its outcome is flushed
		}
		seen[c.call] = true
	}
}
