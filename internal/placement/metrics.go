package placement

import "github.com/prometheus/client_golang/prometheus"

// metrics are placement's series.
type metrics struct {
	creates  *prometheus.CounterVec // result: placed, no_node
	refusals prometheus.Counter     // a node refused a create; the next was tried
	// foreignEvents counts events a node sent of sandboxes (or
	// executions) not placed on it, dropped.
	foreignEvents prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "placement_creates_total",
			Help: "Creates placed on a node (placed) or refused because no ready node had room or every one refused (no_node).",
		}, []string{"result"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "placement_node_refusals_total",
			Help: "Creates a node refused (or lost its room to another replica's reservation); the next candidate was tried.",
		}),
		foreignEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "placement_node_events_refused_total",
			Help: "Events a node sent of sandboxes not placed on it, or of an execution that is not theirs now: dropped.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.creates, m.refusals, m.foreignEvents} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
