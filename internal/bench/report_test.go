package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

func sampleReport() *Report {
	return &Report{
		Date: time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC), Commit: "abc1234", Mode: "quick",
		Host: Host{CPUs: 2, MemTotalMiB: 24105, LoadAvgStart: "5.00 4.00 3.00", LoadAvgEnd: "6.00 5.00 4.00"},
		Runs: []*Run{
			{Driver: "runsc", APIURL: "http://127.0.0.1:1", WarmPool: "none", PoolClaims: &PoolClaims{},
				Metrics: []*Metric{
					{Name: MetricCreate, Summary: Summary{N: 10, P50Ms: 400, P95Ms: 900, P99Ms: 1000}},
					{Name: MetricTTI, Summary: Summary{N: 10, P50Ms: 600, P95Ms: 1500, P99Ms: 1800}},
					{Name: MetricBurst, Summary: Summary{N: 9, Failures: 1, P50Ms: 2000, P95Ms: 3000, P99Ms: 3000}, WallMs: 3100, Note: "10 at once"},
					{Name: MetricExec, Summary: Summary{N: 30, P50Ms: 4.5, P95Ms: 20, P99Ms: 25}},
					{Name: MetricFork10, Summary: Summary{N: 1, P50Ms: 3000, P95Ms: 3000, P99Ms: 3000}},
				},
				Density: &Density{BudgetMiB: 1024, MaxCount: 10, Started: 10, StopReason: "max count 10", HostMiBPerSandbox: 40, CgroupMiBPerSandbox: 20}},
			{Driver: "runc", APIURL: "http://127.0.0.1:2", WarmPool: "none",
				Metrics: []*Metric{
					{Name: MetricTTI, Summary: Summary{N: 10, P50Ms: 300, P95Ms: 500, P99Ms: 600}},
					{Name: MetricBurst, Summary: Summary{N: 10, P50Ms: 1000, P95Ms: 1500, P99Ms: 1500}, WallMs: 1600, Note: "10 at once"},
					{Name: MetricExec, Summary: Summary{N: 30, P50Ms: 1.5, P95Ms: 4, P99Ms: 5}},
					{Name: MetricFork10, Unsupported: true, Note: "not supported"},
				},
				Density: &Density{BudgetMiB: 1024, MaxCount: 10, Started: 10, StopReason: "max count 10", HostMiBPerSandbox: 10},
				Errors:  []string{"burst: create: 429: too many"}},
		},
	}
}

