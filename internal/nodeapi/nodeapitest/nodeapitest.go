// Package nodeapitest is the conformance suite of the node contract
// (nodeapi.Service and its optional parts). Every implementation runs it:
// the node agent over the fake driver (internal/node), the RPC client over
// the noderpc server (internal/node/nodeclient) and the control plane's
// fake (internal/lifecycle/fakenode), so that they cannot drift apart.
//
// The suite checks what the contract promises a caller: the fields a
// sandbox comes back with, the state machine (running ─Pause─▶ paused
// ─Resume─▶ running; Kill from either), the error class of each refusal,
// and the events of a sandbox that ends by itself. It needs no real
// sandbox and no host objects.
package nodeapitest

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Node is one implementation under test, with no sandboxes.
type Node struct {
	Service nodeapi.Service
	// Template is a template the node can start sandboxes from.
	Template nodeapi.Template
	// Exit makes sandbox id's init end by itself, as its runtime would
	// report it; the node then drops the sandbox and Watch delivers an
	// EventExited.
	Exit func(t *testing.T, id string)
	// Partial lets the node lack optional parts of the contract (the
	// control plane's fake); their cases are skipped. Otherwise a missing
	// part (nodeapi.Pooler, MetricsSource, ExecutionKiller,
	// TemplateHolder, SandboxSnapshotter, TemplateSnapshotter, LogSource)
	// fails.
	Partial bool
	// Remote tells that the node is reached over a wire: no path on the
	// node crosses it, so a TemplateUse names no files, and the part that
	// names directories on the node (TemplateSnapshotter) must be absent.
	// The node resolves Template (its ID and build ID) to its own copy.
	Remote bool
	// Snapshots, when set, are the node's sandbox snapshots where Service
	// does not carry them itself: the in-process agent's are kept in its
	// catalog (nodebuild.SandboxSnapshots).
	Snapshots nodeapi.SandboxSnapshotter
	// Resolve, when set, fills a template that names a build only (its
	// ID and build ID) as the caller of Create does for the in-process
	// agent, which takes paths; nil: Create takes it as it is (the node
	// RPC's server resolves builds itself).
	Resolve func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error)
}

// Harness makes nodes for the suite.
type Harness struct {
	// New returns a fresh node; the harness closes it at the end of t.
	New func(t *testing.T) Node
	// Serial runs the cases one after the other (real sandboxes on a
	// small machine); by default they run in parallel.
	Serial bool
}

// Run runs the suite; each case gets its own node.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, n Node)
	}{
		{"CreateGetList", testCreateGetList},
		{"CreateDuplicate", testCreateDuplicate},
		{"UnknownSandbox", testUnknown},
		{"SetEndTime", testSetEndTime},
		{"CreateTimeout", testCreateTimeout},
		{"UpdateNetwork", testUpdateNetwork},
		{"PauseResume", testPauseResume},
		{"PauseMemory", testPauseMemory},
		{"Fork", testFork},
		{"Kill", testKill},
		{"KillExecution", testKillExecution},
		{"Stats", testStats},
		{"Metrics", testMetrics},
		{"WatchExit", testWatchExit},
		{"Capabilities", testCapabilities},
		{"Pools", testPools},
		{"TemplatesInUse", testTemplatesInUse},
		{"SnapshotSandbox", testSnapshotSandbox},
		{"SandboxLogs", testSandboxLogs},
		{"SnapshotTemplate", testSnapshotTemplate},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !h.Serial {
				t.Parallel()
			}
			c.fn(t, h.New(t))
		})
	}
}

// endAt is a deadline far enough for no backstop to fire during a test,
// at the second (as every wire carries it).
func endAt(d time.Duration) time.Time {
	return time.Now().Add(time.Hour + d).UTC().Truncate(time.Second)
}

