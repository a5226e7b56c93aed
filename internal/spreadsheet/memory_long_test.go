//go:build long

package spreadsheet_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
)

// TestMemoryStaysBounded reads a large generated file and checks that
// the live heap grows by far less than its rows would take in memory (over
// 10 MiB as strings): rows are streamed, not loaded. It is not parallel:
// the heap is the process's.
func TestMemoryStaysBounded(t *testing.T) {
	const n = 50000
	rows := importtest.Rows(n, nil)
	file := importtest.XLSX(t, importtest.ContactsHeader, rows)
	csvFile := importtest.CSV(importtest.ContactsHeader, rows, false)
	rows = nil
	for _, c := range []struct {
		name string
		file []byte
		f    spreadsheet.Format
	}{{"XLSX", file, spreadsheet.XLSX}, {"CSV", csvFile, spreadsheet.CSV}} {
		t.Run(c.name, func(t *testing.T) {
			info, err := scan(t, c.file, c.f, spreadsheet.Limits{})
			require.NoError(t, err)
			require.Equal(t, n, info.Rows)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			peak := uint64(0)
			src := spreadsheet.Source{ReaderAt: bytes.NewReader(c.file), Size: int64(len(c.file))}
			r, err := spreadsheet.Open(src, info, spreadsheet.Limits{UnzipXMLSizeLimit: 4 << 20})
			require.NoError(t, err)
			count := 0
			for r.Next() {
				count++
				if count%5000 == 0 {
					runtime.GC()
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapAlloc)
				}
			}
			require.NoError(t, r.Err())
			require.NoError(t, r.Close())
			runtime.ReadMemStats(&after)
			require.Equal(t, n+1, count)
			growth := int64(peak) - int64(before.HeapAlloc)
			t.Logf("%s: %d rows, file %d bytes, heap growth at peak %d KiB", c.name, n, len(c.file), growth>>10)
			require.Less(t, growth, int64(4<<20))
		})
	}
}
