package nodereg_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// shortLiveness is a liveness tuned short for the outage tests.
var shortLiveness = nodereg.LivenessConfig{UnreachableAfter: 15 * time.Second, LostAfter: time.Minute,
	PausedLostAfter: 2 * time.Minute, Interval: time.Second}

// runLiveness runs c's liveness as a leader's term from now until the
// returned stop is called.
func runLiveness(c *cluster, cfg nodereg.LivenessConfig) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.reg.RunLiveness(ctx, cfg) })
	return func() { cancel(); wg.Wait() }
}

func (c *cluster) status(t *testing.T, id string) string {
	t.Helper()
	n, err := c.st.GetNode(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n.Status()
}

// TestOutageKillsNothing: the control plane was down (no replica heard
// anything) for ten times LostAfter while both nodes stayed healthy. The
// leader that starts then gives every node a full window from the start
// of its term: nothing is unreachable, lost or killed while the nodes'
// heartbeats come back. A node still silent a full LostAfter into the
// term is lost then, and only its running sandboxes are killed, its
// paused one after PausedLostAfter.
func TestOutageKillsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, storetest.SQLite(t), "a", "b")
		on := func(node string) *store.Sandbox {
			t.Helper()
			other := map[string]string{"a": "b", "b": "a"}[node]
			if err := c.st.SetNodeAdminStatus(ctx, other, store.NodeCordoned); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.st.SetNodeAdminStatus(ctx, other, ""); err != nil {
					t.Fatal(err)
				}
			}()
			return c.create(t)
		}
		onA, onB, pausedB := on("a"), on("b"), on("b")
		if err := c.lc.Pause(ctx, "t", pausedB.ID, false); err != nil {
			t.Fatal(err)
		}
		// The outage: no API replica runs for ten times LostAfter.
		time.Sleep(10 * shortLiveness.LostAfter)

		stop := runLiveness(c, shortLiveness)
		defer stop()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		for _, id := range []string{"a", "b"} {
			if s := c.status(t, id); s != store.NodeReady {
				t.Fatalf("node %s %s 3 s after the control plane came back from an outage, want ready", id, s)
			}
		}
		// Node a heartbeats again (its retry found the API); b stays silent.
		beat := func() {
			if _, err := c.reg.Record(ctx, status("a", "boot-1")); err != nil {
				t.Fatal(err)
			}
		}
		beat()
		for range 11 { // 55 s of the 60 s window
			time.Sleep(5 * time.Second)
			beat()
			synctest.Wait()
			if s := c.status(t, "b"); s == store.NodeLost {
				t.Fatalf("node b lost before a full LostAfter into the term")
			}
		}
		c.wantState(t, onA.ID, sandbox.StateRunning, "")
		c.wantState(t, onB.ID, sandbox.StateRunning, "")
		if s := c.status(t, "b"); s != store.NodeUnreachable {
			t.Fatalf("node b silent for most of the window: %s, want unreachable", s)
		}
		// A full LostAfter into the term, b (still silent) is lost: its
		// running sandbox is killed, its paused one waits.
		for range 2 {
			time.Sleep(5 * time.Second)
			beat()
		}
		synctest.Wait()
		if s := c.status(t, "b"); s != store.NodeLost {
			t.Fatalf("node b silent for a full window: %s, want lost", s)
		}
		if s := c.status(t, "a"); s != store.NodeReady {
			t.Fatalf("node a, heartbeating: %s", s)
		}
		c.wantState(t, onA.ID, sandbox.StateRunning, "")
		c.wantState(t, onB.ID, sandbox.StateKilled, sandbox.KillNodeLost)
		c.wantState(t, pausedB.ID, sandbox.StatePaused, "")
		// PausedLostAfter into the term, the paused one goes too.
		for range 12 {
			time.Sleep(5 * time.Second)
			beat()
		}
		synctest.Wait()
		c.wantState(t, pausedB.ID, sandbox.StateKilled, sandbox.KillNodeLost)
		c.wantState(t, onA.ID, sandbox.StateRunning, "")
	})
}

// TestOutageLostNodeWaits: a node that an earlier leader had already
// marked lost, whose sandboxes it had not killed yet (it went away
// half-way), keeps them through the new leader's window, and keeps them
// for good once it heartbeats in it.
func TestOutageLostNodeWaits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, storetest.SQLite(t), "a")
		sb := c.create(t)
		time.Sleep(2 * shortLiveness.LostAfter)
		// The earlier leader's last statement.
		if _, err := c.st.MarkStaleNodes(ctx, time.Now().Add(-shortLiveness.LostAfter), store.NodeLost, store.NodeReady); err != nil {
			t.Fatal(err)
		}
		stop := runLiveness(c, shortLiveness)
		defer stop()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		c.wantState(t, sb.ID, sandbox.StateRunning, "")
		if _, err := c.reg.Record(ctx, status("a", "boot-1")); err != nil {
			t.Fatal(err)
		}
		for range 30 {
			time.Sleep(5 * time.Second)
			if _, err := c.reg.Record(ctx, status("a", "boot-1")); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		c.wantState(t, sb.ID, sandbox.StateRunning, "")
	})
}

