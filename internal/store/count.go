package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent/task"
)

// Count is how many tasks a filter selects: exact while counting them is
// quick, estimated from a sample of the table once it would not be.
type Count struct {
	// N is the count, or the estimate when Exact is false.
	N int
	// Exact says N was counted. An estimate is made only on PostgreSQL.
	Exact bool
	// Low and High bound the estimate at 95% confidence; both are N when
	// Exact.
	Low, High int
	// Sampled is the share of the table's pages the estimate read (0..1);
	// 0 when Exact.
	Sampled float64
}

// errCaptured is what a query run under captureQuery returns: the query
// was written down, not sent.
var errCaptured = errors.New("store: query captured, not run")

type captureKey struct{}

type capturedQuery struct {
	query string
	args  []any
}

// capturingDriver is the client's driver. A query run through the client
// with a context from captureQuery is not sent: its SQL and arguments are
// kept, so that the store can run the query an ent builder (with the
// access filter's interceptors) would run, in a form the builder cannot
// write (a count with a time limit, a sample).
type capturingDriver struct{ *entsql.Driver }

func (d capturingDriver) Query(ctx context.Context, query string, args, v any) error {
	if c, ok := ctx.Value(captureKey{}).(*capturedQuery); ok {
		c.query = query
		c.args, _ = args.([]any)
		return errCaptured
	}
	return d.Driver.Query(ctx, query, args, v)
}

// sampleRows is about how many rows an estimate reads: enough for an
// interval of a few percent of the count on a filter that holds for a
// tenth of the tasks, in a few tens of milliseconds on this machine.
const sampleRows = 30_000

// CountTasks counts the tasks that ids selects. ids runs an ent query of
// task ids (built with the caller's filter, through the client, so the
// access filter applies), and is called once, with a context under which
// the query is captured rather than sent. The count is exact when it
// finishes within budget (or budget is 0, or the database is SQLite);
// otherwise, on PostgreSQL, the same filter is counted on a random sample
// of the table's pages (TABLESAMPLE SYSTEM) and N is scaled up, with a 95%
// interval from the spread of the sampled pages (a ratio estimator over
// page clusters).
func (s *Store) CountTasks(ctx context.Context, ids func(context.Context) error, budget time.Duration) (Count, error) {
	g, err := s.CountTasksBy(ctx, ids, budget)
	if err != nil {
		return Count{}, err
	}
	return g.Count(func([]string) bool { return true }), nil
}

// GroupCounts are counts of tasks by the values of some of their columns
// (CountTasksBy), exact or estimated from a sample of the table.
type GroupCounts struct {
	// Exact says the tasks were counted.
	Exact bool
	// Sampled is the share of the table's pages an estimate read; 0 when
	// Exact.
	Sampled float64
	groups  [][]string
	counted map[string]int
	sample  *pageSample
}

// Groups are the values of the columns seen, one slice per group, in
// the order of the columns.
func (g GroupCounts) Groups() [][]string { return g.groups }

// Count is the count (or the estimate, with its interval) of the tasks in
// the groups match accepts.
func (g GroupCounts) Count(match func(group []string) bool) Count {
	if g.Exact {
		n := 0
		for _, k := range g.groups {
			if match(k) {
				n += g.counted[groupKey(k)]
			}
		}
		return Count{N: n, Exact: true, Low: n, High: n}
	}
	ms := make([]float64, len(g.sample.rows))
	for _, k := range g.groups {
		if match(k) {
			for i, m := range g.sample.groups[groupKey(k)] {
				ms[i] += m
			}
		}
	}
	c := ratioEstimate(g.sample.rows, ms, g.sample.total)
	c.Sampled = g.Sampled
	return c
}

func groupKey(vals []string) string { return strings.Join(vals, "\x00") }

