package noderole

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/netslot/netslottest"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestBuildSandboxes runs a build sandbox as warren serve makes it (its
// driver, a slot of the node's pool) and checks that a step has its own network
// without the host's loopback, that the node agent's leak reclaim over the
// same cgroup root, data dir and pool leaves it running, and that what a
// crash leaves of it is reclaimed by the next start.
func TestBuildSandboxes(t *testing.T) {
	for _, kind := range []string{"runsc", "runc"} {
		t.Run(kind, func(t *testing.T) { testBuildSandboxes(t, kind) })
	}
}

func testBuildSandboxes(t *testing.T, kind string) {
	runscBin, envd, tarPath := realRuntime(t)
	pool, netCfg := netslottest.New(t)
	data := t.TempDir()
	cgRoot := testenv.Name("warren-test-")
	t.Cleanup(func() { removeCgroupRoots(cgRoot, buildCgroupRoot(cgRoot)) })
	cfg := Host{DataDir: data, Driver: kind, RunscPath: runscBin, RuncPath: "runc", EnvdPath: envd, Net: netCfg}
	log := testenv.Logger(t)
	bs, err := newBuildSandboxes(cfg, cgRoot, pool, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.reclaim(context.Background()) })

	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tarPath, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tarPath, err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := bs.runner.Start(ctx, builder.SandboxRequest{ID: "iso", RootFS: root, Network: true})
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, script string) string {
		t.Helper()
		var out bytes.Buffer
		code, err := sb.Exec(ctx, builder.Process{Args: []string{"/bin/bash", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out})
		if err != nil || code != 0 {
			t.Fatalf("exec %q: code %d, %v\n%s", script, code, err, out.String())
		}
		return out.String()
	}
	probe := fmt.Sprintf(`if timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'; then echo host-loopback-reached; else echo host-loopback-blocked; fi; cat /proc/net/dev`,
		ln.Addr().(*net.TCPAddr).Port)

	t.Run("own network", func(t *testing.T) {
		out := run(t, probe)
		if !strings.Contains(out, "host-loopback-blocked") || accepted.Load() != 0 {
			t.Errorf("a build step reached the host's loopback (%d connections):\n%s", accepted.Load(), out)
		}
		if !strings.Contains(out, netslot.GuestIfName+":") {
			t.Errorf("a build step has no %s of a network slot:\n%s", netslot.GuestIfName, out)
		}
	})

	t.Run("node reclaim leaves it alone", func(t *testing.T) {
		// The node agent's start-up pass is its periodic reclaim with no
		// sandbox known: everything of its driver, cgroup root and pool
		// that it can see is destroyed.
		layersRoot := filepath.Join(data, "layers")
		rm, err := rootfs.New(rootfs.Config{DataRoot: layersRoot}, log)
		if err != nil {
			t.Fatal(err)
		}
		var drv driver.Driver
		if kind == "runsc" {
			drv, err = runsc.New(runsc.Config{Path: runscBin, StateDir: filepath.Join(data, "runsc"), CgroupRoot: "/" + cgRoot, Logger: log})
		} else {
			drv, err = runc.New(runc.Config{StateDir: filepath.Join(data, "runc"), CgroupRoot: "/" + cgRoot, Logger: log})
		}
		if err != nil {
			t.Fatal(err)
		}
		cg, err := cgroup.NewManager(cgRoot, log)
		if err != nil {
			t.Fatal(err)
		}
		a, err := node.New(ctx, node.Config{
			DataDir: filepath.Join(data, "node"), Driver: drv, Cgroups: cg, Net: pool,
			Layers: rootfslayers.New(rm, layersRoot), EnvdPath: envd, Logger: log, ReclaimInterval: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		if got := a.Reclaimed(); sum(got) != 0 {
			t.Errorf("the node agent reclaimed %v of a build sandbox", got)
		}
		out := run(t, probe)
		if !strings.Contains(out, netslot.GuestIfName+":") {
			t.Errorf("the build sandbox lost its network:\n%s", out)
		}
	})

	t.Run("crash leftovers reclaimed", func(t *testing.T) {
		// Warren dies: the sandbox is never stopped. The next start makes
		// the build sandboxes anew and reclaims.
		again, err := newBuildSandboxes(cfg, cgRoot, pool, log)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := again.reclaim(ctx); err != nil || n == 0 {
			t.Fatalf("reclaim = %d, %v; want the build sandbox reclaimed", n, err)
		}
		if ids, err := again.drv.List(ctx); err != nil || len(ids) != 0 {
			t.Errorf("build containers after reclaim: %v, %v", ids, err)
		}
		if names, err := again.cgroups.List(ctx); err != nil || len(names) != 0 {
			t.Errorf("build cgroups after reclaim: %v, %v", names, err)
		}
		if ents, _ := os.ReadDir(filepath.Join(data, "builder", "bundles")); len(ents) != 0 {
			t.Errorf("build bundles after reclaim: %d", len(ents))
		}
		if _, err := sb.Exec(ctx, builder.Process{Args: []string{"/bin/true"}}); err == nil {
			t.Errorf("the reclaimed build sandbox still runs commands")
		}
	})
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// realRuntime returns runsc, envd and the base root filesystem tarball, or
// skips (fails under CI=true) without them or without root.
func realRuntime(t *testing.T) (runscBin, envd, tarPath string) {
	t.Helper()
	testenv.NeedRoot(t, "build sandboxes")
	return testenv.Runsc(t), testenv.Envd(t), testenv.RootFSTar(t)
}

// removeCgroupRoots removes the (empty) cgroup roots a test's runtimes made
// in every hierarchy.
func removeCgroupRoots(roots ...string) {
	for _, r := range roots {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + r)
		for _, d := range dirs {
			os.Remove(d)
		}
		os.Remove(filepath.Join("/sys/fs/cgroup", r))
	}
}
