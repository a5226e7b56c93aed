// Package servicetest checks what every service.Service promises.
package servicetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/service"
)

// StressStartStop starts and stops s from several goroutines at once, in
// random order, many times, then stops it: every call must return (Stop
// waits for the work under way, so a deadlock or a leaked pass shows as a
// test timeout) and the race detector must stay quiet. s is left stopped.
func StressStartStop(t testing.TB, s service.Service) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if rand.IntN(2) == 0 {
					if err := s.Start(ctx); err != nil {
						t.Errorf("start: %v", err)
						return
					}
					if rand.IntN(4) == 0 {
						time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					}
				} else {
					s.Stop()
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		s.Stop()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("start/stop did not return within 30s: a Stop waits for a pass that never ends, or Start and Stop deadlock")
	}
}
