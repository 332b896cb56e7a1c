package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Metric names, in the order the table prints them.
const (
	MetricCreate        = "create"          // POST /v2/sandboxes alone, one at a time (create overhead)
	MetricTTI           = "tti"             // create → first command result, one at a time
	MetricBurst         = "burst"           // create → first command result, all at once
	MetricBurstOverPool = "burst_over_pool" // a burst larger than the full warm pool: its members, then cold creates
	MetricExec          = "exec_true"       // Process.Start of `true` → end event
	MetricWrite1MiB     = "write_1mib"      // POST /files of 1 MiB
	MetricRead1MiB      = "read_1mib"       // GET /files of 1 MiB
	MetricPause         = "pause"           // POST /sandboxes/{id}/pause
	MetricResume        = "resume"          // POST /v2/sandboxes/{id}/connect of a paused sandbox
	MetricFork10        = "fork_10"         // POST /sandboxes/{id}/fork with count 10
)

// Report is the outcome of one `warren bench` run.
type Report struct {
	Date   time.Time `json:"date"`
	Commit string    `json:"commit,omitempty"`
	Mode   string    `json:"mode"` // quick or full
	Host   Host      `json:"host"`
	Runs   []*Run    `json:"runs"`
	// Ratios compare the first run's figures with the others' (same
	// metric), e.g. runsc/runc.
	Ratios []Ratio `json:"ratios,omitempty"`
}

// Host describes the machine the run measured from.
type Host struct {
	CPUs          int     `json:"cpus"`
	MemTotalMiB   float64 `json:"memTotalMiB,omitempty"`
	LoadAvgStart  string  `json:"loadAvgStart,omitempty"`
	LoadAvgEnd    string  `json:"loadAvgEnd,omitempty"`
	KernelRelease string  `json:"kernel,omitempty"`
}

// Run holds the figures of one server (one driver).
type Run struct {
	// Driver is the server's runtime driver ("" when benchmarking an
	// external --api-url whose driver is unknown).
	Driver string `json:"driver,omitempty"`
	APIURL string `json:"apiURL"`
	// WarmPool says whether a warm pool served the creates ("none", the
	// pool's size, or why none was measured); Pool is the size (0: none).
	WarmPool string `json:"warmPool"`
	Pool     int    `json:"pool,omitempty"`
	// PoolClaims counts the creates of the run that asked the template's
	// warm pool (GET /admin/pools before and after); nil when unknown (no
	// admin token).
	PoolClaims *PoolClaims `json:"poolClaims,omitempty"`
	Metrics    []*Metric   `json:"metrics"`
	Density    *Density    `json:"density,omitempty"`
	// Errors are a sample of the failures met (first few of each kind).
	Errors []string `json:"errors,omitempty"`
}

// Metric is one measured operation.
type Metric struct {
	Name string `json:"name"`
	Summary
	// WallMs is the wall time of the whole set (bursts only).
	WallMs float64 `json:"wallMs,omitempty"`
	// Unsupported is set when the API answered that the operation is not
	// supported (e.g. pause with runc); Note says why a metric is empty.
	Unsupported bool   `json:"unsupported,omitempty"`
	Note        string `json:"note,omitempty"`
}

