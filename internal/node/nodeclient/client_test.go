package nodeclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

type rig struct {
	agent  *node.Agent
	client *nodeclient.Client
	drv    *fake.Driver
	envd   *nodetest.Envd
	url    string
}

// newRig serves an agent over the fake driver through the noderpc
// server; opts tune the server's options.
func newRig(t *testing.T, fcfg fake.Config, token string, opts ...func(*node.Agent, *noderpc.Options)) *rig {
	t.Helper()
	drv, envd := fake.New(fcfg), &nodetest.Envd{}
	a, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Driver: drv, Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
		Layers: nodetest.NewLayers(), Envd: envd, ReclaimInterval: -1,
		FreeDisk: func(string) (uint64, error) { return 1 << 40, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	o := noderpc.Options{Token: token, ResolveTemplate: resolveOwn}
	for _, f := range opts {
		f(a, &o)
	}
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(a, o))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &rig{agent: a, client: nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client(), Token: token}), drv: drv, envd: envd, url: srv.URL}
}

// resolveOwn is the rig node's template resolver: it holds template "t",
// build "b" (as req names it), its root filesystem at /rootfs.
func resolveOwn(_ context.Context, _ string, t nodeapi.Template) (nodeapi.Template, error) {
	own := req("x").Template
	if t.ID != own.ID || t.BuildID != "" && t.BuildID != own.BuildID {
		return nodeapi.Template{}, fmt.Errorf("template %q build %q: %w", t.ID, t.BuildID, errdefs.ErrNotFound)
	}
	return own, nil
}

func req(id string) nodeapi.CreateRequest {
	return nodeapi.CreateRequest{
		ID: id, ExecutionID: "e-" + id, TeamID: "team",
		Template: nodeapi.Template{ID: "t", BuildID: "b", RootFS: "/rootfs", Env: map[string]string{"A": "1"},
			User: "user", Workdir: "/home/user", StartCmd: "sleep infinity"},
		Resources: sandbox.Resources{VCPUs: 2, MemoryMB: 512, DiskMB: 2048, Pids: 100},
		EndAt:     time.Now().Add(time.Hour).Truncate(time.Microsecond),
		Network: sandbox.NetworkPolicy{Internet: true, AllowOut: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			DenyOut: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}},
		EnvVars: map[string]string{"B": "2"}, EnvdAccessToken: "tok", Metadata: map[string]string{"m": "v"},
	}
}

