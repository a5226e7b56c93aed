// Package ratelimit bounds how fast each user may ask for mutations: a
// token bucket per user (golang.org/x/time/rate), in a bounded map that
// forgets the least recently seen users first.
package ratelimit

import (
	"fmt"
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Defaults.
const (
	MaxUsersDefault = 10000
)

// Config of a Limiter.
type Config struct {
	// PerSecond is the sustained rate each user may act at; 0 disables
	// rate limiting.
	PerSecond float64
	// Burst is how many actions a user may take at once (a bulk action
	// counts one per id; see Allow). Default: 1.
	Burst int
	// MaxUsers bounds how many users' buckets are kept. A user forgotten
	// to make room starts again with a full bucket. Default: MaxUsersDefault.
	MaxUsers int
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Limiter holds a token bucket per user. A nil *Limiter allows everything.
type Limiter struct {
	cfg   Config
	mu    sync.Mutex
	users *lru.Cache[string, *rate.Limiter]
}

// New returns a Limiter, or nil when cfg.PerSecond is 0 (no limit).
func New(cfg Config) (*Limiter, error) {
	if cfg.PerSecond == 0 {
		return nil, nil
	}
	if cfg.PerSecond < 0 || math.IsNaN(cfg.PerSecond) || math.IsInf(cfg.PerSecond, 0) {
		return nil, fmt.Errorf("rate limit: %v is not a positive rate", cfg.PerSecond)
	}
	cfg.Burst = max(cfg.Burst, 1)
	if cfg.MaxUsers <= 0 {
		cfg.MaxUsers = MaxUsersDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	users, err := lru.New[string, *rate.Limiter](cfg.MaxUsers)
	if err != nil {
		return nil, fmt.Errorf("rate limit: %w", err)
	}
	return &Limiter{cfg: cfg, users: users}, nil
}

// Error says that a user has to wait before acting again.
type Error struct {
	User       string
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("rate limited: too many requests; retry in %s", e.RetryAfter.Round(time.Millisecond))
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds (at least 1),
// as an HTTP Retry-After header would say it.
func (e *Error) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// Allow takes n tokens from user's bucket, or returns an *Error saying how
// long to wait for them; nothing is taken then. A bulk action counts one
// token per id: one larger than the burst needs a full bucket now, and the
// tokens beyond the burst are owed — taken from the bucket's future, so
// that the user's next action waits until they are paid back (1,000 ids at
// 10 a second keep the user waiting 90 s after a burst of 100).
func (l *Limiter) Allow(user string, n int) error {
	if l == nil {
		return nil
	}
	n = max(n, 1)
	l.mu.Lock()
	lim, ok := l.users.Get(user)
	if !ok {
		lim = rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)
		l.users.Add(user, lim)
	}
	l.mu.Unlock()
	now := l.cfg.Now()
	first := min(n, l.cfg.Burst)
	r := lim.ReserveN(now, first)
	if !r.OK() {
		return &Error{User: user, RetryAfter: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &Error{User: user, RetryAfter: d}
	}
	for owed := n - first; owed > 0; owed -= l.cfg.Burst {
		// Reservations in the future, kept: they are the debt.
		lim.ReserveN(now, min(owed, l.cfg.Burst))
	}
	return nil
}
