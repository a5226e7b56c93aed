// Package metrics exposes a node's numbers to Prometheus at /metrics: tasks
// by state and type, claims, executions and their durations, retries,
// timeouts, watchdog actions, event fan-out lag, subscribers, relay traffic
// and leadership.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/task"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Metrics holds a node's collectors.
type Metrics struct {
	reg        *prometheus.Registry
	claims     prometheus.Counter
	executions *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	timeouts   *prometheus.CounterVec
	watchdog   *prometheus.CounterVec
	lag        prometheus.Histogram
	counts     *taskCounts            // nil until Register is given a client
	notices    *prometheus.CounterVec // see RegisterAlerts
}

// Sources are what the gauges read at scrape time. Nil fields are skipped.
type Sources struct {
	Client  *ent.Client
	Broker  *events.Broker
	Relay   func() (received, resyncs int64)
	Leading func() bool
	// Inconsistent counts the pairs whose task did not mirror its
	// instance that this node's claims and finishes met (store).
	Inconsistent func() int64
}

// New registers the node's own collectors; Register adds those that read
// other parts of the process.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskgraph_claims_total", Help: "Instances claimed by this node's workers.",
		}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgraph_executions_total", Help: "Executions ended on this node, by type, outcome and error kind.",
		}, []string{"type", "outcome", "error_kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "taskgraph_execution_duration_seconds", Help: "How long handlers ran, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgraph_retries_scheduled_total", Help: "Retries scheduled by this node's workers, by type.",
		}, []string{"type"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgraph_timeouts_total", Help: "Executions that timed out, by who noticed (worker or watchdog).",
		}, []string{"source"}),
		watchdog: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskgraph_watchdog_actions_total", Help: "Watchdog actions applied, by action.",
		}, []string{"action"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "taskgraph_event_fanout_lag_seconds", Help: "Time from a change's commit to its fan-out to subscribers on this node.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}),
	}
	m.reg.MustRegister(m.claims, m.executions, m.duration, m.retries, m.timeouts, m.watchdog, m.lag,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds the collectors reading src.
func (m *Metrics) Register(src Sources) {
	if src.Client != nil {
		m.counts = &taskCounts{client: src.Client, cache: map[string]cachedCounts{}}
	}
	if b := src.Broker; b != nil {
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskgraph_subscribers", Help: "Client subscriptions to task changes on this node."},
				func() float64 { return float64(b.Stats().TaskSubscribers) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskgraph_log_subscribers", Help: "Client subscriptions to log tails on this node."},
				func() float64 { return float64(b.Stats().LogSubscribers) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgraph_events_published_total", Help: "Task changes fanned out on this node."},
				func() float64 { return float64(b.Stats().Published) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgraph_subscribers_dropped_total", Help: "Subscribers dropped for falling behind."},
				func() float64 { return float64(b.Stats().Dropped) }),
		)
	}
	if f := src.Inconsistent; f != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgraph_inconsistent_pairs_total",
			Help: "Executions whose task did not mirror them, met by this node's claims and finishes (each failed alone; the watchdog repairs them)."},
			func() float64 { return float64(f()) }))
	}
	if r := src.Relay; r != nil {
		m.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgraph_relay_changes_received_total", Help: "Changes received from other nodes."},
				func() float64 { n, _ := r(); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskgraph_relay_resyncs_total", Help: "Resyncs after the listening connection was lost."},
				func() float64 { _, n := r(); return float64(n) }),
		)
	}
	if l := src.Leading; l != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskgraph_watchdog_leader", Help: "1 while this node's watchdog leads."},
			func() float64 {
				if l() {
					return 1
				}
				return 0
			}))
	}
}