// PoolClaims are the creates a warm pool served (hits) and did not
// (misses: no member was ready).
type PoolClaims struct {
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

// String says the hit rate.
func (c *PoolClaims) String() string {
	if c == nil {
		return "unknown (needs the admin token)"
	}
	n := c.Hits + c.Misses
	if n == 0 {
		return "no pool asked"
	}
	return fmt.Sprintf("%d of %d creates from the pool (%.0f%%)", c.Hits, n, 100*float64(c.Hits)/float64(n))
}

// Density is the idle density measurement.
type Density struct {
	BudgetMiB int `json:"budgetMiB"`
	MaxCount  int `json:"maxCount"`
	// Started counts sandboxes running at once at the end; StopReason says
	// why no more were started (budget, max count or a failure).
	Started    int    `json:"started"`
	StopReason string `json:"stopReason"`
	// HostMiBPerSandbox is the host's MemAvailable drop per sandbox (the
	// least-squares slope over the readings after each start; other loads
	// of the host add noise); CgroupMiBPerSandbox is the server's cgroup root memory
	// usage divided by Started (0 when it could not be read).
	HostMiBPerSandbox   float64 `json:"hostMiBPerSandbox"`
	CgroupMiBPerSandbox float64 `json:"cgroupMiBPerSandbox,omitempty"`
}

// Ratio compares a metric between two runs: Num's figure / Den's.
type Ratio struct {
	Metric string  `json:"metric"`
	Num    string  `json:"num"`
	Den    string  `json:"den"`
	P50    float64 `json:"p50,omitempty"`
	P95    float64 `json:"p95,omitempty"`
}

// metric returns the run's metric name, or nil.
func (r *Run) metric(name string) *Metric {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func (r *Run) label() string {
	l := r.Driver
	if l == "" {
		l = r.APIURL
	}
	if r.Pool > 0 {
		l += "+pool"
	}
	return l
}

// ComputeRatios compares runs pairwise, for every metric both measured
// (and density per sandbox): drivers with the same pool setting (first
// over later, e.g. runsc/runc), and one driver without over with a pool.
func (rep *Report) ComputeRatios() {
	rep.Ratios = nil
	for i, a := range rep.Runs {
		for _, b := range rep.Runs[i+1:] {
			if (a.Pool > 0) == (b.Pool > 0) && a.Driver != b.Driver || a.Driver == b.Driver && a.Pool == 0 && b.Pool > 0 {
				rep.Ratios = append(rep.Ratios, ratios(a, b)...)
			}
		}
	}
}

// ratios returns a's figures over b's.
func ratios(a, b *Run) []Ratio {
	var out []Ratio
	for _, ma := range a.Metrics {
		mb := b.metric(ma.Name)
		if mb == nil || ma.N == 0 || mb.N == 0 || mb.P50Ms == 0 {
			continue
		}
		r := Ratio{Metric: ma.Name, Num: a.label(), Den: b.label(), P50: round3(ma.P50Ms / mb.P50Ms)}
		if mb.P95Ms > 0 {
			r.P95 = round3(ma.P95Ms / mb.P95Ms)
		}
		out = append(out, r)
	}
	if a.Density != nil && b.Density != nil && b.Density.HostMiBPerSandbox > 0 && a.Density.HostMiBPerSandbox > 0 {
		out = append(out, Ratio{Metric: "density_host_mib_per_sandbox", Num: a.label(), Den: b.label(),
			P50: round3(a.Density.HostMiBPerSandbox / b.Density.HostMiBPerSandbox)})
	}
	return out
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("bench report: encode: %w", err)
	}
	return nil
}

// WriteTable writes the report as aligned text tables.
func (rep *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "warren bench (%s) %s", rep.Mode, rep.Date.UTC().Format(time.RFC3339))
	if rep.Commit != "" {
		fmt.Fprintf(&b, " commit %s", rep.Commit)
	}
	fmt.Fprintf(&b, "\nhost: %d CPUs, %.0f MiB, load %s → %s\n\n", rep.Host.CPUs, rep.Host.MemTotalMiB, rep.Host.LoadAvgStart, rep.Host.LoadAvgEnd)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DRIVER\tWARM POOL\tMETRIC\tN\tFAIL\tP50\tP95\tP99\tNOTE")
	for _, r := range rep.Runs {
		for _, m := range r.Metrics {
			note := m.Note
			if m.WallMs > 0 {
				note = strings.TrimSpace(fmt.Sprintf("wall %s %s", fmtMs(m.WallMs), note))
			}
			if m.N == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t-\t-\t-\t%s\n", r.label(), r.WarmPool, m.Name, m.N, m.Failures, note)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.label(), r.WarmPool, m.Name, m.N, m.Failures,
				fmtMs(m.P50Ms), fmtMs(m.P95Ms), fmtMs(m.P99Ms), note)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var dens bool
	for _, r := range rep.Runs {
		if r.Density == nil {
			continue
		}
		if !dens {
			b.WriteString("\n")
			tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DRIVER\tIDLE SANDBOXES\tHOST MiB/SANDBOX\tCGROUP MiB/SANDBOX\tSTOPPED BY")
			dens = true
		}
		d := r.Density
		cg := "-"
		if d.CgroupMiBPerSandbox > 0 {
			cg = fmt.Sprintf("%.1f", d.CgroupMiBPerSandbox)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\n", r.label(), d.Started, d.HostMiBPerSandbox, cg, d.StopReason)
	}
	if dens {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Ratios) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RATIO\tMETRIC\tP50\tP95")
		for _, r := range rep.Ratios {
			p95 := "-"
			if r.P95 > 0 {
				p95 = fmt.Sprintf("%.2f×", r.P95)
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%.2f×\t%s\n", r.Num, r.Den, r.Metric, r.P50, p95)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DRIVER\tWARM POOL\tPOOL HIT RATE")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.label(), r.WarmPool, r.PoolClaims)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Runs {
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "%s: error: %s\n", r.label(), e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtMs prints milliseconds with a unit suited to their size.
func fmtMs(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}