// TestLivenessNotLeading: a replica whose term ended while it could not
// notice (frozen past its lease) checks nothing.
func TestLivenessNotLeading(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, storetest.SQLite(t), "a")
		sb := c.create(t)
		cfg := shortLiveness
		cfg.Leading = func() bool { return false }
		time.Sleep(time.Second)
		stop := runLiveness(c, cfg)
		defer stop()
		time.Sleep(3 * shortLiveness.LostAfter)
		synctest.Wait()
		if s := c.status(t, "a"); s != store.NodeReady {
			t.Fatalf("a replica that does not lead changed node a to %s", s)
		}
		c.wantState(t, sb.ID, sandbox.StateRunning, "")
	})
}

// TestLostNodeHeardMidKill: a lost node's sandboxes are killed only while
// it is still silent: one whose heartbeat lands while its sandboxes are
// being killed keeps the rest.
func TestLostNodeHeardMidKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t, storetest.SQLite(t), "a")
	var ids []string
	for range 4 {
		ids = append(ids, c.create(t).ID)
	}
	kills := 0
	c.reg.SetKiller(killerFunc(func(ctx context.Context, teamID, id string, reason sandbox.KillReason) error {
		kills++
		if kills == 1 {
			// The node's heartbeat lands after the first kill.
			if _, err := c.reg.Record(ctx, status("a", "boot-1")); err != nil {
				t.Fatal(err)
			}
		}
		return c.lc.Kill(ctx, teamID, id, reason)
	}))
	n, _ := c.st.GetNode(ctx, "a")
	at := n.LastHeartbeat.Add(10 * time.Minute)
	if err := c.reg.CheckLiveness(ctx, at, at.Add(-time.Hour), nodereg.LivenessConfig{}); err != nil {
		t.Fatal(err)
	}
	if kills != 1 {
		t.Fatalf("%d kills, want 1: the node was heard after the first", kills)
	}
	alive := 0
	for _, id := range ids {
		if sb, _ := c.st.GetSandbox(ctx, id); sb.State == sandbox.StateRunning {
			alive++
		}
	}
	if alive != 3 {
		t.Fatalf("%d of 4 sandboxes run after the node was heard mid-kill, want 3", alive)
	}
}

type killerFunc func(ctx context.Context, teamID, id string, reason sandbox.KillReason) error

func (f killerFunc) Kill(ctx context.Context, teamID, id string, reason sandbox.KillReason) error {
	return f(ctx, teamID, id, reason)
}

// flakyAPI is a RoundTripper that refuses every request until up is set,
// then answers as the API does, recording when.
type flakyAPI struct {
	mu       sync.Mutex
	up       bool
	accepted []time.Time
}

func (f *flakyAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Body != nil {
		req.Body.Close()
	}
	if !f.up {
		return nil, errors.New("connection refused")
	}
	f.accepted = append(f.accepted, time.Now())
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(`{"status":"ready"}`)), Header: http.Header{}, Request: req}, nil
}

// TestHeartbeatRetry: while the API is away a node retries its heartbeat
// every second, not at its 5 s interval, so it is heard again within
// about a second of the API's return; accepted, it is back on its
// interval.
func TestHeartbeatRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		api := &flakyAPI{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &nodereg.Client{APIURL: "http://api.invalid", Token: "tok", HTTPClient: &http.Client{Transport: api}}
		go c.Run(ctx, 5*time.Second, func(context.Context) (nodereg.Status, error) { return status("n1", "b1"), nil }, nil)
		time.Sleep(42*time.Second + 300*time.Millisecond)
		api.mu.Lock()
		api.up = true
		back := time.Now()
		api.mu.Unlock()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		api.mu.Lock()
		defer api.mu.Unlock()
		if len(api.accepted) == 0 {
			t.Fatal("no heartbeat after the API came back")
		}
		if d := api.accepted[0].Sub(back); d > 1500*time.Millisecond {
			t.Fatalf("first heartbeat %s after the API came back, want within about a second", d)
		}
		if n := len(api.accepted); n < 4 || n > 5 {
			t.Fatalf("%d heartbeats in the 20 s after the API came back, want 4 or 5 (every 5 s)", n)
		}
	})
}

