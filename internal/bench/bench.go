package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// Plan sizes a run. QuickPlan and FullPlan are the two presets.
type Plan struct {
	Mode string `json:"mode"`
	// TTIIterations is the number of sequential create → command runs.
	TTIIterations int
	// Burst is the number of creates sent at once.
	Burst int
	// ExecIterations and FileIterations size the round trip measurements.
	ExecIterations int
	FileIterations int
	// PauseIterations is the number of pause/resume cycles.
	PauseIterations int
	// ForkCount is the count of the fork request (0 skips fork).
	ForkCount int
	// DensityBudgetMiB stops the density run once the host's available
	// memory dropped by that much; DensityMax bounds the count (0 skips).
	DensityBudgetMiB int
	DensityMax       int
	// PoolSize, when positive, repeats time to interactive and a burst of
	// PoolSize with a warm pool of that many ready sandboxes (needs the
	// admin token).
	PoolSize int
}

// QuickPlan fits in about two minutes per driver on a small machine.
func QuickPlan() Plan {
	return Plan{Mode: "quick", TTIIterations: 10, Burst: 10, ExecIterations: 30, FileIterations: 5,
		PauseIterations: 2, ForkCount: 10, DensityBudgetMiB: 1024, DensityMax: 10, PoolSize: 5}
}

// FullPlan is the full run.
func FullPlan() Plan {
	return Plan{Mode: "full", TTIIterations: 100, Burst: 100, ExecIterations: 200, FileIterations: 20,
		PauseIterations: 5, ForkCount: 10, DensityBudgetMiB: 4096, DensityMax: 100, PoolSize: 20}
}

// MaxConcurrent is the number of sandboxes the plan has running at once at
// most; the team's concurrency limit must allow it.
func (p Plan) MaxConcurrent() int {
	return max(p.Burst, p.DensityMax, 1+p.ForkCount, p.PoolSize, 1)
}

// Config configures a Runner.
type Config struct {
	APIURL, APIKey string
	// Driver labels the run (optional).
	Driver string
	// Template is the template sandboxes start from (default "base").
	Template string
	Plan     Plan
	// AdminToken, when set, lets the runner set a warm pool (admin API)
	// for Team (default "default").
	AdminToken, Team string
	// CgroupRoot, when set, names the server's cgroup root whose memory
	// usage the density run reads.
	CgroupRoot string
	// HTTP is the client for API and envd traffic (default: keep-alive
	// transport sized for the burst).
	HTTP *http.Client
	Log  *slog.Logger
}

// Runner measures one server.
type Runner struct {
	cfg Config
	api *client.Client
	hc  *http.Client
	log *slog.Logger

	mu   sync.Mutex
	live map[string]bool // sandboxes created and not yet killed
	// origPool is the size of the template's pool the server had before
	// the run (suspendPool).
	origPool int
	run      *Run
	errs     map[string]int
}

// NewRunner returns a runner for the server at cfg.APIURL.
func NewRunner(cfg Config) *Runner {
	if cfg.Template == "" {
		cfg.Template = "base"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTP
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 4 * cfg.Plan.MaxConcurrent()
		tr.MaxIdleConnsPerHost = 4 * cfg.Plan.MaxConcurrent()
		hc = &http.Client{Transport: tr}
	}
	api := client.New(cfg.APIURL, cfg.APIKey)
	api.HTTP = hc
	return &Runner{cfg: cfg, api: api, hc: hc, log: cfg.Log, live: map[string]bool{}, errs: map[string]int{}}
}

// sandboxTimeout is the TTL given to every sandbox, so that a run that is
// interrupted leaves nothing behind for long.
const sandboxTimeout = 600

// Run measures everything the plan asks for, without a warm pool and
// then (when the plan and the API allow) with one: the runs it returns.
// Failures of single operations are counted in the figures; Run returns
// an error only when the server cannot be used at all.
func (r *Runner) Run(ctx context.Context) ([]*Run, error) {
	r.run = &Run{Driver: r.cfg.Driver, APIURL: r.cfg.APIURL, WarmPool: "none"}
	runs := []*Run{r.run}
	defer r.killAll(context.WithoutCancel(ctx))
	// The pass without a pool has none: a pool the server keeps (warren
	// serve's default for base) is set to 0 for it and restored at the
	// end. Without the admin token the pool, if any, stays and the hit
	// rate says what it served.
	restore := r.suspendPool(ctx)
	defer restore()
	// Warm up: the first sandbox pays one-off costs (template caches).
	if _, err := r.interactive(ctx, true); err != nil {
		return runs, fmt.Errorf("bench %s: warm-up sandbox: %w", r.cfg.APIURL, err)
	}
	p := r.cfg.Plan
	before := r.poolCounts(ctx)
	r.step("tti", func() { r.tti(ctx, p.TTIIterations) })
	r.step("burst", func() { r.burst(ctx, MetricBurst, p.Burst, "") })
	r.step("running", func() { r.inRunning(ctx) })
	r.step("density", func() { r.density(ctx) })
	r.run.PoolClaims = r.poolCounts(ctx).since(before)
	if pr := r.pooled(ctx); pr != nil {
		runs = append(runs, pr)
	}
	return runs, ctx.Err()
}

