package builder

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// diskBytes sums the sizes of the regular files under dir.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestFairnessParallelUploads: a team's uploads count against its quota
// while they stream, so parallel uploads never hold more of the host's
// disk than the team's quota, even before any of them ends; an upload
// that declares a Content-Length over what is left is refused before a
// byte is read; another team's upload is not affected.
func TestFairnessParallelUploads(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	const quota, each, parallel = 1 << 20, 600 << 10, 4
	f := newFixture(t, tinyRootFS(t))
	svc, err := NewService(ServiceConfig{Builder: f.b, MaxTeamUploadBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.cancel)
	tplA, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "par-a"})
	if err != nil {
		t.Fatal(err)
	}
	tplB, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-b", Name: "par-b"})
	if err != nil {
		t.Fatal(err)
	}
	// A body PutFiles takes as a gzip'd tar (it checks the magic only),
	// of random bytes that no compression shrinks.
	body := make([]byte, each)
	rand.Read(body)
	body[0], body[1] = 0x1f, 0x8b

	results := make(chan error, parallel)
	written := make(chan error, parallel)
	var writers []*io.PipeWriter
	for i := range parallel {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		hash := strings.Repeat(string(rune('a'+i)), 64)
		go func() {
			err := svc.PutFiles(ctx, tplA.ID, hash, pr)
			pr.CloseWithError(fmt.Errorf("upload ended: %v", err))
			results <- err
		}()
		go func() {
			_, err := pw.Write(body)
			if err == nil {
				// Once this byte is read, the body before it is on disk.
				_, err = pw.Write([]byte{0})
			}
			written <- err
		}()
	}
	open := 0
	for range parallel {
		if err := <-written; err == nil {
			open++
		}
	}
	if n := diskBytes(t, f.b.cfg.DataDir); n > quota {
		t.Errorf("%d parallel uploads of one team (%d open) hold %d bytes of disk, more than its quota of %d", parallel, open, n, quota)
	}
	for _, pw := range writers {
		pw.Close()
	}
	stored := 0
	for range parallel {
		switch err := <-results; {
		case err == nil:
			stored++
		case !errdefs.IsExhausted(err):
			t.Errorf("an upload over the quota failed with %v, want exhausted", err)
		}
	}
	if stored != 1 {
		t.Errorf("%d of %d uploads of %d bytes stored under a quota of %d, want 1", stored, parallel, each, quota)
	}
	if n, size, err := svc.teamUploads(ctx, "team-a"); err != nil || size > quota {
		t.Errorf("team A keeps %d uploads of %d bytes (%v), more than its quota", n, size, err)
	}

	// Declared sizes are checked before anything is read: a second upload
	// of team A does not fit what is left, team B's does.
	mux := http.NewServeMux()
	mux.Handle(UploadPathPrefix, svc.UploadHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, path, err := svc.Files(ctx, "team-a", tplA.ID, strings.Repeat("f", 64))
	if err != nil {
		t.Fatal(err)
	}
	// A body that never comes: only a check of the declared size answers.
	pr, pw := io.Pipe()
	defer pw.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPut, srv.URL+path, pr)
	req.ContentLength = each
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload declaring %d bytes over team A's quota: %v, want a 429 before the body", each, err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("upload declaring %d bytes over team A's quota: %d, want 429", each, resp.StatusCode)
	}
	// The client is told the quota, as the error was made for it; not the
	// error's text (its class's words, the wrapping).
	if m := string(msg); !strings.Contains(m, "uploaded build contexts would take") || strings.Contains(m, errdefs.ErrExhausted.Error()) {
		t.Errorf("upload over team A's quota told %q", m)
	}
	_, path, err = svc.Files(ctx, "team-b", tplB.ID, strings.Repeat("f", 64))
	if err != nil {
		t.Fatal(err)
	}
	if code := put(t, srv.URL+path, body); code != http.StatusCreated {
		t.Errorf("team B's upload of %d bytes: %d, want 201", len(body), code)
	}
}

// teamRunner holds every RUN step until gate is closed and counts the
// steps in progress by the first word of their command (the team).
type teamRunner struct {
	ChrootRunner
	gate    chan struct{}
	mu      sync.Mutex
	running map[string]int
	peak    map[string]int
}

type teamSandbox struct {
	BuildSandbox
	r *teamRunner
}

func (r *teamRunner) Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error) {
	s, err := r.ChrootRunner.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &teamSandbox{BuildSandbox: s, r: r}, nil
}

func (s *teamSandbox) Exec(ctx context.Context, p Process) (int, error) {
	team, _, _ := strings.Cut(strings.TrimPrefix(p.Args[len(p.Args)-1], "echo "), "-")
	r := s.r
	r.mu.Lock()
	r.running[team]++
	r.peak[team] = max(r.peak[team], r.running[team])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[team]--
		r.mu.Unlock()
	}()
	select {
	case <-r.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.BuildSandbox.Exec(ctx, p)
}

func (r *teamRunner) inStep(team string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[team]
}

