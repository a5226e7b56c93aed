package exporter

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"sort"
	"time"

	"taskgraph/artifact"
	"taskgraph/auth"
	"taskgraph/lifecycle"
	"taskgraph/spreadsheet"
	"taskgraph/worker"
)

// ReportInput is the input of a report task: the period of tasks counted
// (created_at in [since, until)); contacts are counted whole.
type ReportInput struct {
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// ReportResult is a report's result.
type ReportResult struct {
	File     string `json:"file"`
	Tasks    int    `json:"tasks"`
	Contacts int    `json:"contacts"`
}

type dayRow struct {
	day, typ string
	byStatus map[string]int
	partial  int
	total    int
}

// statusColumns are the states shown per day and type.
var statusColumns = []lifecycle.Status{lifecycle.Success, lifecycle.Failed, lifecycle.Cancelled, lifecycle.Executing, lifecycle.Pending, lifecycle.RetryPending}

func (e *Exporter) report(ctx context.Context, job *worker.Job, in ReportInput) error {
	// Aggregates are read as the task's owner, like exports.
	asOwner := auth.NewContext(ctx, job.Owner())
	days, err := e.taskOutcomes(asOwner, in)
	if err != nil {
		return err
	}
	job.Progress(1, 3)
	cities, err := e.contactsByCity(asOwner)
	if err != nil {
		return err
	}
	job.Progress(2, 3)
	var tasks, contacts int
	byStatus := map[string]int{}
	partial := 0
	for _, d := range days {
		tasks += d.total
		partial += d.partial
		for s, n := range d.byStatus {
			byStatus[s] += n
		}
	}
	for _, c := range cities {
		contacts += c.n
	}
	name := job.Task.Code + "-report.xlsx"
	a, err := e.cfg.Artifacts.Write(ctx, artifact.Meta{
		TaskID: &job.Task.ID, Owner: job.Task.Owner, Kind: artifact.KindReport,
		Filename: name, ContentType: spreadsheet.XLSX.ContentType(),
	}, func(w io.Writer) error {
		out, err := spreadsheet.NewWriter(spreadsheet.XLSX, w, "Summary")
		if err != nil {
			return err
		}
		period := "all time"
		if in.Since != nil || in.Until != nil {
			period = fmt.Sprintf("%s – %s", fmtTime(in.Since, "beginning"), fmtTime(in.Until, "now"))
		}
		rows := [][]any{
			{"taskgraph report"},
			{"Generated at", e.cfg.Artifacts.Now()},
			{"Period (tasks created)", period},
			{},
			{"Tasks", tasks},
		}
		for _, s := range statusColumns {
			rows = append(rows, []any{"  " + string(s), byStatus[string(s)]})
		}
		rows = append(rows, []any{"  of which PARTIAL_SUCCESS", partial})
		if done := byStatus[string(lifecycle.Success)] + byStatus[string(lifecycle.Failed)] + byStatus[string(lifecycle.Cancelled)]; done > 0 {
			rows = append(rows, []any{"Success rate (finished tasks)", fmt.Sprintf("%.1f%%", 100*float64(byStatus[string(lifecycle.Success)])/float64(done))})
		}
		rows = append(rows, []any{}, []any{"Contacts", contacts}, []any{"Cities", len(cities)})
		for _, r := range rows {
			if err := out.Row(r...); err != nil {
				return err
			}
		}
		if err := out.Sheet("Tasks by day"); err != nil {
			return err
		}
		head := []any{"Day", "Type", "Total"}
		for _, s := range statusColumns {
			head = append(head, string(s))
		}
		head = append(head, "PARTIAL_SUCCESS")
		if err := out.Row(head...); err != nil {
			return err
		}
		for _, d := range days {
			r := []any{d.day, d.typ, d.total}
			for _, s := range statusColumns {
				r = append(r, d.byStatus[string(s)])
			}
			r = append(r, d.partial)
			if err := out.Row(r...); err != nil {
				return err
			}
		}
		if err := out.Sheet("Contacts by city"); err != nil {
			return err
		}
		if err := out.Row("City", "Contacts"); err != nil {
			return err
		}
		for _, c := range cities {
			city := c.city
			if city == "" {
				city = "(none)"
			}
			if err := out.Row(city, c.n); err != nil {
				return err
			}
		}
		return out.Close()
	})
	if err != nil {
		return err
	}
	if err := e.cfg.Artifacts.Replace(ctx, job.Task.ID, artifact.KindReport, a.ID); err != nil {
		job.Warn("could not remove an earlier report", "err", err)
	}
	job.Progress(3, 3)
	job.SetResultStatus("SUCCESS")
	return job.SetResult(ReportResult{File: name, Tasks: tasks, Contacts: contacts})
}

func fmtTime(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func (e *Exporter) taskOutcomes(ctx context.Context, in ReportInput) ([]*dayRow, error) {
	day := "substr(created_at, 1, 10)"
	ph := func(int) string { return "?" }
	if e.cfg.Postgres {
		day = "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
		ph = func(i int) string { return fmt.Sprintf("$%d", i) }
	}
	q := "SELECT " + day + " AS day, type, status, COALESCE(result_status, ''), COUNT(*) FROM tasks WHERE 1 = 1"
	var args []any
	if in.Since != nil {
		args = append(args, in.Since.UTC())
		q += " AND created_at >= " + ph(len(args))
	}
	if in.Until != nil {
		args = append(args, in.Until.UTC())
		q += " AND created_at < " + ph(len(args))
	}
	// Hand-written SQL is not filtered by package access: scope it here.
	if v, _ := auth.FromContext(ctx); !v.SeesAll() {
		args = append(args, v.User)
		q += " AND owner = " + ph(len(args))
	}
	q += " GROUP BY 1, 2, 3, 4"
	rows, err := e.cfg.Client.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("report: task outcomes: %w", err)
	}
	defer rows.Close()
	byKey := map[[2]string]*dayRow{}
	for rows.Next() {
		var d, typ, status, rs string
		var n int
		if err := rows.Scan(&d, &typ, &status, &rs, &n); err != nil {
			return nil, fmt.Errorf("report: task outcomes: %w", err)
		}
		k := [2]string{d, typ}
		r := byKey[k]
		if r == nil {
			r = &dayRow{day: d, typ: typ, byStatus: map[string]int{}}
			byKey[k] = r
		}
		r.byStatus[status] += n
		r.total += n
		if rs == "PARTIAL_SUCCESS" {
			r.partial += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: task outcomes: %w", err)
	}
	out := make([]*dayRow, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].day != out[j].day {
			return out[i].day < out[j].day
		}
		return out[i].typ < out[j].typ
	})
	return out, nil
}

type cityCount struct {
	city string
	n    int
}

func (e *Exporter) contactsByCity(ctx context.Context) ([]cityCount, error) {
	q, args := "SELECT city, COUNT(*) FROM contacts", []any{}
	// Hand-written SQL is not filtered by package access: scope it here.
	if v, _ := auth.FromContext(ctx); !v.SeesAll() {
		ph := "?"
		if e.cfg.Postgres {
			ph = "$1"
		}
		q += " WHERE task_id IN (SELECT id FROM tasks WHERE owner = " + ph + ")"
		args = append(args, v.User)
	}
	rows, err := e.cfg.Client.QueryContext(ctx, q+" GROUP BY city ORDER BY 2 DESC, 1", args...)
	if err != nil {
		return nil, fmt.Errorf("report: contacts by city: %w", err)
	}
	defer rows.Close()
	var out []cityCount
	for rows.Next() {
		var c sql.NullString
		var n int
		if err := rows.Scan(&c, &n); err != nil {
			return nil, fmt.Errorf("report: contacts by city: %w", err)
		}
		out = append(out, cityCount{city: c.String, n: n})
	}
	return out, rows.Err()
}