func request(n Node, id string) nodeapi.CreateRequest {
	return nodeapi.CreateRequest{
		ID: id, ExecutionID: "exec-" + id, TeamID: "team-" + id, Template: n.Template,
		Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 256, DiskMB: 512},
		EndAt:     endAt(0),
		EnvVars:   map[string]string{"CONFORMANCE": "1"},
		Metadata:  map[string]string{"case": id},
	}
}

func create(t *testing.T, n Node, id string) *nodeapi.Sandbox {
	t.Helper()
	sb, err := n.Service.Create(t.Context(), request(n, id))
	if err != nil {
		t.Fatalf("Create(%q): %v", id, err)
	}
	return sb
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s: error %v, want class %v", what, err, class)
	}
}

func get(t *testing.T, n Node, id string) *nodeapi.Sandbox {
	t.Helper()
	sb, err := n.Service.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	return sb
}

func listed(t *testing.T, n Node) []string {
	t.Helper()
	all, err := n.Service.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, s := range all {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

// checkSandbox holds a sandbox to what its create asked.
func checkSandbox(t *testing.T, what string, sb *nodeapi.Sandbox, req nodeapi.CreateRequest) {
	t.Helper()
	if sb.ID != req.ID || sb.ExecutionID != req.ExecutionID || sb.TeamID != req.TeamID {
		t.Errorf("%s: id/execution/team %q/%q/%q, want %q/%q/%q", what, sb.ID, sb.ExecutionID, sb.TeamID, req.ID, req.ExecutionID, req.TeamID)
	}
	if sb.TemplateID != req.Template.ID || sb.BuildID != req.Template.BuildID {
		t.Errorf("%s: template %q build %q, want %q %q", what, sb.TemplateID, sb.BuildID, req.Template.ID, req.Template.BuildID)
	}
	if sb.State != sandbox.StateRunning {
		t.Errorf("%s: state %v, want running", what, sb.State)
	}
	if sb.Epoch < 1 {
		t.Errorf("%s: epoch %d, want at least 1", what, sb.Epoch)
	}
	if !sb.EndAt.Equal(req.EndAt) {
		t.Errorf("%s: end %v, want %v", what, sb.EndAt, req.EndAt)
	}
	if sb.StartedAt.IsZero() || sb.StartedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("%s: started at %v", what, sb.StartedAt)
	}
	if sb.Resources.VCPUs != req.Resources.VCPUs || sb.Resources.MemoryMB != req.Resources.MemoryMB {
		t.Errorf("%s: resources %+v, want %+v", what, sb.Resources, req.Resources)
	}
	if !maps.Equal(sb.Metadata, req.Metadata) {
		t.Errorf("%s: metadata %v, want %v", what, sb.Metadata, req.Metadata)
	}
	if sb.Address == "" || sb.Host == "" {
		t.Errorf("%s: address %q host %q, want both", what, sb.Address, sb.Host)
	}
	if sb.EnvdVersion != envdproto.Version {
		t.Errorf("%s: envd version %q, want %q", what, sb.EnvdVersion, envdproto.Version)
	}
	if sb.Health != nodeapi.HealthUnknown && sb.Health != nodeapi.HealthHealthy {
		t.Errorf("%s: health %q of a new sandbox, want unknown or healthy", what, sb.Health)
	}
}

func testCreateGetList(t *testing.T, n Node) {
	req := request(n, "sb-a")
	sb, err := n.Service.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	checkSandbox(t, "Create", sb, req)
	checkSandbox(t, "Get", get(t, n, "sb-a"), req)
	create(t, n, "sb-b")
	if got, want := listed(t, n), []string{"sb-a", "sb-b"}; !slices.Equal(got, want) {
		t.Errorf("List: %v, want %v", got, want)
	}
}

func testCreateDuplicate(t *testing.T, n Node) {
	create(t, n, "sb-dup")
	_, err := n.Service.Create(t.Context(), request(n, "sb-dup"))
	wantClass(t, "second Create of one ID", err, errdefs.ErrAlreadyExists)
	if got := listed(t, n); !slices.Equal(got, []string{"sb-dup"}) {
		t.Errorf("List after a refused create: %v", got)
	}
}

func testUnknown(t *testing.T, n Node) {
	ctx, id := t.Context(), "sb-none"
	_, err := n.Service.Get(ctx, id)
	wantClass(t, "Get", err, errdefs.ErrNotFound)
	wantClass(t, "SetEndTime", n.Service.SetEndTime(ctx, id, endAt(0)), errdefs.ErrNotFound)
	wantClass(t, "UpdateNetwork", n.Service.UpdateNetwork(ctx, id, sandbox.NetworkPolicy{}), errdefs.ErrNotFound)
	_, err = n.Service.Pause(ctx, id, nodeapi.PauseRequest{})
	wantClass(t, "Pause", err, errdefs.ErrNotFound)
	_, err = n.Service.Resume(ctx, id, nodeapi.ResumeRequest{ExecutionID: "e", EndAt: endAt(0)})
	wantClass(t, "Resume", err, errdefs.ErrNotFound)
	_, err = n.Service.Stats(ctx, id)
	wantClass(t, "Stats", err, errdefs.ErrNotFound)
	wantClass(t, "Kill", n.Service.Kill(ctx, id, sandbox.KillRequest), errdefs.ErrNotFound)
	if got := listed(t, n); len(got) != 0 {
		t.Errorf("List of an empty node: %v", got)
	}
}

func testSetEndTime(t *testing.T, n Node) {
	create(t, n, "sb-end")
	want := endAt(30 * time.Minute)
	if err := n.Service.SetEndTime(t.Context(), "sb-end", want); err != nil {
		t.Fatalf("SetEndTime: %v", err)
	}
	if got := get(t, n, "sb-end").EndAt; !got.Equal(want) {
		t.Errorf("end after SetEndTime: %v, want %v", got, want)
	}
}

// testCreateTimeout: a create given a Timeout ends Timeout after it is
// ready, not at its EndAt, and answers that end time (the control plane
// then sends no SetEndTime). A pool claim does the same (when the node
// has pools).
func testCreateTimeout(t *testing.T, n Node) {
	const ttl = 3 * time.Hour
	check := func(what string, req nodeapi.CreateRequest, before time.Time, sb *nodeapi.Sandbox) {
		t.Helper()
		after := time.Now()
		// The wire carries milliseconds of the timeout and the end time.
		lo, hi := before.Add(ttl-time.Millisecond), after.Add(ttl+time.Millisecond)
		for _, v := range []struct {
			how string
			end time.Time
		}{{"answer", sb.EndAt}, {"Get", get(t, n, req.ID).EndAt}} {
			if v.end.Before(lo) || v.end.After(hi) {
				t.Errorf("%s: %s end %v, want ready + %v, within [%v, %v] (EndAt asked %v)", what, v.how, v.end, ttl, lo, hi, req.EndAt)
			}
		}
	}
	req := request(n, "sb-ttl")
	req.Timeout = ttl
	before := time.Now()
	sb, err := n.Service.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	check("Create", req, before, sb)

	pl, ok := n.Service.(nodeapi.Pooler)
	if !ok {
		return
	}
	if err := pl.SetPool(t.Context(), n.Template, req.Resources, 1); err != nil {
		t.Fatalf("SetPool: %v", err)
	}
	waitReady(t, pl, n.Template, 1)
	id, ok := pl.Reserve(n.Template, req.Resources)
	if !ok {
		t.Fatal("Reserve of a ready pool: a miss")
	}
	req = request(n, id)
	req.Timeout = ttl
	before = time.Now()
	if sb, err = n.Service.Create(t.Context(), req); err != nil {
		t.Fatalf("Create of pool member %q: %v", id, err)
	}
	check("Create from the pool", req, before, sb)
	if err := pl.SetPool(t.Context(), n.Template, req.Resources, 0); err != nil {
		t.Fatalf("SetPool 0: %v", err)
	}
}

func testUpdateNetwork(t *testing.T, n Node) {
	create(t, n, "sb-net")
	p := sandbox.NetworkPolicy{Internet: true, DenyOut: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, AllowOut: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}}
	if err := n.Service.UpdateNetwork(t.Context(), "sb-net", p); err != nil {
		t.Fatalf("UpdateNetwork: %v", err)
	}
	got := get(t, n, "sb-net").Network
	if got.Internet != p.Internet || !slices.Equal(got.DenyOut, p.DenyOut) || !slices.Equal(got.AllowOut, p.AllowOut) {
		t.Errorf("network after UpdateNetwork: %+v, want %+v", got, p)
	}
}

