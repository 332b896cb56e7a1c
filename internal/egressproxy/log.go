package egressproxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Entry is one line of a sandbox's egress log: a connection (when it
// ended, or when it was refused) or a DNS question.
type Entry struct {
	Time     time.Time
	Proto    string // "tcp" or "dns"
	Host     string // the name the connection or question carried ("" for none)
	Addr     string // the address dialled ("" for a DNS question)
	Port     int
	Allowed  bool
	Reason   string // one of the Reason constants
	BytesOut int64  // sandbox to destination
	BytesIn  int64  // destination to sandbox
	Duration time.Duration
	// Open marks a connection still open (its bytes so far).
	Open bool
}

// ring keeps the last entries of one sandbox.
type ring struct {
	mu   sync.Mutex
	buf  []Entry
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]Entry, n)} }

func (r *ring) add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = e
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// entries returns the kept entries, oldest first.
func (r *ring) entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Entry(nil), r.buf[:r.next]...)
	}
	return append(append([]Entry(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// metrics are the proxy's Prometheus series.
type metrics struct {
	conns  *prometheus.CounterVec // decision, reason
	dns    *prometheus.CounterVec // decision
	bytes  *prometheus.CounterVec // direction
	active prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_connections_total",
			Help: "Sandbox TCP connections the egress proxy decided, by decision (allowed, denied) and reason."}, []string{"decision", "reason"}),
		dns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_dns_queries_total",
			Help: "DNS questions of sandboxes the egress proxy answered, by decision (allowed, denied)."}, []string{"decision"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egress_bytes_total",
			Help: "Bytes through the egress proxy, by direction (out: sandbox to destination, in: back)."}, []string{"direction"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egress_active_connections",
			Help: "Sandbox connections open through the egress proxy."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.conns, m.dns, m.bytes, m.active} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func decisionLabel(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}