// same compares sandboxes, times by instant.
func same(t *testing.T, what string, got, want *nodeapi.Sandbox) {
	t.Helper()
	g, w := *got, *want
	if !g.StartedAt.Equal(w.StartedAt) || !g.EndAt.Equal(w.EndAt) {
		t.Errorf("%s: times %v/%v, want %v/%v", what, g.StartedAt, g.EndAt, w.StartedAt, w.EndAt)
	}
	g.StartedAt, g.EndAt, w.StartedAt, w.EndAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "")
	ctx := context.Background()
	c := r.client

	created, err := c.Create(ctx, req("sb1"))
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := r.agent.Get(ctx, "sb1")
	same(t, "create", created, direct)
	if created.Address == "" || created.Network.AllowOut[0].String() != "198.51.100.0/24" || created.Metadata["m"] != "v" {
		t.Errorf("created %+v", created)
	}
	got, err := c.Get(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "get", got, direct)

	events, err := c.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	newEnd := time.Now().Add(2 * time.Hour).Truncate(time.Microsecond)
	if err := c.SetEndTime(ctx, "sb1", newEnd); err != nil {
		t.Fatal(err)
	}
	if sb, _ := r.agent.Get(ctx, "sb1"); !sb.EndAt.Equal(newEnd) {
		t.Errorf("end time %v, want %v", sb.EndAt, newEnd)
	}
	if err := c.UpdateNetwork(ctx, "sb1", sandbox.NetworkPolicy{Internet: false}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := r.agent.Get(ctx, "sb1"); sb.Network.Internet {
		t.Errorf("network not updated: %+v", sb.Network)
	}
	st, err := c.Stats(ctx, "sb1")
	if err != nil || st.CPUCount != 2 || st.MemoryTotal != 512<<20 || st.DiskTotalBytes != 2048<<20 {
		t.Errorf("stats %+v, %v", st, err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil || caps != (nodeapi.Capabilities{Driver: "fake", MemoryCheckpoint: true, Freeze: true, Fork: true}) {
		t.Errorf("capabilities %+v, %v", caps, err)
	}

	kids, err := c.Fork(ctx, "sb1", nodeapi.ForkRequest{IDs: []string{"k1", "k2"}, ExecutionIDs: []string{"x1", "x2"}, EnvdAccessTokens: []string{"tk1", "tk2"}})
	if err != nil || len(kids) != 2 || kids[1].ID != "k2" || kids[1].ExecutionID != "x2" || kids[0].State != sandbox.StateRunning {
		t.Fatalf("fork %+v, %v", kids, err)
	}
	for i, k := range kids {
		got := ""
		for _, in := range r.envd.Inits() {
			if in.Addr == k.Address {
				got = in.Init.AccessToken
			}
		}
		if want := []string{"tk1", "tk2"}[i]; got != want {
			t.Errorf("fork %s: envd access token %q, want %q (the request's, over the wire)", k.ID, got, want)
		}
	}
	p, err := c.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true})
	if err != nil || p.State != sandbox.StatePaused || !p.PausedWithMemory {
		t.Fatalf("pause %+v, %v", p, err)
	}
	res, err := c.Resume(ctx, "sb1", nodeapi.ResumeRequest{ExecutionID: "e2", EndAt: newEnd})
	if err != nil || res.State != sandbox.StateRunning || res.ExecutionID != "e2" || res.Epoch != 3 {
		t.Fatalf("resume %+v, %v", res, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("list %d, %v", len(list), err)
	}
	if err := c.Kill(ctx, "k1", sandbox.KillAdmin); err != nil {
		t.Fatal(err)
	}
	_ = r.drv.OOMKill("k2")
	want := []nodeapi.Event{
		{Type: nodeapi.EventKilled, SandboxID: "k1", ExecutionID: "x1", Reason: sandbox.KillAdmin},
		{Type: nodeapi.EventExited, SandboxID: "k2", ExecutionID: "x2", Reason: sandbox.KillOOM},
	}
	for _, w := range want {
		select {
		case ev := <-events:
			if ev.At.IsZero() {
				t.Errorf("event without time: %+v", ev)
			}
			ev.At = time.Time{}
			if ev != w {
				t.Errorf("event %+v, want %+v", ev, w)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no event %+v", w)
		}
	}
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{Capabilities: &driver.Capabilities{}}, "")
	ctx := context.Background()
	c := r.client
	if _, err := c.Create(ctx, req("sb1")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		call  func() error
		class error
	}{
		{"not found", func() error { _, err := c.Get(ctx, "nope"); return err }, errdefs.ErrNotFound},
		{"already exists", func() error { _, err := c.Create(ctx, req("sb1")); return err }, errdefs.ErrAlreadyExists},
		{"invalid", func() error { _, err := c.Create(ctx, req("Not Valid")); return err }, errdefs.ErrInvalid},
		{"conflict", func() error { _, err := c.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); return err }, errdefs.ErrConflict},
		{"unsupported", func() error { _, err := c.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); return err }, errdefs.ErrUnsupported},
		{"kill unknown", func() error { return c.Kill(ctx, "nope", sandbox.KillRequest) }, errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.class) {
				t.Fatalf("error %v, want class %v", err, tt.class)
			}
		})
	}
	// The message is the node's.
	_, err := c.Get(ctx, "nope")
	if want := `node: sandbox "nope": not found`; err == nil || err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "s3cret")
	ctx := context.Background()
	if _, err := r.client.List(ctx); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if _, err := r.client.Watch(t.Context()); err != nil {
		t.Fatalf("watch with the token: %v", err)
	}
	for _, tok := range []string{"", "wrong"} {
		bad := nodeclient.New(r.url, nodeclient.Options{Token: tok})
		if _, err := bad.List(ctx); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("token %q: %v, want unauthorized", tok, err)
		}
		if _, err := bad.Watch(t.Context()); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("watch with token %q: %v, want unauthorized", tok, err)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := nodeclient.New(url, nodeclient.Options{})
	if _, err := c.List(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("unreachable node: %v, want unavailable", err)
	}
}

