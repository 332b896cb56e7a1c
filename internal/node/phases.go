package node

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// An operation's phases (a claim's thaw, network, /init, ...; a pause's
// checkpoint and release; a resume's host objects, restore and envd) are
// timed one after the other: each ends where the next begins. They are
// observed in sandbox_operation_phase_seconds{op,phase} and logged with
// the operation's own log line (phase_<name> keys), which is what the
// benchmarks read to print each phase's p50 and p99.

// newPhaseDurations is sandbox_operation_phase_seconds{op,phase}.
func newPhaseDurations() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandbox_operation_phase_seconds",
		Help:    "Duration of each phase of the node's claims of warm pool members, pauses, preparations of paused sandboxes that keep their host objects, resumes and forks.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
	}, []string{"op", "phase"})
}

// phaseTimer times the phases of one operation op.
type phaseTimer struct {
	clock Clock
	op    string
	last  time.Time
	names []string
	ds    []time.Duration
}

func (a *Agent) phases(op string) *phaseTimer {
	return &phaseTimer{clock: a.clock, op: op, last: a.clock.Now()}
}

// done ends phase name (begun where the previous one ended). A nil timer
// times nothing.
func (p *phaseTimer) done(name string) {
	if p == nil {
		return
	}
	now := p.clock.Now()
	p.names = append(p.names, name)
	p.ds = append(p.ds, now.Sub(p.last))
	p.last = now
}

// observe records the phases in h and returns them as log attributes.
func (p *phaseTimer) observe(h *prometheus.HistogramVec) []any {
	out := make([]any, 0, len(p.names))
	for i, n := range p.names {
		h.WithLabelValues(p.op, n).Observe(p.ds[i].Seconds())
		out = append(out, slog.Duration("phase_"+n, p.ds[i]))
	}
	return out
}