// TestFairnessBuildSlots: one team starting many builds takes no more
// than its share of the build slots, so another team's build runs at once
// rather than behind them; a team queues a bounded number of builds; a
// build has a bounded number of steps and a bounded time.
func TestFairnessBuildSlots(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	r := &teamRunner{gate: make(chan struct{}), running: map[string]int{}, peak: map[string]int{}}
	f := newFixtureWith(t, tinyRootFS(t), r)
	svc, err := NewService(ServiceConfig{Builder: f.b, Builds: BuildLimits{Slots: 2, TeamQueue: 3, MaxSteps: 4}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	start := func(team, name string, steps ...Step) (string, error) {
		return svc.StartBuild(ctx, StartRequest{TeamID: team, Create: templates.CreateRequest{Name: name}, Spec: Spec{FromTemplate: "base", Steps: steps}})
	}
	run := func(team string, i int) Step {
		return Step{Type: StepRun, Args: []string{"echo " + team + "-" + itoa(i)}}
	}
	var aBuilds []string
	for i := range 4 {
		id, err := start("teama", "a-"+itoa(i), run("teama", i))
		if err != nil {
			t.Fatalf("team A's build %d: %v", i, err)
		}
		aBuilds = append(aBuilds, id)
	}
	// Team A's first build runs; its share is one of the two slots.
	waitFor(t, "team A's first build in its step", func() bool { return r.inStep("teama") >= 1 })
	if _, err := start("teama", "a-over", run("teama", 9)); !errdefs.IsExhausted(err) {
		t.Errorf("a fifth build of team A with three queued: %v, want exhausted", err)
	}
	bID, err := start("teamb", "b-0", run("teamb", 0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "team B's build in its step beside team A's", func() bool { return r.inStep("teamb") == 1 })
	if n := r.inStep("teama"); n != 1 {
		t.Errorf("team A has %d builds in their steps, more than its share of 1", n)
	}
	queued, err := f.cat.Build(ctx, aBuilds[1])
	if err != nil {
		t.Fatal(err)
	}
	st, err := svc.Status(ctx, "teama", queued.TemplateID, queued.ID, 0)
	if err != nil || len(st.LogEntries) == 0 || !strings.Contains(st.LogEntries[0].Message, "Waiting for a build slot") {
		t.Errorf("a queued build's log: %+v, %v; want it to say it waits for a slot", st, err)
	}
	close(r.gate)
	for _, id := range append(aBuilds, bID) {
		if b, err := svc.Wait(ctx, id); err != nil || b.Status != templates.BuildReady {
			t.Fatalf("build %s: %+v, %v", id, b, err)
		}
	}
	if r.peak["teama"] > 1 {
		t.Errorf("team A ran %d builds at once, more than its share of 1", r.peak["teama"])
	}
	// Steps: at most MaxSteps.
	var many []Step
	for i := range 5 {
		many = append(many, run("teamc", i))
	}
	if _, err := start("teamc", "c-many", many...); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "4 steps") {
		t.Errorf("a build of 5 steps with at most 4: %v, want invalid naming the bound", err)
	}
}

// TestFairnessBuildTimeout: a build that outlives the build time limit
// fails with a reason saying so, and frees its slot.
func TestFairnessBuildTimeout(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	r := &teamRunner{gate: make(chan struct{}), running: map[string]int{}, peak: map[string]int{}}
	f := newFixtureWith(t, tinyRootFS(t), r)
	svc, err := NewService(ServiceConfig{Builder: f.b, Builds: BuildLimits{Slots: 1, BuildTimeout: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	id, err := svc.StartBuild(ctx, StartRequest{TeamID: "teama", Create: templates.CreateRequest{Name: "slow"},
		Spec: Spec{FromTemplate: "base", Steps: []Step{{Type: StepRun, Args: []string{"echo teama-slow"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.Wait(ctx, id)
	if err != nil || b.Status != templates.BuildError || b.Reason == nil || !strings.Contains(b.Reason.Message, "did not finish within 500ms") {
		t.Fatalf("a build past the time limit: %+v, %v", b, err)
	}
	if running, waiting := svc.queue.stats(); running != 0 || waiting != 0 {
		t.Errorf("after the timed-out build: %d running, %d waiting", running, waiting)
	}
}

// waitFor polls cond until it holds, failing after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFairnessTemplateStorage: a team's templates take at most its
// template storage: a build that ends over it fails, and the team's next
// build does not start; another team's builds are not affected.
func TestFairnessTemplateStorage(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	f := newFixture(t, tinyRootFS(t))
	dir := t.TempDir()
	big := make([]byte, 2<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(team, name string, storageMB int64) (string, error) {
		id, err := f.svc.StartBuild(ctx, StartRequest{TeamID: team, Create: templates.CreateRequest{Name: name}, Spec: Spec{
			FromTemplate: "base", ContextDir: dir, Team: TeamLimits{StorageMB: storageMB},
			Steps: []Step{{Type: StepCopy, Args: []string{"big", "/big"}}},
		}})
		if err != nil {
			return "", err
		}
		b, err := f.svc.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != templates.BuildReady {
			return b.ID, fmt.Errorf("build %s: %s", b.Status, b.Reason.Message)
		}
		return b.ID, nil
	}
	_, err := build("teama", "big-a", 1)
	if err == nil || !strings.Contains(err.Error(), "more than its limit of 1 MiB") {
		t.Fatalf("a build of 2 MiB under 1 MiB of template storage: %v, want it failed naming the limit", err)
	}
	if _, err := build("teama", "small-a", 1); !errdefs.IsExhausted(err) {
		t.Fatalf("a build of a team over its template storage: %v, want exhausted before it starts", err)
	}
	id, err := build("teamb", "big-b", 100)
	if err != nil {
		t.Fatalf("another team's build: %v", err)
	}
	used, err := f.cat.TeamDiskBytes(ctx, "teamb")
	if b, _ := f.cat.Build(ctx, id); err != nil || used < 2<<20 || b.DiskBytes != used {
		t.Fatalf("team B's template storage: %d, %v; want its build's %d, at least its 2 MiB file", used, err, b.DiskBytes)
	}
}
