package worker

import (
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/internal/store"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// jobWriter is the pool's tasktype.JobWriter: a handler's progress and log
// lines go to the flusher, to be written in batches.
type jobWriter struct {
	writes *flusher
	// clock is the store's: moved is read against the instance's times.
	clock Clock
}

var _ tasktype.JobWriter = jobWriter{}

func (w jobWriter) Progress(p store.Progress) { w.writes.progress(p) }

func (w jobWriter) Log(l store.LogLine) {
	l.Message = dbText(l.Message)
	w.writes.logLine(l)
}

func (w jobWriter) Now() time.Time { return w.clock.Now() }

// dbText makes text from a handler storable in both databases: valid UTF-8
// without NUL bytes (PostgreSQL refuses both in text columns, and one such
// line would otherwise fail the whole batch it is written with).
func dbText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