func TestComputeRatios(t *testing.T) {
	t.Parallel()
	rep := sampleReport()
	rep.ComputeRatios()
	want := []Ratio{
		{Metric: MetricTTI, Num: "runsc", Den: "runc", P50: 2, P95: 3},
		{Metric: MetricBurst, Num: "runsc", Den: "runc", P50: 2, P95: 2},
		{Metric: MetricExec, Num: "runsc", Den: "runc", P50: 3, P95: 5},
		{Metric: "density_host_mib_per_sandbox", Num: "runsc", Den: "runc", P50: 4},
	}
	if len(rep.Ratios) != len(want) {
		t.Fatalf("ratios = %+v, want %+v", rep.Ratios, want)
	}
	for i := range want {
		if rep.Ratios[i] != want[i] {
			t.Errorf("ratio %d = %+v, want %+v", i, rep.Ratios[i], want[i])
		}
	}
	// With pools: drivers are compared at the same pool setting, and each
	// driver without a pool over with one.
	pool := func(drv string, p50 float64) *Run {
		return &Run{Driver: drv, Pool: 5, WarmPool: "5", Metrics: []*Metric{{Name: MetricTTI, Summary: Summary{N: 5, P50Ms: p50, P95Ms: p50}}}}
	}
	withPools := &Report{Runs: []*Run{rep.Runs[0], pool("runsc", 100), rep.Runs[1], pool("runc", 50)}}
	withPools.ComputeRatios()
	var got []string
	for _, r := range withPools.Ratios {
		if r.Metric == MetricTTI {
			got = append(got, fmt.Sprintf("%s/%s=%.1f", r.Num, r.Den, r.P50))
		}
	}
	if want := "runsc/runsc+pool=6.0 runsc/runc=2.0 runsc+pool/runc+pool=2.0 runc/runc+pool=6.0"; strings.Join(got, " ") != want {
		t.Errorf("tti ratios with pools: %s, want %s", strings.Join(got, " "), want)
	}
	one := &Report{Runs: rep.Runs[:1]}
	one.ComputeRatios()
	if one.Ratios != nil {
		t.Errorf("one run has ratios %+v", one.Ratios)
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	rep := sampleReport()
	rep.ComputeRatios()
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `warren bench (quick) 2026-11-29T17:00:00Z commit abc1234
host: 2 CPUs, 24105 MiB, load 5.00 4.00 3.00 → 6.00 5.00 4.00

DRIVER  WARM POOL  METRIC     N   FAIL  P50     P95     P99     NOTE
runsc   none       create     10  0     400ms   900ms   1.00s   
runsc   none       tti        10  0     600ms   1.50s   1.80s   
runsc   none       burst      9   1     2.00s   3.00s   3.00s   wall 3.10s 10 at once
runsc   none       exec_true  30  0     4.50ms  20ms    25ms    
runsc   none       fork_10    1   0     3.00s   3.00s   3.00s   
runc    none       tti        10  0     300ms   500ms   600ms   
runc    none       burst      10  0     1.00s   1.50s   1.50s   wall 1.60s 10 at once
runc    none       exec_true  30  0     1.50ms  4.00ms  5.00ms  
runc    none       fork_10    0   0     -       -       -       not supported

DRIVER  IDLE SANDBOXES  HOST MiB/SANDBOX  CGROUP MiB/SANDBOX  STOPPED BY
runsc   10              40.0              20.0                max count 10
runc    10              10.0              -                   max count 10

RATIO       METRIC                        P50    P95
runsc/runc  tti                           2.00×  3.00×
runsc/runc  burst                         2.00×  2.00×
runsc/runc  exec_true                     3.00×  5.00×
runsc/runc  density_host_mib_per_sandbox  4.00×  -

DRIVER  WARM POOL  POOL HIT RATE
runsc   none       no pool asked
runc    none       unknown (needs the admin token)
runc: error: burst: create: 429: too many
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestPoolClaims(t *testing.T) {
	t.Parallel()
	before := poolCount{known: true, hits: 2, misses: 1}
	after := poolCount{known: true, hits: 11, misses: 2}
	c := after.since(before)
	if c == nil || c.Hits != 9 || c.Misses != 1 || c.String() != "9 of 10 creates from the pool (90%)" {
		t.Errorf("claims %+v: %s", c, c)
	}
	if c := after.since(poolCount{}); c != nil {
		t.Errorf("claims from an unknown start: %+v", c)
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	rep := sampleReport()
	rep.ComputeRatios()
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	// The field names are the file format other tools read.
	for _, key := range []string{`"date": "2026-11-29T17:00:00Z"`, `"commit": "abc1234"`, `"mode": "quick"`,
		`"driver": "runsc"`, `"warmPool": "none"`, `"name": "tti"`, `"p50Ms": 600`, `"p95Ms": 1500`, `"p99Ms": 1800`,
		`"failures": 1`, `"wallMs": 3100`, `"unsupported": true`, `"hostMiBPerSandbox": 40`, `"cgroupMiBPerSandbox": 20`,
		`"ratios": [`, `"num": "runsc"`, `"den": "runc"`, `"poolClaims": {`, `"name": "create"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b.String())
		}
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 2 || back.Runs[0].Metrics[1].P50Ms != 600 || back.Runs[0].PoolClaims == nil || back.Runs[1].Density.Started != 10 || len(back.Ratios) != 4 {
		t.Errorf("round trip lost figures: %+v", back)
	}
}

func TestFmtMs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{{0.5, "0.50ms"}, {9.994, "9.99ms"}, {10, "10ms"}, {999.4, "999ms"}, {1000, "1.00s"}, {12345, "12.35s"}}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := fmtMs(tt.in); got != tt.want {
				t.Errorf("fmtMs(%v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"501", &client.APIError{Status: http.StatusNotImplemented, Message: "pause"}, true},
		{"503 saying not supported", &client.APIError{Status: http.StatusServiceUnavailable, Message: "fork is not supported by this node's runtime driver"}, true},
		{"503 other", &client.APIError{Status: http.StatusServiceUnavailable, Message: "node down"}, false},
		{"409", &client.APIError{Status: http.StatusConflict, Message: "not supported"}, false},
		{"transport error", errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := unsupported(tt.err); got != tt.want {
				t.Errorf("unsupported(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestPlans(t *testing.T) {
	t.Parallel()
	q, f := QuickPlan(), FullPlan()
	if f.TTIIterations != 100 || f.Burst != 100 || f.ForkCount != 10 {
		t.Errorf("full plan %+v: want 100 iterations, burst 100, fork 10", f)
	}
	if q.TTIIterations >= f.TTIIterations || q.Burst >= f.Burst {
		t.Errorf("quick plan %+v is not smaller than full %+v", q, f)
	}
	if q.PoolSize <= 0 || f.PoolSize <= 0 {
		t.Errorf("plans without a warm pool pass: %+v %+v", q, f)
	}
	if got := f.MaxConcurrent(); got != 100 {
		t.Errorf("full MaxConcurrent = %d, want 100", got)
	}
	if got := (Plan{ForkCount: 10}).MaxConcurrent(); got != 11 {
		t.Errorf("fork-only MaxConcurrent = %d, want 11 (source + forks)", got)
	}
}
