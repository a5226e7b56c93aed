package builtin

import (
	"context"
	"time"

	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// NoopInput is the input of a noop task.
type NoopInput struct {
	// SleepMs makes the task take this long (it still stops at once when
	// cancelled). 0 returns at once.
	SleepMs int `json:"sleepMs,omitempty" jsonschema:"minimum=0,maximum=3600000,description=How long to take in milliseconds (stops at once when cancelled)"`
	// Note is stored in the result.
	Note string `json:"note,omitempty" jsonschema:"maxLength=1000,description=Echoed in the result"`
}

// Noop does nothing, optionally for SleepMs.
func Noop(ctx context.Context, job *tasktype.Job, in NoopInput) error {
	if in.SleepMs > 0 {
		total := int64(in.SleepMs)
		deadline := time.Now().Add(time.Duration(in.SleepMs) * time.Millisecond)
		tick := time.NewTicker(min(time.Duration(in.SleepMs)*time.Millisecond/10+time.Millisecond, time.Second))
		defer tick.Stop()
		for {
			left := time.Until(deadline)
			job.Progress(total-max(left.Milliseconds(), 0), total)
			if left <= 0 {
				break
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-tick.C:
			}
		}
	}
	if in.Note != "" {
		return job.SetResult(map[string]string{"note": in.Note})
	}
	return nil
}