func (r *Runner) step(name string, f func()) {
	t0 := time.Now()
	f()
	r.log.Info("bench step done", "step", name, "driver", r.cfg.Driver, "took", time.Since(t0).Round(time.Millisecond))
}

// note records an error (at most 3 of each kind in the report).
func (r *Runner) note(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[kind]++
	if r.errs[kind] <= 3 {
		r.run.Errors = append(r.run.Errors, kind+": "+err.Error())
	}
	r.log.Warn("bench operation failed", "op", kind, "error", err)
}

func (r *Runner) add(m *Metric) { r.run.Metrics = append(r.run.Metrics, m) }

// create starts a sandbox and tracks it for the final clean-up.
func (r *Runner) create(ctx context.Context) (*client.Sandbox, error) {
	t := sandboxTimeout
	sb, err := r.api.Create(ctx, client.NewSandbox{TemplateID: r.cfg.Template, Timeout: &t,
		Metadata: map[string]string{"warren-bench": "1"}})
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	r.track(sb.SandboxID, true)
	return sb, nil
}

func (r *Runner) track(id string, live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if live {
		r.live[id] = true
	} else {
		delete(r.live, id)
	}
}

func (r *Runner) kill(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := r.api.Kill(ctx, id); err != nil {
		r.note("kill", err)
		return
	}
	r.track(id, false)
}

// killAll kills every sandbox still tracked, a few at a time.
func (r *Runner) killAll(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	parallel(len(ids), 8, func(i int) { r.kill(ctx, ids[i]) })
}

// parallel calls f(0..n-1) with at most width calls at once.
func parallel(n, width int, f func(i int)) {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// timing is what interactive measured of one sandbox.
type timing struct {
	create time.Duration // POST /v2/sandboxes → its answer
	tti    time.Duration // POST /v2/sandboxes → end of the first command
}

// interactive creates a sandbox and runs `true` in it, returning the time
// of the create request and from the create request to the command's end.
// The sandbox is killed afterwards when kill is set (else it is left for
// killAll).
func (r *Runner) interactive(ctx context.Context, kill bool) (timing, error) {
	opCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	sb, err := r.create(opCtx)
	if err != nil {
		return timing{}, err
	}
	created := time.Since(t0)
	if kill {
		defer r.kill(ctx, sb.SandboxID)
	}
	if err := newEnvd(r.hc, r.cfg.APIURL, sb).run(opCtx, "true"); err != nil {
		return timing{}, err
	}
	return timing{create: created, tti: time.Since(t0)}, nil
}

// tti measures n sequential creates, each followed by its first command:
// the create request alone (MetricCreate, the create overhead a warm pool
// cuts) and create → first command (MetricTTI).
func (r *Runner) tti(ctx context.Context, n int) {
	var creates, samples []time.Duration
	var fails int
	for range n {
		if ctx.Err() != nil {
			break
		}
		d, err := r.interactive(ctx, true)
		if err != nil {
			fails++
			r.note(MetricTTI, err)
			continue
		}
		creates, samples = append(creates, d.create), append(samples, d.tti)
	}
	r.add(&Metric{Name: MetricCreate, Summary: Summarize(creates, fails), Note: "POST /v2/sandboxes alone"})
	r.add(&Metric{Name: MetricTTI, Summary: Summarize(samples, fails)})
}

func (r *Runner) burst(ctx context.Context, name string, n int, note string) {
	if n <= 0 {
		return
	}
	var mu sync.Mutex
	var samples []time.Duration
	var fails int
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := r.interactive(ctx, false)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails++
				r.note(name, err)
				return
			}
			samples = append(samples, d.tti)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)
	r.add(&Metric{Name: name, Summary: Summarize(samples, fails), WallMs: ms(wall),
		Note: strings.TrimSpace(fmt.Sprintf("%d at once %s", n, note))})
	r.killAll(ctx)
}

