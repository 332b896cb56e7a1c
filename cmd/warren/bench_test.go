package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/bench"
)

func TestBenchNeedsATarget(t *testing.T) {
	t.Setenv("E2B_API_URL", "")
	t.Setenv("E2B_API_KEY", "")
	tests := []struct {
		name string
		args []string
	}{
		{"nothing", []string{"bench", "--quick"}},
		{"url without key", []string{"bench", "--api-url", "http://127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			root := newRoot(&out, &errb)
			root.SetArgs(tt.args)
			err := root.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), "--drivers") {
				t.Fatalf("err = %v, want one naming --drivers and --api-url", err)
			}
		})
	}
}

func TestWriteReport(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bench.json")
	rep := &bench.Report{Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Mode: "quick",
		Runs: []*bench.Run{{Driver: "runc", Metrics: []*bench.Metric{{Name: bench.MetricTTI, Summary: bench.Summary{N: 1, P50Ms: 5}}}}}}
	if err := writeReport(path, rep); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(data, &back); err != nil || back.Runs[0].Metrics[0].P50Ms != 5 {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".bench-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := writeReport(filepath.Join(t.TempDir(), "missing", "x.json"), rep); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}