func testPauseResume(t *testing.T, n Node) {
	ctx := t.Context()
	sb := create(t, n, "sb-p")
	_, err := n.Service.Pause(ctx, "sb-p", nodeapi.PauseRequest{ExecutionID: "exec-older"})
	wantClass(t, "Pause of an older execution", err, errdefs.ErrConflict)
	_, err = n.Service.Resume(ctx, "sb-p", nodeapi.ResumeRequest{ExecutionID: "exec-2", EndAt: endAt(0)})
	wantClass(t, "Resume of a running sandbox", err, errdefs.ErrConflict)

	p, err := n.Service.Pause(ctx, "sb-p", nodeapi.PauseRequest{ExecutionID: sb.ExecutionID})
	if err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if p.State != sandbox.StatePaused || p.Epoch <= sb.Epoch || p.PausedWithMemory {
		t.Errorf("Pause: state %v epoch %d (was %d) with memory %t, want paused, a later epoch, no memory", p.State, p.Epoch, sb.Epoch, p.PausedWithMemory)
	}
	if g := get(t, n, "sb-p"); g.State != sandbox.StatePaused {
		t.Errorf("Get after Pause: state %v", g.State)
	}
	if got := listed(t, n); !slices.Equal(got, []string{"sb-p"}) {
		t.Errorf("List holds paused sandboxes: %v", got)
	}
	_, err = n.Service.Pause(ctx, "sb-p", nodeapi.PauseRequest{})
	wantClass(t, "Pause of a paused sandbox", err, errdefs.ErrConflict)
	_, err = n.Service.Fork(ctx, "sb-p", nodeapi.ForkRequest{IDs: []string{"sb-pf"}, ExecutionIDs: []string{"e"}, EndAt: endAt(0)})
	if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("Fork of a paused sandbox: %v, want conflict (or unsupported)", err)
	}

	end := endAt(10 * time.Minute)
	r, err := n.Service.Resume(ctx, "sb-p", nodeapi.ResumeRequest{ExecutionID: "exec-2", EndAt: end})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if r.State != sandbox.StateRunning || r.ExecutionID != "exec-2" || r.Epoch <= p.Epoch || !r.EndAt.Equal(end) {
		t.Errorf("Resume: state %v execution %q epoch %d (paused at %d) end %v, want running exec-2, a later epoch, %v", r.State, r.ExecutionID, r.Epoch, p.Epoch, r.EndAt, end)
	}
	if g := get(t, n, "sb-p"); g.State != sandbox.StateRunning || g.ExecutionID != "exec-2" {
		t.Errorf("Get after Resume: state %v execution %q", g.State, g.ExecutionID)
	}
	// The pause of the first execution, late, is refused.
	_, err = n.Service.Pause(ctx, "sb-p", nodeapi.PauseRequest{ExecutionID: sb.ExecutionID})
	wantClass(t, "Pause of the execution before the resume", err, errdefs.ErrConflict)
}

