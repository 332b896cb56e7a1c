package bench

import (
	"math"
	"testing"
	"time"
)

func durations(msList ...int) []time.Duration {
	out := make([]time.Duration, len(msList))
	for i, v := range msList {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample any p", durations(7), 99, 7 * time.Millisecond},
		{"median of odd count", durations(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"median of even count is the lower middle", durations(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p95 of 100", hundred, 95, 95 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p99 of 10 is the max", durations(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"tiny p is the min", durations(4, 5, 6), 0.1, 4 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		samples  []time.Duration
		failures int
		want     Summary
	}{
		{"no samples", nil, 3, Summary{Failures: 3}},
		{"unsorted input", durations(30, 10, 20), 1,
			Summary{N: 3, Failures: 1, P50Ms: 20, P95Ms: 30, P99Ms: 30, MeanMs: 20, MinMs: 10, MaxMs: 30}},
		{"sub-millisecond rounded to µs", []time.Duration{1500 * time.Nanosecond, 2500 * time.Nanosecond}, 0,
			Summary{N: 2, P50Ms: 0.002, P95Ms: 0.003, P99Ms: 0.003, MeanMs: 0.002, MinMs: 0.002, MaxMs: 0.003}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := append([]time.Duration(nil), tt.samples...)
			if got := Summarize(tt.samples, tt.failures); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			for i := range in {
				if in[i] != tt.samples[i] {
					t.Fatalf("Summarize reordered its input: %v", tt.samples)
				}
			}
		})
	}
}

func TestSlope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ys   []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{5}, 0},
		{"two points", []float64{100, 80}, -20},
		{"exact line", []float64{1000, 990, 980, 970}, -10},
		{"noise averages out", []float64{1000, 985, 985, 965, 965}, -9},
		{"flat", []float64{3, 3, 3}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := slope(tt.ys); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("slope(%v) = %v, want %v", tt.ys, got, tt.want)
			}
		})
	}
}
