package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestTenantQuotaConcurrentCreates: two goroutines creating a tenant's
// tasks at once, past its waiting cap, never take it past the cap (the
// quota's row is locked on PostgreSQL; SQLite has one writer).
func TestTenantQuotaConcurrentCreates(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s, _ := setup(t, dsn)
		const limit = 5
		require.NoError(t, s.Client().TenantQuota.Create().SetTenant("acme").SetMaxWaiting(limit).SetUpdatedAt(time.Now()).Exec(sysCtx))
		var wg sync.WaitGroup
		var mu sync.Mutex
		created, refused := 0, 0
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 8 {
					n := newTaskParams(taskOpts{typ: fmt.Sprintf("t%d", i%2)})
					n.Tenant = "acme"
					_, _, err := s.CreateTask(sysCtx, n)
					var qe *store.TenantQuotaError
					mu.Lock()
					switch {
					case err == nil:
						created++
					case errors.As(err, &qe):
						refused++
					default:
						t.Errorf("goroutine %d: %v", g, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Equal(t, limit, created)
		require.Equal(t, 16-limit, refused)
		n, err := s.Client().TaskInstance.Query().Where(taskinstance.Tenant("acme"), taskinstance.StatusIn(lifecycle.WaitingStatuses...)).Count(sysCtx)
		require.NoError(t, err)
		require.Equal(t, limit, n)
		// Another tenant is not held.
		other := newTaskParams(taskOpts{})
		other.Tenant = "beta"
		_, _, err = s.CreateTask(sysCtx, other)
		require.NoError(t, err)
	})
}
