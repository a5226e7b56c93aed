package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"taskgraph/ent"
	"taskgraph/ent/task"
	"taskgraph/internal/dbtest"
)

// TestScanRowsReadsEachRowAsEntDoes: the scanner of the store's hand-written
// statements (ent.ScanTaskRows) reuses its scan targets from row to row; rows
// whose nullable columns alternate between NULL and a value read exactly as
// ent's own query reads them, none carrying a value over from the row before.
func TestScanRowsReadsEachRowAsEntDoes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		s, _ := setup(t, d.DSN(t))
		var made []*ent.Task
		for i := range 4 {
			o := taskOpts{}
			if i%2 == 0 {
				o.key = "k" + string(rune('a'+i))
			}
			made = append(made, newTask(t, s, o))
		}
		// Values in the nullable columns of every other task (not its
		// status: only the store's transitions write that).
		for _, tk := range made[1:3] {
			_, err := s.DB().ExecContext(sysCtx, rebind(s, `UPDATE tasks SET result = ?, result_status = 'SUCCESS', attention_status = 'FAILED',
				finished_at = updated_at, last_error = 'boom', input_sealed = ? WHERE id = ?`), `{"rows":2}`, []byte{1, 2, 3}, tk.ID)
			require.NoError(t, err)
		}
		cols := make([]string, len(task.Columns))
		copy(cols, task.Columns)
		rows, err := s.DB().QueryContext(sysCtx, "SELECT "+strings.Join(cols, ", ")+" FROM tasks ORDER BY id")
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
		require.NotNil(t, scanned[1].FinishedAt)
		require.Nil(t, scanned[3].FinishedAt, "a NULL after a value is NULL")
		require.Empty(t, scanned[3].InputSealed)
		require.Empty(t, scanned[3].Result)
		require.NotNil(t, scanned[2].IdempotencyKey)
		require.Nil(t, scanned[3].IdempotencyKey)
	})
}

func rebind(s interface{ Postgres() bool }, q string) string {
	if !s.Postgres() {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$")
			b.WriteString(string(rune('0' + n)))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
