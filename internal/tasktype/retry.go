package tasktype

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
)

// RetryPolicy says how often and how late a failed task is tried again.
type RetryPolicy struct {
	Name        string
	Description string
	// MaxAttempts bounds the executions that count (interruptions by a
	// shutdown do not count). A task may lower or raise it up to
	// MaxAttemptsLimit.
	MaxAttempts int
	// Backoff[i] is the delay after the (i+1)th failed attempt; the last
	// entry repeats.
	Backoff []time.Duration
	// ResourceBackoff replaces Backoff after a resource error.
	ResourceBackoff []time.Duration
	// Jitter spreads each delay by up to ±Jitter of itself, so that tasks
	// failing together do not retry together.
	Jitter float64
}

// MaxAttemptsLimit is the most attempts any task may have: there are no
// unbounded retries.
const MaxAttemptsLimit = 25

// DefaultPolicyName is the policy of tasks that name none.
const DefaultPolicyName = "default"

// DefaultPolicies are the built-in policies.
func DefaultPolicies() []RetryPolicy {
	return []RetryPolicy{
		{
			Name:            DefaultPolicyName,
			Description:     "3 attempts, waiting 5 s then 30 s (then 5 min)",
			MaxAttempts:     3,
			Backoff:         []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute},
			ResourceBackoff: []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute},
			Jitter:          0.1,
		},
		{
			Name:        "none",
			Description: "a single attempt",
			MaxAttempts: 1,
		},
		{
			Name:            "patient",
			Description:     "10 attempts, backing off from 5 s to 1 h",
			MaxAttempts:     10,
			Backoff:         []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour},
			ResourceBackoff: []time.Duration{5 * time.Minute, 15 * time.Minute, time.Hour},
			Jitter:          0.2,
		},
	}
}

// Policies is a set of named retry policies.
type Policies struct {
	byName map[string]RetryPolicy
	rand   func() float64
}

// NewPolicies validates and indexes policies.
func NewPolicies(ps ...RetryPolicy) (*Policies, error) {
	out := &Policies{byName: make(map[string]RetryPolicy, len(ps)), rand: rand.Float64}
	for _, p := range ps {
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("retry policy without a name")
		case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
			return nil, fmt.Errorf("retry policy %q: max attempts must be 1..%d", p.Name, MaxAttemptsLimit)
		case p.MaxAttempts > 1 && len(p.Backoff) == 0:
			return nil, fmt.Errorf("retry policy %q: retries need a backoff", p.Name)
		case p.Jitter < 0 || p.Jitter >= 1:
			return nil, fmt.Errorf("retry policy %q: jitter must be in [0, 1)", p.Name)
		}
		if _, dup := out.byName[p.Name]; dup {
			return nil, fmt.Errorf("retry policy %q defined twice", p.Name)
		}
		out.byName[p.Name] = p
	}
	if _, ok := out.byName[DefaultPolicyName]; !ok {
		return nil, fmt.Errorf("no %q retry policy", DefaultPolicyName)
	}
	return out, nil
}

// Get returns a policy by name.
func (ps *Policies) Get(name string) (RetryPolicy, bool) {
	p, ok := ps.byName[name]
	return p, ok
}

// All returns the policies by name.
func (ps *Policies) All() []RetryPolicy {
	out := make([]RetryPolicy, 0, len(ps.byName))
	for _, p := range ps.byName {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Decision is what follows a failed attempt.
type Decision struct {
	Retry   bool
	RunAt   time.Time
	Attempt int    // the attempt number of the next instance
	Reason  string // why not, or when
}

// Next decides what follows attempt (1-based) of a task with maxAttempts
// (0: the policy's) ending with kind at now.
func (ps *Policies) Next(policy string, maxAttempts, attempt int, kind lifecycle.ErrorKind, now time.Time) Decision {
	return ps.next(policy, maxAttempts, attempt, kind, -1, now)
}

// NextAfter is Next for an attempt whose error asked the next one to wait
// retryAfter (RetryAfterOf: a server's Retry-After). That delay replaces
// the policy's backoff for this attempt — the server knows when it will
// answer, a schedule only guesses — but never exceeds the policy's longest
// delay (MaxDelay): a Retry-After of a day does not park a task for a day.
// Jitter only adds to it, so the next attempt never comes before the time
// asked for (unless capped). A negative retryAfter is Next.
func (ps *Policies) NextAfter(policy string, maxAttempts, attempt int, kind lifecycle.ErrorKind, retryAfter time.Duration, now time.Time) Decision {
	return ps.next(policy, maxAttempts, attempt, kind, retryAfter, now)
}

// MaxDelay is the longest delay of the policy's schedules: the cap on a
// delay an error asks for.
func (p RetryPolicy) MaxDelay() time.Duration {
	var d time.Duration
	for _, b := range append(slices.Clone(p.Backoff), p.ResourceBackoff...) {
		d = max(d, b)
	}
	return d
}

func (ps *Policies) next(policy string, maxAttempts, attempt int, kind lifecycle.ErrorKind, retryAfter time.Duration, now time.Time) Decision {
	p, ok := ps.byName[policy]
	if !ok {
		p = ps.byName[DefaultPolicyName]
	}
	if maxAttempts <= 0 {
		maxAttempts = p.MaxAttempts
	}
	if !kind.Retryable() {
		return Decision{Reason: fmt.Sprintf("%s error: not retried", kind)}
	}
	next := attempt
	if kind.ConsumesAttempt() {
		next = attempt + 1
	}
	if next > maxAttempts {
		return Decision{Reason: fmt.Sprintf("attempt %d of %d failed: no attempts left", attempt, maxAttempts)}
	}
	var delay time.Duration
	switch {
	case kind == lifecycle.KindInterrupted:
		delay = 0
	case kind == lifecycle.KindResource && len(p.ResourceBackoff) > 0:
		delay = p.ResourceBackoff[min(attempt-1, len(p.ResourceBackoff)-1)]
	case len(p.Backoff) > 0:
		delay = p.Backoff[min(attempt-1, len(p.Backoff)-1)]
	}
	switch {
	case kind == lifecycle.KindInterrupted:
	case retryAfter >= 0:
		delay = retryAfter
		if p.Jitter > 0 {
			delay += time.Duration(ps.rand() * p.Jitter * float64(delay))
		}
		delay = min(delay, p.MaxDelay())
	case p.Jitter > 0 && delay > 0:
		delay += time.Duration((ps.rand()*2 - 1) * p.Jitter * float64(delay))
	}
	runAt := now.Add(delay)
	return Decision{
		Retry:   true,
		RunAt:   runAt,
		Attempt: next,
		Reason:  fmt.Sprintf("attempt %d of %d scheduled in %s", next, maxAttempts, delay.Round(time.Millisecond)),
	}
}
