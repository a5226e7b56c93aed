package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/worker"
)

// TestAFailedNewClosesWhatItOpened makes New fail at one of its last steps
// (the watchdog's configuration), after it opened the database, the blob
// store and, on PostgreSQL, the relay's listening connection: everything
// is closed again, so no goroutine of theirs is left. Not parallel: goleak
// compares with the goroutines that ran before, one database at a time.
func TestAFailedNewClosesWhatItOpened(t *testing.T) {
	for _, d := range dbtest.Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			cfg := app.Config{
				DB:               d.DSN(t),
				DataDir:          t.TempDir(),
				Workers:          2,
				Roles:            []app.Role{app.RoleAPI, app.RoleWorker, app.RoleWatchdog},
				ShutdownGrace:    time.Second,
				HeartbeatTimeout: 30 * time.Second,
			}
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			_, err := app.New(context.Background(), cfg, app.Options{Watchdog: worker.WatchdogConfig{Interval: -time.Second}})
			require.ErrorContains(t, err, "watchdog")
		})
	}
}