func testPauseMemory(t *testing.T, n Node) {
	caps, err := n.Service.Capabilities(t.Context())
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if !caps.MemoryCheckpoint {
		t.Skip("the node cannot checkpoint memory")
	}
	create(t, n, "sb-m")
	p, err := n.Service.Pause(t.Context(), "sb-m", nodeapi.PauseRequest{Memory: true})
	if err != nil {
		t.Fatalf("Pause with memory: %v", err)
	}
	if p.State != sandbox.StatePaused || !p.PausedWithMemory {
		t.Errorf("Pause with memory: state %v with memory %t", p.State, p.PausedWithMemory)
	}
	if !get(t, n, "sb-m").PausedWithMemory {
		t.Error("Get after a pause with memory: PausedWithMemory false")
	}
}

func testFork(t *testing.T, n Node) {
	ctx := t.Context()
	caps, err := n.Service.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	src := create(t, n, "sb-src")
	end := endAt(5 * time.Minute)
	req := nodeapi.ForkRequest{IDs: []string{"sb-f1", "sb-f2"}, ExecutionIDs: []string{"exec-f1", "exec-f2"}, EndAt: end}
	out, err := n.Service.Fork(ctx, "sb-src", req)
	if !caps.Fork {
		wantClass(t, "Fork without the capability", err, errdefs.ErrUnsupported)
		return
	}
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if len(out) != 2 {
		t.Fatalf("Fork made %d sandboxes, want 2", len(out))
	}
	for i, c := range out {
		if c.ID != req.IDs[i] || c.ExecutionID != req.ExecutionIDs[i] || c.State != sandbox.StateRunning || !c.EndAt.Equal(end) {
			t.Errorf("fork %d: id %q execution %q state %v end %v, want %q %q running %v", i, c.ID, c.ExecutionID, c.State, c.EndAt, req.IDs[i], req.ExecutionIDs[i], end)
		}
		if c.TemplateID != src.TemplateID || c.TeamID != src.TeamID {
			t.Errorf("fork %d: template %q team %q, want the source's %q %q", i, c.TemplateID, c.TeamID, src.TemplateID, src.TeamID)
		}
	}
	if g := get(t, n, "sb-src"); g.State != sandbox.StateRunning {
		t.Errorf("source after Fork: state %v, want running", g.State)
	}
	if got, want := listed(t, n), []string{"sb-f1", "sb-f2", "sb-src"}; !slices.Equal(got, want) {
		t.Errorf("List after Fork: %v, want %v", got, want)
	}
	_, err = n.Service.Fork(ctx, "sb-none", nodeapi.ForkRequest{IDs: []string{"sb-f3"}, ExecutionIDs: []string{"e"}, EndAt: end})
	wantClass(t, "Fork of an unknown sandbox", err, errdefs.ErrNotFound)
}

