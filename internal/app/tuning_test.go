package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/pkg/client"
)

func TestNodeTuningApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   NodeTuning
		want node.Config
	}{
		{"zero keeps the agent's defaults", NodeTuning{}, node.Config{}},
		{"watchdog jittered around the interval", NodeTuning{WatchdogInterval: 40 * time.Second}, node.Config{WatchdogMin: 30 * time.Second, WatchdogMax: 50 * time.Second}},
		{"negative watchdog disables it", NodeTuning{WatchdogInterval: -1}, node.Config{WatchdogMin: -1}},
		{"pools and metrics", NodeTuning{PoolConcurrency: 5, MetricsRetention: 2 * time.Hour}, node.Config{PoolConcurrency: 5, MetricsRetention: 2 * time.Hour}},
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

// TestServeDefaultLimits runs warren serve (fake driver) with server-wide
// team limits and checks the API enforces them.
func TestServeDefaultLimits(t *testing.T) {
	t.Parallel()
	const key = "e2b_00112233445566778899aabbccddeeff00112233"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			Listen: "127.0.0.1:0", DataDir: t.TempDir(), Driver: "fake", APIKey: key,
			Limits: store.Limits{MaxConcurrent: 1, MaxTimeout: 10 * time.Minute},
			Node:   NodeTuning{WatchdogInterval: -1},
			Logger: testenv.Logger(t), Out: io.Discard,
			Ready: func(a string) { addr <- a },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not start")
	}
	c := client.New(base, key)
	long := 3600
	if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: &long}); err == nil || !strings.Contains(err.Error(), "cannot be greater than 600 seconds") {
		t.Errorf("create over --max-timeout: %v", err)
	}
	if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"}); err != nil {
		t.Fatalf("first create: %v", err)
	}
	_, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if ae, ok := err.(*client.APIError); !ok || ae.Status != http.StatusTooManyRequests {
		t.Errorf("create over --max-concurrent 1: %v, want 429", err)
	}
}
