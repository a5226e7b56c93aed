package engine

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// Groups of the on-time report.
const (
	DeadlineByType     = "TYPE"
	DeadlineByTenant   = "TENANT"
	DeadlineBySchedule = "SCHEDULE"
)

// MaxDeadlineReportRange is the longest range of one on-time report.
const MaxDeadlineReportRange = 366 * 24 * time.Hour

// DeadlineRow is one row of the on-time report: the tasks of a group
// whose deadline fell in the range, and how they stand against it.
type DeadlineRow struct {
	// Key is the type, the tenant, or the schedule's id ("" for tasks of
	// no schedule).
	Key                      string
	Total, Met, Missed, Open int
}

// OnTimePercent is Met / (Met + Missed) in percent; ok is false while
// none is decided.
func (r DeadlineRow) OnTimePercent() (pct float64, ok bool) {
	if r.Met+r.Missed == 0 {
		return 0, false
	}
	return 100 * float64(r.Met) / float64(r.Met+r.Missed), true
}

// DeadlineReport is the on-time report of the tasks the viewer of ctx may
// see whose deadline falls in [from, to), per group (DeadlineByType,
// DeadlineByTenant or DeadlineBySchedule), ordered by key. It reads the
// partial index of the tasks with a deadline (task_deadline) over the
// range: its cost is that of the tasks with a deadline in it.
func (e *Engine) DeadlineReport(ctx context.Context, from, to time.Time, group string) ([]DeadlineRow, error) {
	if _, err := auth.Require(ctx); err != nil {
		return nil, err
	}
	var v ValidationError
	if !to.After(from) {
		v.add("to", "must be after from")
	} else if to.Sub(from) > MaxDeadlineReportRange {
		v.add("to", "the range is %s; the longest is %d days", to.Sub(from).Round(time.Hour), int(MaxDeadlineReportRange/(24*time.Hour)))
	}
	field := map[string]string{DeadlineByType: task.FieldType, DeadlineByTenant: task.FieldTenant, DeadlineBySchedule: task.FieldScheduleID}[group]
	if field == "" {
		v.add("groupBy", "must be TYPE, TENANT or SCHEDULE")
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	sum := func(col, as string) ent.AggregateFunc {
		return func(s *sql.Selector) string {
			return sql.As("SUM(CASE WHEN "+s.C(col)+" IS NOT NULL THEN 1 ELSE 0 END)", as)
		}
	}
	var rows []struct {
		Type       string `json:"type"`
		Tenant     string `json:"tenant"`
		ScheduleID *int   `json:"schedule_id"`
		Count      int    `json:"count"`
		Met        int    `json:"met"`
		Missed     int    `json:"missed"`
	}
	if err := e.store.Client().Task.Query().
		Where(task.DeadlineNotNil(), task.DeadlineGTE(from.UTC()), task.DeadlineLT(to.UTC())).
		GroupBy(field).
		Aggregate(ent.Count(), sum(task.FieldDeadlineMetAt, "met"), sum(task.FieldDeadlineMissedAt, "missed")).
		Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("deadline report: %w", err)
	}
	out := make([]DeadlineRow, len(rows))
	for i, r := range rows {
		key := r.Type
		switch group {
		case DeadlineByTenant:
			key = r.Tenant
		case DeadlineBySchedule:
			key = ""
			if r.ScheduleID != nil {
				key = strconv.Itoa(*r.ScheduleID)
			}
		}
		out[i] = DeadlineRow{Key: key, Total: r.Count, Met: r.Met, Missed: r.Missed, Open: r.Count - r.Met - r.Missed}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
