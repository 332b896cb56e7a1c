package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the decoded JSON log lines.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// env is one simulated host: the fakes outlive the agents started on it.
type env struct {
	t      *testing.T
	dir    string
	drv    driver.Driver
	fake   *fake.Driver
	net    *nodetest.Net
	cg     *nodetest.Cgroups
	layers *nodetest.Layers
	envd   *nodetest.Envd
	logs   *syncBuffer
	reg    *prometheus.Registry
	// tune adjusts the config of every agent started.
	tune func(*node.Config)
}

func newEnv(t *testing.T, fcfg fake.Config) *env {
	t.Helper()
	f := fake.New(fcfg)
	return &env{
		t: t, dir: t.TempDir(), drv: f, fake: f,
		net: nodetest.NewNet(), cg: nodetest.NewCgroups(), layers: nodetest.NewLayers(),
		envd: &nodetest.Envd{}, logs: &syncBuffer{},
	}
}

func (e *env) config() node.Config {
	e.reg = prometheus.NewRegistry()
	cfg := node.Config{
		DataDir:         e.dir,
		Driver:          e.drv,
		Cgroups:         e.cg,
		Net:             e.net,
		Layers:          e.layers,
		Envd:            e.envd,
		EnvdPath:        "/usr/local/bin/envd",
		Registry:        e.reg,
		Logger:          slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReclaimInterval: -1,
		FreeDisk:        func(string) (uint64, error) { return 100 << 30, nil },
	}
	if e.tune != nil {
		e.tune(&cfg)
	}
	return cfg
}

// start starts an agent on the env; it is closed at the end of the test.
func (e *env) start() *node.Agent {
	e.t.Helper()
	a, err := node.New(context.Background(), e.config())
	if err != nil {
		e.t.Fatalf("node.New: %v", err)
	}
	e.t.Cleanup(func() { a.Close() })
	return a
}

func createReq(id string) nodeapi.CreateRequest {
	return nodeapi.CreateRequest{
		ID:          id,
		ExecutionID: "exec-" + id,
		TeamID:      "team1",
		Template: nodeapi.Template{
			ID: "tmpl", BuildID: "build1", RootFS: "/templates/tmpl/rootfs",
			Env:      map[string]string{"A": "template", "B": "template"},
			User:     "user",
			Workdir:  "/home/user",
			StartCmd: "python3 -m http.server",
		},
		Resources:       sandbox.Resources{VCPUs: 1, MemoryMB: 256},
		EnvVars:         map[string]string{"B": "create"},
		EnvdAccessToken: "access-" + id,
		Metadata:        map[string]string{"k": "v"},
	}
}

func (e *env) create(a *node.Agent, id string, mod ...func(*nodeapi.CreateRequest)) *nodeapi.Sandbox {
	e.t.Helper()
	req := createReq(id)
	for _, m := range mod {
		m(&req)
	}
	sb, err := a.Create(context.Background(), req)
	if err != nil {
		e.t.Fatalf("create %s: %v", id, err)
	}
	return sb
}

// nextEvent waits for an event (generously: the machine may be loaded).
func nextEvent(t *testing.T, ch <-chan nodeapi.Event) nodeapi.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return nodeapi.Event{}
}

// assertNoHostObjects fails if any fake host object of id remains.
func (e *env) assertNoHostObjects(id string) {
	e.t.Helper()
	for _, n := range e.net.Live() {
		if n == id {
			e.t.Errorf("network slot of %s left", id)
		}
	}
	if _, ok := e.cg.Get(sandbox.HostName(id)); ok {
		e.t.Errorf("cgroup of %s left", id)
	}
	if _, ok := e.layers.Get(id); ok {
		e.t.Errorf("layer of %s left", id)
	}
	if _, err := e.drv.Status(context.Background(), id); err == nil {
		e.t.Errorf("runtime container of %s left", id)
	}
}

func (e *env) now() time.Time { return time.Now() }

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
