package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/alertincident"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/auth"
)

// alertGauges reads, at most every 5 s, the executions flagged as stalled
// (through the index of running executions) and the open incidents.
type alertGauges struct {
	client *ent.Client

	mu      sync.Mutex
	at      time.Time
	stalled int
	open    int
}

var (
	stalledDesc   = prometheus.NewDesc("taskgraph_stalled_executions", "Running executions flagged as stalled (all nodes; read from the database).", nil, nil)
	incidentsDesc = prometheus.NewDesc("taskgraph_alert_incidents_open", "Open alert incidents (all tenants).", nil, nil)
)

func (g *alertGauges) Describe(ch chan<- *prometheus.Desc) { ch <- stalledDesc; ch <- incidentsDesc }

func (g *alertGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) > 5*time.Second {
		ctx, cancel := context.WithTimeout(auth.NewSystemContext(context.Background()), 5*time.Second)
		defer cancel()
		stalled, err1 := g.client.TaskInstance.Query().Where(taskinstance.StatusEQ(lifecycle.Executing), taskinstance.StalledAtNotNil()).Count(ctx)
		open, err2 := g.client.AlertIncident.Query().Where(alertincident.StatusEQ(alertincident.StatusOPEN)).Count(ctx)
		if err1 == nil && err2 == nil {
			g.stalled, g.open, g.at = stalled, open, time.Now()
		}
	}
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(g.stalled))
	ch <- prometheus.MustNewConstMetric(incidentsDesc, prometheus.GaugeValue, float64(g.open))
}

// RegisterAlerts adds the stall and alert metrics: the gauges above and
// taskgraph_alert_notices_total{event}, counted by AlertNotice.
func (m *Metrics) RegisterAlerts(client *ent.Client) {
	m.notices = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskgraph_alert_notices_total", Help: "Alert notices handed to delivery by this node, by event (OPENED, RECOVERED).",
	}, []string{"event"})
	m.reg.MustRegister(m.notices, &alertGauges{client: client})
}

// AlertNotice counts a notice handed to delivery.
func (m *Metrics) AlertNotice(event string) {
	if m.notices != nil {
		m.notices.WithLabelValues(event).Inc()
	}
}
