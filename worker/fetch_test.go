package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/tasktype"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/mask"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/internal/store"
)

// The fetch loop, driven by a fake Claimer. The pool polls once an hour
// (fakePool), so that every claim has a cause the test chose; the test
// waits for the loop to be idle (fetchIdle) and counts the claims then.

// idle waits until the fetch loop waits for its next wake-up.
func idle(t *testing.T, p *Pool) {
	t.Helper()
	await(t, p.fetchIdle, "the fetch loop to wait")
}

func noopRegistry() *tasktype.Registry {
	r := tasktype.NewRegistry()
	tasktype.Register(r, "noop", func(context.Context, *tasktype.Job, struct{}) error { return nil })
	return r
}

// gates hold handlers until the test opens them, by instance id.
type gates struct {
	mu    sync.Mutex
	gates map[int]chan struct{}
}

func (g *gates) gate(id int) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = make(map[int]chan struct{})
	}
	if g.gates[id] == nil {
		g.gates[id] = make(chan struct{})
	}
	return g.gates[id]
}

func (g *gates) open(id int) { close(g.gate(id)) }

// openAll opens every gate not yet open, up to id last, so that the
// pool's Stop does not wait for handlers, whatever the test's end.
func (g *gates) openAll(last int) {
	for id := 1; id <= last; id++ {
		select {
		case <-g.gate(id):
		default:
			g.open(id)
		}
	}
}

// hold is a handler that runs until its instance's gate is opened.
func (g *gates) hold(ctx context.Context, job *tasktype.Job, _ struct{}) error {
	select {
	case <-g.gate(job.Instance.ID):
	case <-ctx.Done():
	}
	return nil
}

// registry registers "noop", whose handlers hold.
func (g *gates) registry() *tasktype.Registry {
	r := tasktype.NewRegistry()
	tasktype.Register(r, "noop", g.hold)
	return r
}

// registryWithCap registers "noop" like registry, and "import", whose
// handlers hold too, with a cap of capped running at once per worker.
func (g *gates) registryWithCap(capped int) *tasktype.Registry {
	r := g.registry()
	tasktype.Register(r, "import", g.hold, tasktype.WithConcurrency(capped))
	return r
}

// full answers a claim with as many executions as it may take, numbered
// from *next.
func full(next *int) func(int, []string, int) ([]store.Claimed, error) {
	return func(_ int, types []string, limit int) ([]store.Claimed, error) {
		out := make([]store.Claimed, limit)
		for i := range out {
			*next++
			out[i] = claimed(*next, types[0])
		}
		return out, nil
	}
}

func TestFetchLoopWaitsAfterAnEmptyOrFailedClaimUntilWoken(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]error{"empty": nil, "failed": errors.New("database says no")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newFakeStore()
			s.claim = func(int, []string, int) ([]store.Claimed, error) { return nil, answer }
			p := fakePool(t, s, Config{Concurrency: 4}, noopRegistry())
			idle(t, p) // before Start's wake-up
			idle(t, p) // after the claim it caused
			require.Equal(t, 1, s.claimCount(), "no claim again until something wakes the loop")
			p.Wake()
			idle(t, p)
			require.Equal(t, 2, s.claimCount())
			p.Wake()
			idle(t, p)
			require.Equal(t, 3, s.claimCount())
		})
	}
}

func TestFetchLoopPollsWithoutAWakeUp(t *testing.T) {
	t.Parallel()
	s := newFakeStore()
	s.claim = func(int, []string, int) ([]store.Claimed, error) { return nil, errors.New("database says no") }
	fakePool(t, s, Config{Concurrency: 4, PollInterval: time.Millisecond}, noopRegistry())
	for n := 1; n <= 3; n++ {
		require.Equal(t, n, await(t, s.claims, "a claim at the poll"))
	}
}

func TestFetchLoopClaimsAgainAtOnceWhileClaimsComeBackFull(t *testing.T) {
	t.Parallel()
	var g gates
	defer g.openAll(4)
	s := newFakeStore()
	next := 0
	fill := full(&next)
	s.claim = func(n int, types []string, limit int) ([]store.Claimed, error) {
		if n == 1 {
			return fill(n, types, limit)
		}
		return nil, nil
	}
	p := fakePool(t, s, Config{Concurrency: 4, ClaimBatch: 2}, g.registry())
	idle(t, p)
	idle(t, p)
	require.Equal(t, 2, s.claimCount(), "the first claim came back full: a second one followed at once")
	require.Equal(t, 2, p.Running())
	require.Equal(t, 4, p.Concurrency())
}

// TestOneClaimTakesEveryTypeACappedOneUpToItsRoom: a type with a cap per
// worker is claimed with the others, in the same claim, up to its room
// under the cap; a claim per capped type after the others' would find no
// free slot left whenever the others have a backlog, and the capped type
// would wait behind it whatever its priority.
func TestOneClaimTakesEveryTypeACappedOneUpToItsRoom(t *testing.T) {
	t.Parallel()
	var g gates
	defer g.openAll(4)
	s := newFakeStore()
	next := 0
	s.claim = func(n int, types []string, limit int) ([]store.Claimed, error) {
		if n <= 2 {
			next++
			return []store.Claimed{claimed(next, "import")}, nil
		}
		return nil, nil
	}
	p := fakePool(t, s, Config{Concurrency: 4}, g.registryWithCap(2))
	idle(t, p) // before Start's wake-up
	idle(t, p) // after the claim it caused
	p.Wake()
	idle(t, p)
	p.Wake()
	idle(t, p)
	require.Equal(t, []claimCall{
		{types: []string{"import", "noop"}, caps: []int{2, 4}, limit: 4},
		{types: []string{"import", "noop"}, caps: []int{1, 3}, limit: 3},
		{types: []string{"noop"}, caps: []int{2}, limit: 2}, // import at its cap
	}, s.claimsAsked())
}