func testKill(t *testing.T, n Node) {
	ctx := t.Context()
	create(t, n, "sb-k1")
	create(t, n, "sb-k2")
	if _, err := n.Service.Pause(ctx, "sb-k2", nodeapi.PauseRequest{}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	for _, id := range []string{"sb-k1", "sb-k2"} {
		if err := n.Service.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatalf("Kill(%q): %v", id, err)
		}
		_, err := n.Service.Get(ctx, id)
		wantClass(t, "Get after Kill", err, errdefs.ErrNotFound)
		wantClass(t, "second Kill", n.Service.Kill(ctx, id, sandbox.KillRequest), errdefs.ErrNotFound)
	}
	if got := listed(t, n); len(got) != 0 {
		t.Errorf("List after Kill: %v", got)
	}
	// The ID is free again.
	create(t, n, "sb-k1")
}

func testKillExecution(t *testing.T, n Node) {
	k := part[nodeapi.ExecutionKiller](t, n, "ExecutionKiller")
	ctx := t.Context()
	sb := create(t, n, "sb-ke")
	wantClass(t, "KillExecution of another execution", k.KillExecution(ctx, "sb-ke", "exec-other", sandbox.KillTimeout), errdefs.ErrConflict)
	get(t, n, "sb-ke")
	if err := k.KillExecution(ctx, "sb-ke", sb.ExecutionID, sandbox.KillTimeout); err != nil {
		t.Fatalf("KillExecution of the current execution: %v", err)
	}
	_, err := n.Service.Get(ctx, "sb-ke")
	wantClass(t, "Get after KillExecution", err, errdefs.ErrNotFound)
}