// Handler serves the metrics as the viewer of the request's context sees
// them (mount it behind authentication; a request without a viewer is
// refused). Tenants isolate here too:
//
//   - a platform administrator (or the process itself, for a listener of
//     its own) sees the node's metrics and taskgraph_tasks over every
//     tenant;
//   - an admin sees taskgraph_tasks of its tenant, an operator or viewer
//     of its own tasks — and none of the node's metrics, which count every
//     tenant's work.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := auth.Require(r.Context())
		if err != nil {
			auth.WriteError(w, http.StatusUnauthorized, "UNAUTHENTICATED", err.Error())
			return
		}
		reg := prometheus.NewRegistry()
		if m.counts != nil {
			reg.MustRegister(&viewerCounts{counts: m.counts, viewer: v})
		}
		var g prometheus.Gatherer = reg
		if v.SeesEveryTenant() {
			g = prometheus.Gatherers{m.reg, reg}
		}
		promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// Claimed counts claims.
func (m *Metrics) Claimed(n int) { m.claims.Add(float64(n)) }

// Executed counts an execution's outcome.
func (m *Metrics) Executed(taskType string, o store.Outcome, d time.Duration) {
	m.executions.WithLabelValues(taskType, string(o.Status), string(o.Kind)).Inc()
	m.duration.WithLabelValues(taskType).Observe(d.Seconds())
	if o.Retry != nil {
		m.retries.WithLabelValues(taskType).Inc()
	}
	if o.Kind == lifecycle.KindTimeout {
		m.timeouts.WithLabelValues("worker").Inc()
	}
}

// WatchdogActed counts a watchdog action.
func (m *Metrics) WatchdogActed(action string) {
	m.watchdog.WithLabelValues(action).Inc()
	if action == "timeout" || action == "stale_heartbeat" {
		m.timeouts.WithLabelValues("watchdog").Inc()
	}
}

// ObserveChange records the fan-out lag of a change.
func (m *Metrics) ObserveChange(c events.TaskChange) {
	if !c.Task.UpdatedAt.IsZero() {
		m.lag.Observe(time.Since(c.Task.UpdatedAt).Seconds())
	}
}

// taskCounts reads tasks by status and type at scrape time, as the scraper
// sees them (package access scopes the query), at most every few seconds
// per scope, so that scrapers cannot load the database.
type taskCounts struct {
	client *ent.Client
	mu     sync.Mutex
	cache  map[string]cachedCounts // by scope: what one kind of viewer sees
}

type cachedCounts struct {
	at   time.Time
	rows []countRow
}

type countRow struct {
	Type   string           `json:"type"`
	Status lifecycle.Status `json:"status"`
	Count  int              `json:"count"`
}

// countsTTL is how long counts are reused; maxScopes bounds the cache.
const (
	countsTTL = 5 * time.Second
	maxScopes = 1024
)

// scope names what v sees: every viewer with the same scope sees the same
// counts.
func scope(v auth.Viewer) string {
	switch {
	case v.SeesEveryTenant():
		return "all"
	case v.IsAdmin():
		return "tenant " + v.Tenant
	}
	return "owner " + v.Identity().Key()
}

func (c *taskCounts) read(v auth.Viewer) []countRow {
	key := scope(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if e, ok := c.cache[key]; ok && now.Sub(e.at) < countsTTL {
		return e.rows
	}
	ctx, cancel := context.WithTimeout(auth.NewContext(context.Background(), v), 5*time.Second)
	defer cancel()
	var rows []countRow
	if err := c.client.Task.Query().GroupBy(task.FieldType, task.FieldStatus).Aggregate(ent.Count()).Scan(ctx, &rows); err != nil {
		return c.cache[key].rows // the last counts, if any
	}
	if len(c.cache) >= maxScopes {
		for k, e := range c.cache {
			if now.Sub(e.at) >= countsTTL {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxScopes {
			clear(c.cache)
		}
	}
	c.cache[key] = cachedCounts{at: now, rows: rows}
	return rows
}

var tasksDesc = prometheus.NewDesc("taskgraph_tasks", "Tasks by status and type that the scraper may see (all nodes; read from the database).", []string{"status", "type"}, nil)

// viewerCounts collects taskgraph_tasks for one scrape, as its viewer.
type viewerCounts struct {
	counts *taskCounts
	viewer auth.Viewer
}

func (c *viewerCounts) Describe(ch chan<- *prometheus.Desc) { ch <- tasksDesc }

func (c *viewerCounts) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.counts.read(c.viewer) {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(r.Count), string(r.Status), r.Type)
	}
}