// CountTasksBy counts the tasks that ids selects (as CountTasks does, and
// estimated past budget in the same way) grouped by the values of the
// tasks' columns cols (names of task columns: "type", "status").
func (s *Store) CountTasksBy(ctx context.Context, ids func(context.Context) error, budget time.Duration, cols ...string) (GroupCounts, error) {
	for _, c := range cols {
		if !task.ValidColumn(c) {
			return GroupCounts{}, fmt.Errorf("store: count tasks by %q: no such column", c)
		}
	}
	c := &capturedQuery{}
	err := ids(context.WithValue(ctx, captureKey{}, c))
	if err == nil || !errors.Is(err, errCaptured) {
		if err == nil {
			err = errors.New("store: count: the query was not run through the store's client")
		}
		return GroupCounts{}, err
	}
	prefix := tasksSelect
	if !s.d.postgres() {
		prefix = strings.ReplaceAll(prefix, `"`, "`")
	}
	where, ok := strings.CutPrefix(c.query, prefix)
	if !ok {
		return GroupCounts{}, fmt.Errorf("count tasks: cannot rewrite the query %.60q", c.query)
	}
	sel := make([]string, len(cols))
	for i, col := range cols {
		sel[i] = `CAST("tasks"."` + col + `" AS TEXT)`
	}
	count := `SELECT count(*) FROM "tasks"` + where
	if len(cols) > 0 {
		count = `SELECT ` + strings.Join(sel, ", ") + `, count(*) FROM "tasks"` + where + ` GROUP BY ` + strings.Join(sel, ", ")
	}
	if !s.d.postgres() || budget <= 0 {
		rows, err := s.db.QueryContext(ctx, count, c.args...)
		if err != nil {
			return GroupCounts{}, fmt.Errorf("count tasks: %w", err)
		}
		return scanGroups(rows, len(cols))
	}
	g, err := s.countWithin(ctx, count, c.args, len(cols), budget)
	if err == nil {
		return g, nil
	}
	if !isQueryCanceled(err) || ctx.Err() != nil {
		return GroupCounts{}, fmt.Errorf("count tasks: %w", err)
	}
	return s.estimateTasks(ctx, where, c.args, sel)
}

// scanGroups reads the rows of a grouped count: the group's values, then
// its count (one row of count alone when there are no columns).
func scanGroups(rows *sql.Rows, cols int) (GroupCounts, error) {
	defer rows.Close()
	g := GroupCounts{Exact: true, counted: map[string]int{}}
	for rows.Next() {
		vals := make([]sql.NullString, cols)
		dest := make([]any, 0, cols+1)
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		var n int
		if err := rows.Scan(append(dest, &n)...); err != nil {
			return GroupCounts{}, fmt.Errorf("count tasks: %w", err)
		}
		key := make([]string, cols)
		for i, v := range vals {
			key[i] = v.String
		}
		g.groups = append(g.groups, key)
		g.counted[groupKey(key)] += n
	}
	if err := rows.Err(); err != nil {
		return GroupCounts{}, fmt.Errorf("count tasks: %w", err)
	}
	if cols == 0 && len(g.groups) == 0 {
		g.groups = [][]string{{}}
	}
	return g, nil
}

// countWithin runs a grouped count under a statement_timeout of budget.
func (s *Store) countWithin(ctx context.Context, count string, args []any, cols int, budget time.Duration) (GroupCounts, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return GroupCounts{}, err
	}
	defer func() { _ = tx.Rollback() }()
	ms := max(budget.Milliseconds(), 1)
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SET LOCAL statement_timeout = %d`, ms)); err != nil {
		return GroupCounts{}, err
	}
	rows, err := tx.QueryContext(ctx, count, args...)
	if err != nil {
		return GroupCounts{}, err
	}
	return scanGroups(rows, cols)
}

// isQueryCanceled reports PostgreSQL's query_canceled, what a
// statement_timeout ends a statement with.
func isQueryCanceled(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == "57014"
}

// tasksSelect is how an ent query of task ids begins on PostgreSQL (on
// SQLite, with backquotes); CountTasksBy
// rewrites it into a count, or a count of a sample of the table's pages.
const tasksSelect = `SELECT "tasks"."id" FROM "tasks"`

// pageSample is a random sample of the tasks table's pages: each sampled
// page's rows, and for each group the page's rows that match the filter
// and are in the group, aligned with rows.
type pageSample struct {
	total  float64 // the table's rows
	rows   []float64
	groups map[string][]float64
}

// estimateTasks estimates the counts of a filter (where: the FROM
// clause's rest of a query of tasks) by groups (sel: the grouped
// expressions) from a sample of tasks' pages, the same pages for the
// filter and for the table (REPEATABLE), grouped by page: N = T * m/s,
// where T is the table's row estimate, m the matching and s all the
// sampled rows; the interval comes from the variance of the pages' ratios
// (Cochran's ratio estimator).
func (s *Store) estimateTasks(ctx context.Context, where string, args []any, sel []string) (GroupCounts, error) {
	// The table's rows as the planner reckons them: the density of the
	// last ANALYZE times the pages the table has now.
	var total float64
	var pages int64
	if err := s.db.QueryRowContext(ctx, `
SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 0 END * n, n
FROM pg_class, LATERAL (SELECT pg_relation_size(oid) / current_setting('block_size')::bigint AS n) AS size
WHERE oid = 'tasks'::regclass`).Scan(&total, &pages); err != nil {
		return GroupCounts{}, fmt.Errorf("count tasks: table size: %w", err)
	}
	guess := total
	if guess <= 0 { // never analyzed: about 40 task rows fill a page
		guess = 40 * float64(pages)
	}
	pct := 100.0
	if guess > sampleRows {
		pct = 100 * sampleRows / guess
	}
	// One pass over the sample: per page and group, its rows and those
	// the filter keeps.
	matched := "count(*)"
	if where != "" {
		cond, ok := strings.CutPrefix(where, " WHERE ")
		if !ok {
			return GroupCounts{}, fmt.Errorf("count tasks: cannot sample the filter %.60q", where)
		}
		matched = "count(*) FILTER (WHERE " + cond + ")"
	}
	cols, gcols := "", ""
	for i, e := range sel {
		cols += fmt.Sprintf(", %s AS g%d", e, i)
		gcols += fmt.Sprintf(", g%d", i)
	}
	q := fmt.Sprintf(`SELECT ("tasks".ctid::text::point)[0] AS page%s, count(*), %s FROM "tasks" TABLESAMPLE SYSTEM (%g) REPEATABLE (1) GROUP BY page%s ORDER BY page`,
		cols, matched, pct, gcols)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return GroupCounts{}, fmt.Errorf("count tasks: sample: %w", err)
	}
	defer rows.Close()
	ps := &pageSample{groups: map[string][]float64{}}
	g := GroupCounts{Sampled: pct / 100, sample: ps}
	var sampled float64
	last := math.NaN()
	for rows.Next() {
		var pg, n, m float64
		vals := make([]sql.NullString, len(sel))
		dest := []any{&pg}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(append(dest, &n, &m)...); err != nil {
			return GroupCounts{}, fmt.Errorf("count tasks: sample: %w", err)
		}
		if pg != last {
			last = pg
			ps.rows = append(ps.rows, 0)
		}
		ps.rows[len(ps.rows)-1] += n
		sampled += n
		if m == 0 {
			continue
		}
		key := make([]string, len(sel))
		for i, v := range vals {
			key[i] = v.String
		}
		k := groupKey(key)
		per, ok := ps.groups[k]
		if !ok {
			g.groups = append(g.groups, key)
		}
		for len(per) < len(ps.rows) {
			per = append(per, 0)
		}
		per[len(ps.rows)-1] += m
		ps.groups[k] = per
	}
	if err := rows.Err(); err != nil {
		return GroupCounts{}, fmt.Errorf("count tasks: sample: %w", err)
	}
	for k, per := range ps.groups {
		for len(per) < len(ps.rows) {
			per = append(per, 0)
		}
		ps.groups[k] = per
	}
	if len(sel) == 0 && len(g.groups) == 0 {
		g.groups = [][]string{{}}
	}
	if total <= 0 {
		total = sampled * 100 / pct // each page is in the sample with probability pct
	}
	ps.total = total
	return g, nil
}

// ratioEstimate scales the matching share of sampled pages (rows ns, of
// which ms match) to total rows, with a 95% interval: the ratio R = Σm/Σs
// has variance Σ(m_i - R s_i)² / (k(k-1) s̄²) over k pages.
func ratioEstimate(ns, ms []float64, total float64) Count {
	k := float64(len(ns))
	var sumS, sumM float64
	for i := range ns {
		sumS, sumM = sumS+ns[i], sumM+ms[i]
	}
	if sumS == 0 {
		return Count{Low: 0, High: int(math.Ceil(total))}
	}
	r := sumM / sumS
	var ss float64
	for i := range ns {
		d := ms[i] - r*ns[i]
		ss += d * d
	}
	half := 0.0
	if k > 1 {
		mean := sumS / k
		half = 1.96 * math.Sqrt(ss/(k*(k-1)*mean*mean))
	}
	if r == 0 || r == 1 {
		// No page varied: the interval is that of a share seen in none
		// (or all) of the sampled rows, the rule of three.
		half = max(half, 3/sumS)
	}
	n := int(math.Round(r * total))
	low := int(math.Floor(max(r-half, 0) * total))
	high := int(math.Ceil(min(r+half, 1) * total))
	return Count{N: n, Low: min(low, n), High: max(high, n)}
}
