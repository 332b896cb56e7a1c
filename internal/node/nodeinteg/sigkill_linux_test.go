package nodeinteg

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// agentProcessEnv, when set, makes the test binary run a node agent with
// the configuration it holds (JSON agentProcessConfig), serving the node
// RPC on loopback, until it is killed.
const agentProcessEnv = "WARREN_NODEINTEG_AGENT"

type agentProcessConfig struct {
	Dir, CgRoot, Runsc, Envd string
	Net                      netslot.Config
	// Template is the host's template, to which the agent's node RPC
	// resolves the creates that name it (no path crosses the wire).
	Template nodeapi.Template
}

func runAgentProcess() {
	var c agentProcessConfig
	if err := json.Unmarshal([]byte(os.Getenv(agentProcessEnv)), &c); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	if err := serveAgent(c); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
}

func serveAgent(c agentProcessConfig) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	drv, err := runsc.New(runsc.Config{Path: c.Runsc, StateDir: filepath.Join(c.Dir, "runsc"), CgroupRoot: "/" + c.CgRoot, Logger: log})
	if err != nil {
		return err
	}
	cg, err := cgroup.NewManager(c.CgRoot, log)
	if err != nil {
		return err
	}
	pool, err := netslot.NewPool(c.Net, log)
	if err != nil {
		return err
	}
	layersRoot := filepath.Join(c.Dir, "layers")
	rm, err := rootfs.New(rootfs.Config{DataRoot: layersRoot}, log)
	if err != nil {
		return err
	}
	a, err := node.New(ctx, node.Config{
		DataDir: filepath.Join(c.Dir, "node"), Driver: drv, Cgroups: cg, Net: pool,
		Layers: rootfslayers.New(rm, layersRoot), EnvdPath: c.Envd, Logger: log, ReclaimInterval: -1, MinFreeDiskBytes: -1,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	resolve := func(_ context.Context, _ string, t nodeapi.Template) (nodeapi.Template, error) {
		if t.ID != c.Template.ID || t.BuildID != c.Template.BuildID {
			return nodeapi.Template{}, fmt.Errorf("template %q build %q: %w", t.ID, t.BuildID, errdefs.ErrNotFound)
		}
		return c.Template, nil
	}
	mux.Handle(noderpc.NewHandler(a, noderpc.Options{Token: "t0ken", Logger: log, ResolveTemplate: resolve}))
	fmt.Println("ADDR", l.Addr().String())
	return http.Serve(l, mux)
}

// startAgentProcess runs a node agent in a child process on the host.
func (h *host) startAgentProcess(t *testing.T) (*exec.Cmd, *nodeclient.Client) {
	t.Helper()
	cfg, _ := json.Marshal(agentProcessConfig{Dir: h.dir, CgRoot: h.cgRoot, Runsc: h.runsc, Envd: h.envd, Net: h.netCfg,
		Template: h.createReq("").Template})
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), agentProcessEnv+"="+string(cfg))
	cmd.Stderr = h.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("agent process: %q, %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd, nodeclient.New("http://"+addr, nodeclient.Options{Token: "t0ken"})
}

// TestAgentSIGKILL: an agent process killed with SIGKILL while its
// sandbox runs (and while it had the sandbox's state half-way through a
// create of another) is replaced by a new agent on the same data dir: the
// running sandbox is adopted and answers, nothing leaks.
func TestAgentSIGKILL(t *testing.T) {
	h := newHost(t)
	h.agents = 1 // the clean-up agent must run: the child's sandboxes outlive it
	ctx := context.Background()
	cmd, c := h.startAgentProcess(t)
	id := "sk" + sandbox.NewID()[:10]
	tok := "tok-" + id
	sb, err := c.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo alive > /tmp/mark")
	// A create in flight when the agent dies.
	go func() { _, _ = c.Create(ctx, h.createReq("sk-inflight")) }()
	time.Sleep(150 * time.Millisecond) // let it get somewhere; either outcome is fine
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	a, drv := h.agent()
	defer a.Close()
	got, err := a.Get(ctx, id)
	if err != nil || got.State != sandbox.StateRunning || got.Address != sb.Address {
		t.Fatalf("after SIGKILL and restart: %+v, %v", got, err)
	}
	if out, _ := run(t, got, tok, "cat /tmp/mark"); strings.TrimSpace(out) != "alive" {
		t.Errorf("adopted sandbox: %q", out)
	}
	t.Logf("reclaimed after SIGKILL: %v", a.Reclaimed())
	if left := h.leftovers(drv, "sk-inflight"); len(left) > 0 {
		t.Errorf("left of the create in flight: %v", left)
	}
	list, _ := a.List(ctx)
	for _, s := range list {
		if err := a.Kill(ctx, s.ID, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
	if left := h.leftovers(drv, ""); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}
