// Package schedule creates tasks on a timer. A schedule, stored in the
// database, names a cron expression (with an optional seconds field) or a
// fixed interval, a time zone, an optional start and end, and the task to
// create at each slot; Service creates, edits, pauses, resumes, deletes and
// runs schedules on behalf of the API, and Scheduler fires them.
//
// Exactly one task per slot, across nodes: a task created for a slot
// carries its schedule and slot, under a unique index, and is created
// through the engine (validated, masked, audited like createTask). The
// Scheduler runs on one leader at a time (the leader package's advisory
// lock, as the watchdog); the index is the arbiter whenever two nodes fire
// anyway (a leadership change mid-pass, several processes on one SQLite
// file, which all lead). Its writes to a schedule are conditional on the
// schedule's version, so an edit made meanwhile wins and takes effect at
// the next slot, on any node, without a restart.
//
// Cron expressions are parsed by github.com/robfig/cron/v3: standard
// five-field cron, an optional leading seconds field, ranges, steps, names
// and descriptors (@hourly, @daily...). It is used only for parsing and
// for Next; firing, catch-up and overlap are ours, in the database.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Limits of a schedule.
const (
	// MinInterval is the shortest fixed interval (and cron with seconds
	// cannot go below it either).
	MinInterval = time.Second
	// MaxInterval is the longest fixed interval.
	MaxInterval = 366 * 24 * time.Hour
	// MaxPreview is the most fire times a preview lists.
	MaxPreview = 100
)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is when a schedule fires: the slots of a cron expression read in a
// time zone, or of a fixed interval from an anchor, within [Start, End].
type Spec struct {
	cron     cron.Schedule
	interval time.Duration
	anchor   time.Time
	loc      *time.Location
	start    *time.Time
	end      *time.Time
}

// SpecInput is what a Spec is parsed from.
type SpecInput struct {
	// Cron is a cron expression; empty when Interval is set.
	Cron string
	// Interval, when not zero, fires at Anchor + k × Interval.
	Interval time.Duration
	// Timezone is an IANA zone name ("Asia/Shanghai"); empty: the server's.
	Timezone string
	// Start and End bound the slots; nil: unbounded.
	Start, End *time.Time
	// Anchor is the first slot of an interval without Start (the
	// schedule's creation).
	Anchor time.Time
}

// Problem is a field of a SpecInput that is wrong.
type Problem struct {
	Field, Message string
}

// SpecError lists what is wrong with a SpecInput.
type SpecError struct{ Problems []Problem }

func (e *SpecError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	return "invalid schedule: " + strings.Join(parts, "; ")
}

// ParseSpec checks in and returns its Spec, or a *SpecError.
func ParseSpec(in SpecInput) (Spec, error) {
	var probs []Problem
	add := func(field, format string, args ...any) {
		probs = append(probs, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	s := Spec{loc: time.Local, start: in.Start, end: in.End}
	if in.Timezone != "" {
		loc, err := time.LoadLocation(in.Timezone)
		if err != nil || in.Timezone == "Local" {
			add("timezone", "unknown time zone %q (an IANA name such as Asia/Shanghai or UTC)", in.Timezone)
		} else {
			s.loc = loc
		}
	}
	expr := strings.TrimSpace(in.Cron)
	switch {
	case expr != "" && in.Interval != 0:
		add("cron", "give either a cron expression or an interval, not both")
	case expr == "" && in.Interval == 0:
		add("cron", "give a cron expression or an interval")
	case in.Interval != 0:
		if in.Interval < MinInterval || in.Interval > MaxInterval {
			add("intervalSeconds", "must be between %d and %d", int(MinInterval/time.Second), int(MaxInterval/time.Second))
		}
		if in.Interval%time.Second != 0 {
			add("intervalSeconds", "must be whole seconds")
		}
		s.interval = in.Interval
		s.anchor = in.Anchor.UTC().Truncate(time.Second)
		if in.Start != nil {
			s.anchor = in.Start.UTC()
		}
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		add("cron", "give the time zone in timezone, not in the expression")
	case strings.HasPrefix(expr, "@every"):
		add("cron", "for a fixed interval give intervalSeconds instead of @every")
	default:
		c, err := parser.Parse(expr)
		if err != nil {
			add("cron", "%v", err)
			break
		}
		s.cron = c
		if first := c.Next(time.Now().In(s.loc)); first.IsZero() {
			add("cron", "%q never fires", expr)
		}
	}
	if in.Start != nil && in.End != nil && in.End.Before(*in.Start) {
		add("endAt", "is before startAt")
	}
	if len(probs) > 0 {
		return Spec{}, &SpecError{Problems: probs}
	}
	return s, nil
}

// Location is the time zone the cron expression is read in.
func (s Spec) Location() *time.Location { return s.loc }

// Next returns the first slot strictly after t, and false when there is
// none (past End). Slots are in UTC.
func (s Spec) Next(t time.Time) (time.Time, bool) {
	if s.start != nil && t.Before(*s.start) {
		// The first slot at or after Start.
		t = s.start.Add(-time.Nanosecond)
	}
	var next time.Time
	if s.interval > 0 {
		if t.Before(s.anchor) {
			next = s.anchor
		} else {
			k := t.Sub(s.anchor)/s.interval + 1
			next = s.anchor.Add(k * s.interval)
		}
	} else {
		next = s.cron.Next(t.In(s.loc))
		if next.IsZero() {
			return time.Time{}, false
		}
	}
	next = next.UTC()
	if s.end != nil && next.After(*s.end) {
		return time.Time{}, false
	}
	return next, true
}

// Preview returns the first n slots after t.
func (s Spec) Preview(t time.Time, n int) []time.Time {
	n = min(n, MaxPreview)
	var out []time.Time
	for len(out) < n {
		next, ok := s.Next(t)
		if !ok {
			break
		}
		out = append(out, next)
		t = next
	}
	return out
}

// IsSpecError reports whether err is a *SpecError.
func IsSpecError(err error) bool {
	var se *SpecError
	return errors.As(err, &se)
}

// gapFires is how many fires ShortestGap looks at.
const gapFires = 1000

// ShortestGap returns the shortest time between two consecutive slots
// from t on: a fixed interval's interval; for a cron expression, the
// shortest gap among its next gapFires slots (a cron's slots within a day
// repeat every day it fires, so its shortest gap shows within its first
// days, or within the first thousand slots of a sparse one). Zero: fewer
// than two slots are left.
func (s Spec) ShortestGap(t time.Time) time.Duration {
	if s.interval > 0 {
		return s.interval
	}
	var gap time.Duration
	prev, ok := s.Next(t)
	for i := 0; ok && i < gapFires; i++ {
		next, more := s.Next(prev)
		if !more {
			break
		}
		if d := next.Sub(prev); gap == 0 || d < gap {
			gap = d
		}
		prev = next
	}
	return gap
}
