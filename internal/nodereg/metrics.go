package nodereg

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/store"
)

var descNodes = prometheus.NewDesc("nodes", "Registered nodes, by status (ready, draining, cordoned, unreachable, lost).", []string{"status"}, nil)

// RegisterMetrics registers nodes{status} (read from the store at each
// scrape) and node_heartbeats_total{result} (accepted, unauthorized, forbidden,
// invalid, error) with reg.
func (r *Registry) RegisterMetrics(reg prometheus.Registerer) error {
	r.heartbeats = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "node_heartbeats_total",
		Help: "Node heartbeats received by the API, by result (accepted, unauthorized, forbidden, invalid, error).",
	}, []string{"result"})
	if err := reg.Register(r.heartbeats); err != nil {
		return err
	}
	return reg.Register(nodesCollector{r})
}

func (r *Registry) countHeartbeat(result string) {
	if r.heartbeats != nil {
		r.heartbeats.WithLabelValues(result).Inc()
	}
}

type nodesCollector struct{ r *Registry }

func (c nodesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descNodes }

func (c nodesCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.r.nodes.ListNodes(ctx)
	if err != nil {
		c.r.log.Warn("nodes metric", "error", err)
		return
	}
	count := map[string]int{store.NodeReady: 0, store.NodeDraining: 0, store.NodeCordoned: 0, store.NodeUnreachable: 0, store.NodeLost: 0}
	for _, n := range nodes {
		count[n.Status()]++
	}
	for status, n := range count {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), status)
	}
}
