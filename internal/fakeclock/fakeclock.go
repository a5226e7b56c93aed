// Package fakeclock is a clock that tests move by hand, so that backoffs,
// leases and timeouts are tested without waiting for them.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable time source. The zero value is not usable; use New.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock showing start.
func New(start time.Time) *Clock { return &Clock{now: start.UTC()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
