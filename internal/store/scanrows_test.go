package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/store"
)

// TestScanRowsReadsEachRowAsEntDoes: the scanner of the store's hand-written
// statements (ent.ScanTaskRows) reuses its scan targets from row to row; rows
// whose nullable columns alternate between NULL and a value read exactly as
// ent's own query reads them, none carrying a value over from the row before.
func TestScanRowsReadsEachRowAsEntDoes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s, _ := setup(t, d.DSN(t))
		// Tasks 1 and 2 (of 0..3) have an idempotency key and a sealed
		// input, and end FAILED with a result: values in the nullable
		// columns (finished_at, result, result_status, attention_status,
		// ...), between rows that have none.
		for i := range 4 {
			o := taskOpts{typ: "other"}
			if i == 1 || i == 2 {
				o = taskOpts{key: "k" + string(rune('a'+i))}
			}
			n := newTaskParams(o)
			if o.key != "" {
				n.InputSealed = []byte{1, 2, byte(i)}
			}
			_, created, err := s.CreateTask(sysCtx, n)
			require.NoError(t, err)
			require.True(t, created)
		}
		for range 2 {
			c := claimOne(t, s)
			require.NoError(t, finish(t, s, store.Outcome{Token: c.Token(), Status: lifecycle.Failed, Kind: lifecycle.KindNonRetryable,
				Error: "boom", Result: json.RawMessage(`{"rows":2}`), ResultStatus: "FAILED"}))
		}
		rows, err := s.DB().QueryContext(sysCtx, "SELECT "+strings.Join(task.Columns, ", ")+" FROM tasks ORDER BY id")
		require.NoError(t, err)
		scanned, err := ent.ScanTaskRows(s.Client(), rows)
		require.NoError(t, err)
		want, err := s.Client().Task.Query().Order(ent.Asc(task.FieldID)).All(sysCtx)
		require.NoError(t, err)
		require.Len(t, scanned, len(want))
		for i := range want {
			w, err := json.Marshal(want[i])
			require.NoError(t, err)
			g, err := json.Marshal(scanned[i])
			require.NoError(t, err)
			require.JSONEq(t, string(w), string(g), "task %d", want[i].ID)
			require.Equal(t, want[i].InputSealed, scanned[i].InputSealed, "task %d", want[i].ID)
		}
		for _, i := range []int{1, 2} {
			require.NotNil(t, scanned[i].FinishedAt, "task %d", i)
			require.NotNil(t, scanned[i].IdempotencyKey, "task %d", i)
			require.NotEmpty(t, scanned[i].Result, "task %d", i)
			require.NotEmpty(t, scanned[i].InputSealed, "task %d", i)
		}
		require.Nil(t, scanned[3].FinishedAt, "a NULL after a value is NULL")
		require.Nil(t, scanned[3].IdempotencyKey)
		require.Nil(t, scanned[3].ResultStatus)
		require.Empty(t, scanned[3].Result)
		require.Empty(t, scanned[3].InputSealed)
	})
}