func TestConnectErrorMapping(t *testing.T) {
	t.Parallel()
	for _, class := range []error{errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalid, errdefs.ErrConflict,
		errdefs.ErrExhausted, errdefs.ErrUnavailable, errdefs.ErrUnsupported, errdefs.ErrUnauthorized, errdefs.ErrForbidden} {
		t.Run(class.Error(), func(t *testing.T) {
			in := fmt.Errorf("sandbox %q: %w", "x", class)
			out := noderpc.FromConnectError(noderpc.ToConnectError(in))
			if !errors.Is(out, class) {
				t.Errorf("%v came back as %v", in, out)
			}
			for _, other := range []error{errdefs.ErrNotFound, errdefs.ErrExhausted} {
				if other != class && errors.Is(out, other) {
					t.Errorf("%v also reads as %v", in, other)
				}
			}
		})
	}
	if err := noderpc.FromConnectError(noderpc.ToConnectError(errors.New("disk on fire"))); err == nil || errhttp.Status(err) != 500 {
		t.Errorf("unclassified error came back as %v", err)
	}
}

// A watch survives a broken stream: the client watches again and gets the
// events of the meantime.
func TestWatchReconnects(t *testing.T) {
	t.Parallel()
	drv := fake.New(fake.Config{})
	a, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Driver: drv, Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
		Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, ReclaimInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(a, noderpc.Options{ResolveTemplate: resolveOwn}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client()})
	ctx := context.Background()
	for _, id := range []string{"sb1", "sb2"} {
		if _, err := c.Create(ctx, req(id)); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	events, err := c.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() nodeapi.Event {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("watch channel closed")
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatal("no event")
		}
		return nodeapi.Event{}
	}
	_ = drv.Exit("sb1", 1)
	if ev := next(); ev.SandboxID != "sb1" {
		t.Fatalf("event %+v", ev)
	}
	srv.CloseClientConnections()
	_ = drv.Exit("sb2", 2)
	if ev := next(); ev.SandboxID != "sb2" || ev.Type != nodeapi.EventExited {
		t.Fatalf("event after the stream broke: %+v", ev)
	}
	cancel()
	for range events {
	}
}

// TestStaleExecution: a pause or kill naming an execution the sandbox has
// left is refused over RPC, and the current execution is untouched.
func TestStaleExecution(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "")
	ctx := context.Background()
	c := r.client
	if _, err := c.Create(ctx, req("sb1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true, ExecutionID: "e-sb1"}); err != nil {
		t.Fatalf("pause of the current execution: %v", err)
	}
	if _, err := c.Resume(ctx, "sb1", nodeapi.ResumeRequest{ExecutionID: "e-2", EndAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true, ExecutionID: "e-sb1"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("pause of an old execution: %v, want conflict", err)
	}
	if err := c.KillExecution(ctx, "sb1", "e-sb1", sandbox.KillTimeout); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("kill of an old execution: %v, want conflict", err)
	}
	got, err := c.Get(ctx, "sb1")
	if err != nil || got.State != sandbox.StateRunning || got.ExecutionID != "e-2" {
		t.Fatalf("after stale calls: %+v, %v; want running execution e-2", got, err)
	}
	if err := c.KillExecution(ctx, "sb1", "e-2", sandbox.KillTimeout); err != nil {
		t.Fatalf("kill of the current execution: %v", err)
	}
}
