package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent/schema"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
)

// skewed is a wall clock off by d.
func skewed(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

// TestEveryStampIsTheDatabasesClock: a node on PostgreSQL whose wall clock
// is two hours ahead creates and runs a task, an alert channel and rule, a
// schedule, a type control and the audit records of all of them. Every
// created_at and updated_at it wrote, in every table of the schema, is the
// database's time (between the database's clock before and after), not
// the node's: those are the times other nodes compare (the audit trail's
// and the lists' orders and filters, retention) with theirs.
//
// Not parallel: it sets ent's default clock (schema.WallClock) for the
// whole process, which no other test reads meanwhile.
func TestEveryStampIsTheDatabasesClock(t *testing.T) {
	dsn := dbtest.PostgresOnly(t)
	ahead := skewed(2 * time.Hour)
	schema.WallClock = ahead
	t.Cleanup(func() { schema.WallClock = time.Now })
	s := apptest.Start(t, dsn, app.Options{WallClock: ahead})
	dbNow := func() time.Time {
		var now time.Time
		require.NoError(t, s.App.Store.DB().QueryRowContext(t.Context(), "SELECT clock_timestamp()").Scan(&now))
		return now
	}
	before := dbNow()

	var task struct{ CreateTask struct{ ID string } }
	s.Query(t, `mutation { createTask(input: {type: "noop", title: "stamped"}) { id } }`, nil, &task)
	waitTask(t, s, task.CreateTask.ID)
	var ch struct{ CreateAlertChannel struct{ ID string } }
	s.Query(t, `mutation { createAlertChannel(input: {name: "ops", kind: WEBHOOK, url: "http://127.0.0.1:9/hook", secret: "s"}) { id } }`, nil, &ch)
	s.Query(t, `mutation($ch: ID!) { createAlertRule(input: {name: "noop fails", kind: TASK_FAILED, taskType: "noop", channelIds: [$ch]}) { id } }`, map[string]any{"ch": ch.CreateAlertChannel.ID}, nil)
	createSchedule(t, s, map[string]any{"name": "stamped", "intervalSeconds": 3600, "paused": true, "task": map[string]any{"type": "noop"}})
	s.Query(t, `mutation { setTypeControl(type: "noop", input: {maxRunning: 5}) { maxRunning } }`, nil, nil)
	after := dbNow()

	rows, err := s.App.Store.DB().QueryContext(t.Context(), `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND column_name IN ('created_at', 'updated_at') AND data_type LIKE 'timestamp%'
		ORDER BY table_name, column_name`)
	require.NoError(t, err)
	var cols [][2]string
	for rows.Next() {
		var c [2]string
		require.NoError(t, rows.Scan(&c[0], &c[1]))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())

	stamped := map[string]bool{}
	for _, c := range cols {
		var n int
		var lo, hi *time.Time
		q := fmt.Sprintf(`SELECT count(%[2]s), min(%[2]s), max(%[2]s) FROM %[1]s`, c[0], c[1])
		require.NoError(t, s.App.Store.DB().QueryRowContext(t.Context(), q).Scan(&n, &lo, &hi), q)
		if n == 0 {
			continue
		}
		stamped[c[0]] = true
		// Now is the wall clock plus the offset SyncClock measured, exact
		// to half a round trip: a second either side is far from 2 hours.
		require.False(t, lo.Before(before.Add(-time.Second)), "%s.%s: %s, before the test began (%s)", c[0], c[1], lo, before)
		require.False(t, hi.After(after.Add(time.Second)), "%s.%s: %s, after the test ended (%s): the node's clock, not the database's", c[0], c[1], hi, after)
	}
	for _, table := range []string{"tasks", "task_instances", "audit_logs", "alert_channels", "alert_rules", "schedules", "flow_controls"} {
		require.True(t, stamped[table], "the test wrote no %s row: %v", table, stamped)
	}
}
