package noderole

import (
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/node"
)

func TestTuningApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   Tuning
		want node.Config
	}{
		{"zero keeps the agent's defaults", Tuning{}, node.Config{}},
		{"watchdog jittered around the interval", Tuning{WatchdogInterval: 40 * time.Second}, node.Config{WatchdogMin: 30 * time.Second, WatchdogMax: 50 * time.Second}},
		{"negative watchdog disables it", Tuning{WatchdogInterval: -1}, node.Config{WatchdogMin: -1}},
		{"pools and metrics", Tuning{PoolConcurrency: 5, MetricsRetention: 2 * time.Hour}, node.Config{PoolConcurrency: 5, MetricsRetention: 2 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got node.Config
			tc.in.apply(&got)
			if got.WatchdogMin != tc.want.WatchdogMin || got.WatchdogMax != tc.want.WatchdogMax ||
				got.PoolConcurrency != tc.want.PoolConcurrency || got.MetricsRetention != tc.want.MetricsRetention {
				t.Errorf("apply(%+v) = watchdog %v–%v, pools %d, retention %v", tc.in, got.WatchdogMin, got.WatchdogMax, got.PoolConcurrency, got.MetricsRetention)
			}
		})
	}
}