// TestClaimsRampUpAfterTheQueueDrained: after a claim that found less
// than it asked for (and at the start), the next takes an eighth of a
// batch, and each claim that comes back full doubles that, up to the batch.
func TestClaimsRampUpAfterTheQueueDrained(t *testing.T) {
	t.Parallel()
	const slots = 2048
	var g gates
	s := newFakeStore()
	next := 0
	fill := full(&next)
	s.claim = func(n int, types []string, limit int) ([]store.Claimed, error) {
		switch n {
		case 1, 2:
			return fill(n, types, limit)
		case 3:
			return fill(n, types, limit/2)
		}
		return nil, nil
	}
	p := fakePool(t, s, Config{Concurrency: slots}, g.registry())
	// Before the pool stops (cleanups run last first): the loop stops
	// claiming, then the held handlers end. The other way round, each of
	// the 1,280 freed slots could wake the loop, which would signal more
	// idle waits than the test reads.
	t.Cleanup(func() { p.StopClaiming(); g.openAll(slots) })
	idle(t, p) // before Start's wake-up
	idle(t, p) // after the claims it caused
	p.Wake()
	idle(t, p)
	var limits []int
	for _, c := range s.claimsAsked() {
		limits = append(limits, c.limit)
	}
	require.Equal(t, []int{256, 512, 1024, 256}, limits,
		"an eighth of the batch, doubled while claims come back full; an eighth again after one came back short")
	require.Equal(t, 256+512+512, p.Running())
}

func TestFetchLoopStopsClaimingWhenEverySlotIsBusy(t *testing.T) {
	t.Parallel()
	var g gates
	defer g.openAll(4)
	s := newFakeStore()
	next := 0
	s.claim = full(&next)
	p := fakePool(t, s, Config{Concurrency: 2, ClaimBatch: 1}, g.registry())
	idle(t, p)
	idle(t, p)
	require.Equal(t, 2, s.claimCount(), "two claims of one fill both slots; no third claim")
	require.Equal(t, 2, p.Running())
	p.Wake()
	idle(t, p)
	require.Equal(t, 2, s.claimCount(), "woken with no free slot: no claim")
}

func TestAFreedSlotWaitsForTheCooldownUnlessHalfABatchIsFree(t *testing.T) {
	t.Parallel()
	var g gates
	defer g.openAll(4)
	s := newFakeStore()
	next := 0
	fill := full(&next)
	s.claim = func(n int, types []string, limit int) ([]store.Claimed, error) {
		if n == 1 {
			return fill(n, types, limit)
		}
		return nil, nil
	}
	// The cooldown never ends by itself in this test.
	p := fakePool(t, s, Config{Concurrency: 4, FetchCooldown: time.Hour}, g.registry())
	idle(t, p)
	idle(t, p)
	require.Equal(t, 1, s.claimCount())
	require.Equal(t, 4, p.Running())

	g.open(1) // one slot of four free: less than half a batch
	idle(t, p)
	require.Equal(t, 1, s.claimCount(), "one freed slot waits for the cooldown")
	require.Equal(t, 3, p.Running())

	g.open(2) // two free: half a batch is worth a claim
	idle(t, p)
	require.Equal(t, 2, s.claimCount(), "half a batch free claims at once")

	p.Wake() // a wake-up does not wait for the cooldown
	idle(t, p)
	require.Equal(t, 3, s.claimCount())
}

func TestFetchLoopClaimsWhenFlowControlAdmitsAgain(t *testing.T) {
	t.Parallel()
	s := newFakeStore()
	s.admissions = []time.Time{time.Now().Add(time.Millisecond)}
	p := fakePool(t, s, Config{Concurrency: 4}, noopRegistry())
	require.Equal(t, 1, await(t, s.claims, "the claim of Start's wake-up"))
	require.Equal(t, 2, await(t, s.claims, "the claim when the gate admits again, with no wake-up"))
	idle(t, p)
	idle(t, p)
	idle(t, p)
	require.Equal(t, 2, s.claimCount(), "no admission pending: the loop waits")
}

func TestStopClaimingEndsTheFetchLoop(t *testing.T) {
	t.Parallel()
	s := newFakeStore()
	p := fakePool(t, s, Config{Concurrency: 4}, noopRegistry())
	idle(t, p)
	idle(t, p)
	p.StopClaiming()
	p.Wake()
	require.Equal(t, 1, s.claimCount())
	free, open, capped := p.room()
	require.Zero(t, free, "a stopping pool has no room")
	require.Empty(t, open)
	require.Empty(t, capped)
}

func TestNewPoolTakesNilPointersInItsInterfacesForNothing(t *testing.T) {
	t.Parallel()
	policies, err := tasktype.NewPolicies(tasktype.DefaultPolicies()...)
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, seal.KeySize))
	require.NoError(t, err)
	deps := Deps{Registry: noopRegistry(), Policies: policies, Sealer: sealer, Masker: mask.Default()}

	var noStore *store.Store
	deps.Store = noStore
	_, err = NewPool(Config{}, deps)
	require.ErrorContains(t, err, "no store")

	var noBroker *events.Broker
	deps.Store, deps.Broker = newFakeStore(), noBroker
	p, err := NewPool(Config{}, deps)
	require.NoError(t, err)
	require.Nil(t, p.deps.Broker, "a nil *events.Broker is no broker (polling), not a broker to call")
}
