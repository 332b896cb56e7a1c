// Package bench is the harness behind `warren bench`: it drives Warren's
// HTTP API (and envd through the edge proxy) like a user's program would,
// measures time to interactive, bursts, exec and file round trips, pause,
// resume and fork, and idle density, and reports them as a table and as
// JSON. It can start its own `warren serve` servers, one per driver, each
// isolated on the host (data dir, cgroup root, nftables table, address
// range, veth prefix), so runsc and runc are measured in the same run.
package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of timings. Durations are in milliseconds.
type Summary struct {
	// N counts successful samples, Failures the attempts that failed.
	N        int     `json:"n"`
	Failures int     `json:"failures"`
	P50Ms    float64 `json:"p50Ms"`
	P95Ms    float64 `json:"p95Ms"`
	P99Ms    float64 `json:"p99Ms"`
	MeanMs   float64 `json:"meanMs"`
	MinMs    float64 `json:"minMs"`
	MaxMs    float64 `json:"maxMs"`
}

// Summarize returns the percentiles (nearest rank), mean, min and max of
// samples and records failures. An empty sample set gives zero figures.
func Summarize(samples []time.Duration, failures int) Summary {
	s := Summary{N: len(samples), Failures: failures}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	s.P50Ms = ms(Percentile(sorted, 50))
	s.P95Ms = ms(Percentile(sorted, 95))
	s.P99Ms = ms(Percentile(sorted, 99))
	s.MeanMs = ms(sum / time.Duration(len(sorted)))
	s.MinMs = ms(sorted[0])
	s.MaxMs = ms(sorted[len(sorted)-1])
	return s
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples: the smallest sample such that at least p % of the
// samples are at or below it. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