// inRunning measures exec and file round trips, pause/resume and fork in
// one running sandbox.
func (r *Runner) inRunning(ctx context.Context) {
	p := r.cfg.Plan
	sb, err := r.create(ctx)
	if err != nil {
		r.note("create", err)
		for _, name := range []string{MetricExec, MetricWrite1MiB, MetricRead1MiB, MetricPause, MetricResume, MetricFork10} {
			r.add(&Metric{Name: name, Note: "no sandbox"})
		}
		return
	}
	defer r.kill(ctx, sb.SandboxID)
	e := newEnvd(r.hc, r.cfg.APIURL, sb)
	r.add(r.timed(ctx, MetricExec, p.ExecIterations, func(ctx context.Context) error { return e.run(ctx, "true") }))

	payload := make([]byte, 1<<20)
	rand.Read(payload)
	const path = "/tmp/warren-bench-1mib"
	r.add(r.timed(ctx, MetricWrite1MiB, p.FileIterations, func(ctx context.Context) error {
		_, err := e.files(ctx, http.MethodPost, path, payload)
		return err
	}))
	r.add(r.timed(ctx, MetricRead1MiB, p.FileIterations, func(ctx context.Context) error {
		got, err := e.files(ctx, http.MethodGet, path, nil)
		if err == nil && !bytes.Equal(got, payload) {
			err = fmt.Errorf("sandbox %q: read back %d bytes that differ from the %d written", sb.SandboxID, len(got), len(payload))
		}
		return err
	}))
	r.pauseResume(ctx, sb, e)
	r.fork(ctx, sb)
}

// timed runs op n times (sequentially) and summarizes the durations.
func (r *Runner) timed(ctx context.Context, name string, n int, op func(context.Context) error) *Metric {
	var samples []time.Duration
	var fails int
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		opCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t0 := time.Now()
		err := op(opCtx)
		d := time.Since(t0)
		cancel()
		if err != nil {
			fails++
			r.note(name, fmt.Errorf("iteration %d of %d: %w", i+1, n, err))
			continue
		}
		samples = append(samples, d)
	}
	return &Metric{Name: name, Summary: Summarize(samples, fails)}
}

// unsupported reports whether err is the API saying the operation is not
// supported by the server (its driver).
func unsupported(err error) bool {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status == http.StatusNotImplemented ||
		(ae.Status == http.StatusServiceUnavailable && strings.Contains(ae.Message, "not supported"))
}

func (r *Runner) pauseResume(ctx context.Context, sb *client.Sandbox, e *envd) {
	pause := &Metric{Name: MetricPause}
	resume := &Metric{Name: MetricResume, Note: "connect of a paused sandbox"}
	var ps, rs []time.Duration
	var pf, rf int
	for range r.cfg.Plan.PauseIterations {
		if ctx.Err() != nil {
			break
		}
		opCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t0 := time.Now()
		_, err := r.api.Pause(opCtx, sb.SandboxID)
		d := time.Since(t0)
		cancel()
		if unsupported(err) {
			pause.Unsupported, resume.Unsupported = true, true
			pause.Note, resume.Note = "not supported: "+err.Error(), "not supported"
			break
		}
		if err != nil {
			pf++
			r.note(MetricPause, err)
			continue
		}
		ps = append(ps, d)
		opCtx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		t0 = time.Now()
		_, resumed, err := r.api.Connect(opCtx, sb.SandboxID, sandboxTimeout)
		d = time.Since(t0)
		if err == nil && !resumed {
			err = fmt.Errorf("sandbox %q: connect after pause did not resume it", sb.SandboxID)
		}
		if err == nil {
			// The resumed sandbox must answer.
			err = e.run(opCtx, "true")
		}
		cancel()
		if err != nil {
			rf++
			r.note(MetricResume, err)
			continue
		}
		rs = append(rs, d)
	}
	pause.Summary, resume.Summary = Summarize(ps, pf), Summarize(rs, rf)
	r.add(pause)
	r.add(resume)
}

func (r *Runner) fork(ctx context.Context, sb *client.Sandbox) {
	n := r.cfg.Plan.ForkCount
	if n <= 0 {
		return
	}
	m := &Metric{Name: MetricFork10, Note: fmt.Sprintf("one request, count %d", n)}
	if n != 10 {
		m.Name = fmt.Sprintf("fork_%d", n)
	}
	defer r.add(m)
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t, count := sandboxTimeout, n
	var out []client.ForkResult
	t0 := time.Now()
	_, _, err := r.api.Do(ctx2, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/fork", client.ForkRequest{Timeout: &t, Count: &count}, &out)
	d := time.Since(t0)
	if unsupported(err) {
		m.Unsupported, m.Note = true, "not supported: "+err.Error()
		return
	}
	if err != nil {
		m.Summary = Summarize(nil, 1)
		r.note(m.Name, err)
		return
	}
	var fails int
	var forks []string
	for _, res := range out {
		if res.Sandbox != nil {
			r.track(res.Sandbox.SandboxID, true)
			forks = append(forks, res.Sandbox.SandboxID)
		}
		if res.Error != nil {
			fails++
			r.note(m.Name, fmt.Errorf("fork of %q: %d %s", sb.SandboxID, res.Error.Code, res.Error.Message))
		}
	}
	m.Summary = Summarize([]time.Duration{d}, 0)
	m.Note += fmt.Sprintf(", %d/%d forks failed", fails, n)
	parallel(len(forks), 8, func(i int) { r.kill(ctx, forks[i]) })
}
