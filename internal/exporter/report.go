package exporter

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/taskgraph/taskgraph/ent/predicate"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
	"github.com/taskgraph/taskgraph/internal/tasktype"
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

func (e *Exporter) report(ctx context.Context, job *tasktype.Job, in ReportInput) error {
	// Aggregates are read as the task's owner, like exports, so that
	// package access scopes them (through the ent client for tasks, its
	// TaskRule for contacts): an operator's report counts its own tasks
	// and contacts, an admin's its tenant's.
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
		TaskID: &job.Task.ID, Owner: job.Task.Owner, OwnerSource: job.Task.OwnerSource, Tenant: job.Task.Tenant, TaskType: job.Task.Type, Kind: artifact.KindReport,
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

// taskOutcomes counts tasks per day, type, status and result status. It
// reads through the ent client, so package access scopes it to what the
// viewer of ctx (the report's owner) may see, as every other read.
func (e *Exporter) taskOutcomes(ctx context.Context, in ReportInput) ([]*dayRow, error) {
	var preds []predicate.Task
	if in.Since != nil {
		preds = append(preds, task.CreatedAtGTE(in.Since.UTC()))
	}
	if in.Until != nil {
		preds = append(preds, task.CreatedAtLT(in.Until.UTC()))
	}
	var counts []struct {
		Day          string `sql:"day"`
		Type         string `sql:"type"`
		Status       string `sql:"status"`
		ResultStatus string `sql:"rs"`
		N            int    `sql:"n"`
	}
	err := e.cfg.Client.Task.Query().Where(preds...).Modify(func(s *sql.Selector) {
		day := "substr(" + s.C(task.FieldCreatedAt) + ", 1, 10)"
		if e.cfg.Postgres {
			day = "to_char(" + s.C(task.FieldCreatedAt) + " AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
		}
		rs := "COALESCE(" + s.C(task.FieldResultStatus) + ", '')"
		s.Select(sql.As(day, "day"), sql.As(s.C(task.FieldType), "type"), sql.As(s.C(task.FieldStatus), "status"), sql.As(rs, "rs"), sql.As(sql.Count("*"), "n")).
			GroupBy(day, s.C(task.FieldType), s.C(task.FieldStatus), rs)
	}).Scan(ctx, &counts)
	if err != nil {
		return nil, fmt.Errorf("report: task outcomes: %w", err)
	}
	byKey := map[[2]string]*dayRow{}
	for _, c := range counts {
		k := [2]string{c.Day, c.Type}
		r := byKey[k]
		if r == nil {
			r = &dayRow{day: c.Day, typ: c.Type, byStatus: map[string]int{}}
			byKey[k] = r
		}
		r.byStatus[c.Status] += c.N
		r.total += c.N
		if c.ResultStatus == "PARTIAL_SUCCESS" {
			r.partial += c.N
		}
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

// contactsByCity counts the contacts the viewer of ctx may see per city,
// most first.
func (e *Exporter) contactsByCity(ctx context.Context) ([]cityCount, error) {
	counts, err := e.contacts().CountByCity(ctx)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	out := make([]cityCount, len(counts))
	for i, c := range counts {
		out[i] = cityCount{city: c.City, n: c.Count}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].city < out[j].city
	})
	return out, nil
}