func testStats(t *testing.T, n Node) {
	create(t, n, "sb-s")
	st, err := n.Service.Stats(t.Context(), "sb-s")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.At.IsZero() {
		t.Error("Stats: no time")
	}
}

func testMetrics(t *testing.T, n Node) {
	src := part[nodeapi.MetricsSource](t, n, "MetricsSource")
	create(t, n, "sb-mx")
	if _, err := src.Metrics(t.Context(), "sb-mx", time.Time{}, time.Time{}); err != nil {
		t.Errorf("Metrics of a running sandbox: %v", err)
	}
	_, err := src.Metrics(t.Context(), "sb-none", time.Time{}, time.Time{})
	wantClass(t, "Metrics of an unknown sandbox", err, errdefs.ErrNotFound)
}

func testWatchExit(t *testing.T, n Node) {
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := n.Service.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	sb := create(t, n, "sb-w")
	n.Exit(t, "sb-w")
	ev, ok := <-ch
	if !ok {
		t.Fatal("Watch ended before the exit event")
	}
	if ev.Type != nodeapi.EventExited || ev.SandboxID != "sb-w" || ev.ExecutionID != sb.ExecutionID || ev.At.IsZero() {
		t.Errorf("event %+v, want exited sb-w %q with a time", ev, sb.ExecutionID)
	}
	_, err = n.Service.Get(t.Context(), "sb-w")
	wantClass(t, "Get after the exit", err, errdefs.ErrNotFound)
	// Until the control plane acknowledges it, the node answers about the
	// sandbox with its own kill, as the event told it.
	for what, err := range map[string]error{"Get": err, "Kill": n.Service.Kill(t.Context(), "sb-w", sandbox.KillTimeout)} {
		kill, ok := nodeapi.NodeKill(err)
		if !ok || kill.SandboxID != "sb-w" || kill.ExecutionID != sb.ExecutionID || kill.Reason != ev.Reason || !kill.At.Equal(ev.At) {
			t.Errorf("%s after the exit: %v (kill %+v), want the node's own kill %+v", what, err, kill, ev)
		}
		wantClass(t, what+" after the exit", err, errdefs.ErrNotFound)
	}
	if kr, ok := n.Service.(nodeapi.KillReporter); ok {
		kills, err := kr.OwnKills(t.Context())
		if err != nil || len(kills) != 1 || kills[0].SandboxID != "sb-w" || kills[0].Reason != ev.Reason || !kills[0].At.Equal(ev.At) {
			t.Errorf("OwnKills after the exit: %+v %v", kills, err)
		}
		if err := kr.AckKills(t.Context(), []nodeapi.KillAck{{SandboxID: "sb-w", ExecutionID: sb.ExecutionID}}); err != nil {
			t.Fatal(err)
		}
		if kills, err := kr.OwnKills(t.Context()); err != nil || len(kills) != 0 {
			t.Errorf("OwnKills after the ack: %+v %v", kills, err)
		}
		_, err = n.Service.Get(t.Context(), "sb-w")
		if _, ok := nodeapi.NodeKill(err); ok {
			t.Errorf("Get after the ack still tells the node's kill: %v", err)
		}
		wantClass(t, "Get after the ack", err, errdefs.ErrNotFound)
	}
	// The stream ends with the caller's context.
	cancel()
	for range ch {
	}
}

func testCapabilities(t *testing.T, n Node) {
	caps, err := n.Service.Capabilities(t.Context())
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if caps.Driver == "" {
		t.Error("Capabilities: no driver name")
	}
}