// TestKillsInHeartbeat: the kills a node made on its own while no replica
// heard it travel in its next heartbeat: recorded with their reason and
// time, acknowledged in the reply (the node forgets them), the sandbox's
// reservation given back. A node's report of a sandbox placed on another
// node changes nothing there (and is acknowledged, so it stops).
func TestKillsInHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	c := newCluster(t, st, "a")
	sb := c.create(t)
	c.nodes["b"] = fakenode.New()
	creds := newCredentials(t, st, credentialKey)
	srv := httptest.NewServer(c.reg.Handler(creds))
	defer srv.Close()
	tokA, _ := issue(t, creds, "a")
	tokB, _ := issue(t, creds, "b")
	cl, clB := &nodereg.Client{APIURL: srv.URL, Token: tokA}, &nodereg.Client{APIURL: srv.URL, Token: tokB}
	at := time.Now().UTC() // after the start: a kill is never recorded before it

	// Node b claims a's sandbox.
	c.nodes["b"].Put(&nodeapi.Sandbox{ID: sb.ID, ExecutionID: sb.Spec.ExecutionID, State: sandbox.StateRunning})
	c.nodes["b"].KillOwn(sb.ID, sandbox.KillOOM, at)
	stB, err := nodereg.Collect(ctx, c.nodes["b"], status("b", "boot-1"))
	if err != nil || len(stB.Kills) != 1 {
		t.Fatalf("b's status %+v %v", stB, err)
	}
	r, err := clB.Heartbeat(ctx, stB)
	if err != nil || len(r.AckedKills) != 1 {
		t.Fatalf("b's heartbeat: %+v %v", r, err)
	}
	c.wantState(t, sb.ID, sandbox.StateRunning, "")
	if n, _ := st.GetNode(ctx, "a"); n.Allocated == (store.NodeResources{}) {
		t.Fatal("another node's report gave a's reservation back")
	}

	// Node a's own report.
	c.nodes["a"].KillOwn(sb.ID, sandbox.KillTTLBackstop, at)
	stA, err := nodereg.Collect(ctx, c.nodes["a"], status("a", "boot-1"))
	if err != nil || len(stA.Kills) != 1 || stA.Kills[0].Reason != "ttl_backstop" || !stA.Kills[0].At.Equal(at) {
		t.Fatalf("a's status %+v %v", stA, err)
	}
	r, err = cl.Heartbeat(ctx, stA)
	if err != nil || len(r.AckedKills) != 1 || r.AckedKills[0].SandboxID != sb.ID || r.AckedKills[0].ExecutionID != sb.Spec.ExecutionID {
		t.Fatalf("a's heartbeat: %+v %v", r, err)
	}
	c.wantState(t, sb.ID, sandbox.StateKilled, sandbox.KillTTLBackstop)
	if got, _ := st.GetSandbox(ctx, sb.ID); !got.KilledAt.Equal(at) {
		t.Fatalf("killed at %s, the node killed it at %s", got.KilledAt, at)
	}
	if n, _ := st.GetNode(ctx, "a"); n.Allocated != (store.NodeResources{}) {
		t.Fatalf("a's reservation after its sandbox's kill: %+v", n.Allocated)
	}
	if err := nodereg.Apply(ctx, c.nodes["a"], r); err != nil {
		t.Fatal(err)
	}
	if kills, _ := c.nodes["a"].OwnKills(ctx); len(kills) != 0 {
		t.Fatalf("a still reports %+v after the ack", kills)
	}
	// Too many kills in one heartbeat: refused.
	stA.Kills = make([]nodereg.Kill, nodereg.MaxReportedKills+1)
	if _, err := cl.Heartbeat(ctx, stA); !errdefs.IsInvalid(err) {
		t.Fatalf("a heartbeat with %d kills: %v", len(stA.Kills), err)
	}
}

// TestKillsOfAnotherNode: a node that holds its own token reports, in a
// heartbeat naming another node, kills of that node's sandbox: the
// heartbeat is refused (403) before its kills are looked at, so the
// sandbox keeps running with its reservation, and nothing is
// acknowledged. The node the token names is the reporting node, never
// the one the body names.
func TestKillsOfAnotherNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	c := newCluster(t, st, "a")
	sb := c.create(t)
	creds := newCredentials(t, st, credentialKey)
	srv := httptest.NewServer(c.reg.Handler(creds))
	defer srv.Close()
	tokB, _ := issue(t, creds, "b")
	if _, err := (&nodereg.Client{APIURL: srv.URL, Token: tokB}).Heartbeat(ctx, status("b", "boot-1")); err != nil {
		t.Fatalf("b as itself: %v", err)
	}
	forged := status("a", "boot-1")
	forged.Kills = []nodereg.Kill{{SandboxID: sb.ID, ExecutionID: sb.Spec.ExecutionID, Type: string(nodeapi.EventKilled),
		Reason: string(sandbox.KillOOM), At: time.Now().UTC()}}
	r, err := (&nodereg.Client{APIURL: srv.URL, Token: tokB}).Heartbeat(ctx, forged)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "403") || r != nil && len(r.AckedKills) > 0 {
		t.Fatalf("b reporting a's kills as a: %+v, %v; want 403", r, err)
	}
	c.wantState(t, sb.ID, sandbox.StateRunning, "")
	if n, _ := st.GetNode(ctx, "a"); n.Allocated == (store.NodeResources{}) {
		t.Fatal("a forged report gave a's reservation back")
	}
	if evs, _ := st.QueryEvents(ctx, store.EventFilter{SandboxID: sb.ID}); len(evs) > 0 && evs[len(evs)-1].Type == "killed" {
		t.Fatalf("a forged report recorded a kill: %+v", evs[len(evs)-1])
	}
}
