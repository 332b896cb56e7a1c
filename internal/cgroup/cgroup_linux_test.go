package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// The test binary doubles as the workload: with WARREN_CGROUP_HELPER set it
// waits for a line on stdin (so the test can move it into a cgroup first)
// and then runs the named workload.
func TestMain(m *testing.M) {
	if h := os.Getenv("WARREN_CGROUP_HELPER"); h != "" {
		runHelper(h)
		return
	}
	os.Exit(m.Run())
}

func runHelper(kind string) {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	switch kind {
	case "hog": // allocate and touch 512 MiB
		var keep [][]byte
		for i := 0; i < 64; i++ {
			b := make([]byte, 8<<20)
			for j := range b {
				if j%4096 == 0 {
					b[j] = 1
				}
			}
			keep = append(keep, b)
		}
		fmt.Println("survived", len(keep))
		os.Exit(0)
	case "spin": // burn CPU until killed
		fmt.Println("spinning")
		x := 0
		for {
			x++
		}
	}
	os.Exit(3)
}

// requireRoot skips without root, and fails instead under CI=true.
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "cgroup tests")
}

func testLog(t *testing.T) *slog.Logger {
	return testenv.Logger(t)
}

// testRoot returns a unique root and removes it from every hierarchy at the end.
func testRoot(t *testing.T) string {
	root := testenv.Name("warren-test-")
	t.Cleanup(func() {
		l, err := readLayout("/proc/self/mountinfo")
		if err != nil {
			return
		}
		dirs := []string{}
		for _, mp := range l.mountPoints() {
			dirs = append(dirs, filepath.Join(mp, root))
		}
		if l.unified != "" {
			dirs = append(dirs, filepath.Join(l.unified, root))
		}
		for _, d := range dirs {
			if err := rmdirTree(context.Background(), d, time.Now().Add(10*time.Second)); err != nil {
				t.Errorf("cleanup %s: %v", d, err)
			}
		}
	})
	return root
}

// addProc moves pid into cgroup c in every hierarchy the manager manages.
func addProc(t *testing.T, c Cgroup, pid int) {
	t.Helper()
	var dirs []string
	switch c := c.(type) {
	case *v1Cgroup:
		dirs = c.m.ownDirs(c.name)
	case *v2Cgroup:
		dirs = []string{c.m.dir(c.name)}
	default:
		t.Fatalf("unknown cgroup type %T", c)
	}
	for _, d := range dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			t.Fatalf("add pid %d to %s: %v", pid, d, err)
		}
	}
}

// started is a helper process waiting for the go-ahead.
type started struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan error
}

// startHelper starts a workload and moves it into c before it runs: the
// test binary itself for a helper kind, or argv when kind is "".
func startHelper(t *testing.T, c Cgroup, kind string, argv ...string) *started {
	t.Helper()
	var cmd *exec.Cmd
	if kind != "" {
		cmd = exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "WARREN_CGROUP_HELPER="+kind)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A plain pipe rather than StdoutPipe: Wait runs concurrently with reads.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	cmd.Stdout = pw
	cmd.Stderr = testenv.Output(t)
	err = cmd.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, stdin: stdin, out: bufio.NewReader(pr), done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-s.done
		s.done <- err
	})
	addProc(t, c, cmd.Process.Pid)
	return s
}

func (s *started) goAhead(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

func TestReadLayout(t *testing.T) {
	t.Parallel()
	const info = `25 30 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup cgroup rw,cpu
27 25 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
28 25 0:26 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
29 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
30 25 0:28 / /sys/fs/cgroup/cpu\040x rw - cgroup cgroup rw,cpuacct,cpuset
`
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := readLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory",
		"name=systemd": "/sys/fs/cgroup/systemd", "cpuacct": "/sys/fs/cgroup/cpu x", "cpuset": "/sys/fs/cgroup/cpu x",
	}
	for k, v := range want {
		if l.v1[k] != v {
			t.Errorf("controller %s: got %q, want %q", k, l.v1[k], v)
		}
	}
	if len(l.v1) != len(want) {
		t.Errorf("got controllers %v", l.v1)
	}
	if l.unified != "/sys/fs/cgroup/unified" {
		t.Errorf("unified = %q", l.unified)
	}
	if n := len(l.mountPoints()); n != 4 {
		t.Errorf("mount points = %d, want 4", n)
	}
}

func TestNoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := Noop()
	c, err := m.Create(ctx, "sbx-a", sandbox.Resources{MemoryMB: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "../x", sandbox.Resources{}); !errdefs.IsInvalid(err) {
		t.Errorf("bad name: got %v, want invalid", err)
	}
	if st, err := c.Stats(ctx); err != nil || st != (Stats{}) {
		t.Errorf("stats = %+v, %v", st, err)
	}
	if err := c.KillAll(ctx); err != nil {
		t.Error(err)
	}
	if m.Path("sbx-a") != "" {
		t.Error("noop path should be empty")
	}
}

func TestPath(t *testing.T) {
	t.Parallel()
	m := &v1Manager{root: "warren"}
	if got := m.Path("sbx-x"); got != "/warren/sbx-x" {
		t.Errorf("Path = %q", got)
	}
}

func newTestManager(t *testing.T) Manager {
	t.Helper()
	requireRoot(t)
	m, err := NewManager(testRoot(t), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCreateOpenListKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestManager(t)
	c, err := m.Create(ctx, "sbx-one", sandbox.Resources{VCPUs: 1, MemoryMB: 128, Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "sbx-one", sandbox.Resources{}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second create: got %v, want already exists", err)
	}
	if _, err := m.Open(ctx, "sbx-two"); !errdefs.IsNotFound(err) {
		t.Errorf("open missing: got %v, want not found", err)
	}
	if _, err := m.Create(ctx, "other", sandbox.Resources{}); err != nil {
		t.Fatal(err)
	}
	names, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "sbx-one" {
		t.Errorf("List = %v, want [sbx-one]", names)
	}
	o, err := m.Open(ctx, "sbx-one")
	if err != nil {
		t.Fatal(err)
	}
	st, err := o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryLimit != 128<<20 {
		t.Errorf("memory limit = %d, want %d", st.MemoryLimit, 128<<20)
	}
	if err := o.Update(ctx, sandbox.Resources{VCPUs: 2, MemoryMB: 256, Pids: 10}); err != nil {
		t.Fatal(err)
	}
	if err := o.Update(ctx, sandbox.Resources{VCPUs: 1, MemoryMB: 64}); err != nil {
		t.Fatal(err)
	}
	if st, _ := o.Stats(ctx); st.MemoryLimit != 64<<20 {
		t.Errorf("memory limit after update = %d", st.MemoryLimit)
	}
	if err := c.Update(ctx, sandbox.Resources{MemoryMB: -1}); !errdefs.IsInvalid(err) {
		t.Errorf("negative update: %v", err)
	}
	for _, n := range []string{"sbx-one", "other"} {
		c, err := m.Open(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.KillAll(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.KillAll(ctx); err != nil {
			t.Errorf("second KillAll: %v", err)
		}
	}
	if names, _ := m.List(ctx); len(names) != 0 {
		t.Errorf("List after KillAll = %v", names)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestManager(t)
	tests := []struct {
		name  string
		res   sandbox.Resources
		run   func(t *testing.T, c Cgroup)
		check func(t *testing.T, c Cgroup)
	}{
		{
			name: "memory_hog_is_oom_killed",
			res:  sandbox.Resources{MemoryMB: 64},
			run: func(t *testing.T, c Cgroup) {
				h := startHelper(t, c, "hog")
				h.goAhead(t)
				select {
				case err := <-h.done:
					h.done <- err
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.ExitCode() != -1 {
						t.Errorf("hog exit = %v, want killed by signal", err)
					}
				case <-time.After(2 * time.Minute):
					t.Fatal("hog still running")
				}
				oom, err := c.OOMKilled(ctx)
				if err != nil || !oom {
					t.Errorf("OOMKilled = %v, %v; want true", oom, err)
				}
				st, err := c.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.MemoryPeakBytes < 32<<20 || st.MemoryPeakBytes > 65<<20 {
					t.Errorf("peak = %d, want between 32 MiB and the 64 MiB limit", st.MemoryPeakBytes)
				}
			},
		},
		{
			name: "pids_limit_holds",
			res:  sandbox.Resources{Pids: 16},
			run: func(t *testing.T, c Cgroup) {
				const python = "/usr/bin/python3"
				_, err := os.Stat(python)
				testenv.Require(t, err == nil, "the fork bomb needs "+python)
				// Forks 60 sleepers; the ones past the limit fail with EAGAIN.
				h := startHelper(t, c, "", python, "-c", `
import os, sys, time
sys.stdin.readline()
ok = failed = 0
for i in range(60):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        os.close(1)
        time.sleep(300)
        os._exit(0)
    ok += 1
print(ok, failed, flush=True)
time.sleep(300)
`)
				h.goAhead(t)
				line, err := h.out.ReadString('\n')
				var ok, failed int
				if _, serr := fmt.Sscan(line, &ok, &failed); err != nil || serr != nil {
					t.Fatalf("fork loop: %q, %v", line, err)
				}
				if ok != 15 || failed != 45 {
					t.Errorf("forks: %d ok, %d failed; want 15 and 45", ok, failed)
				}
				st, err := c.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Pids != 16 {
					t.Errorf("pids.current = %d, want the limit 16", st.Pids)
				}
				procs, err := c.Procs(ctx)
				if err != nil || len(procs) != 16 {
					t.Errorf("Procs = %d (%v), want 16", len(procs), err)
				}
				if oom, _ := c.OOMKilled(ctx); oom {
					t.Error("OOMKilled without a memory kill")
				}
				if hit, err := c.PidsLimitHit(ctx); err != nil || !hit {
					t.Errorf("PidsLimitHit = %v, %v after refused forks", hit, err)
				}
			},
		},
		{
			name: "cpu_usage_moves_under_quota",
			res:  sandbox.Resources{VCPUs: 1},
			run: func(t *testing.T, c Cgroup) {
				h := startHelper(t, c, "spin")
				before, err := c.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				h.goAhead(t)
				if _, err := h.out.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(time.Minute)
				for {
					after, err := c.Stats(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if after.CPUUsageNanos > before.CPUUsageNanos+50e6 && after.MemoryBytes > 0 && after.Pids >= 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("stats did not move: before %+v after %+v", before, after)
					}
					time.Sleep(20 * time.Millisecond) // polling a counter, not synchronising
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := NamePrefix + strings.ReplaceAll(tc.name, "_", "-")
			c, err := m.Create(ctx, name, tc.res)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.KillAll(context.Background()) })
			tc.run(t, c)
			if err := c.KillAll(ctx); err != nil {
				t.Fatal(err)
			}
			if procs, err := c.Procs(ctx); err == nil && len(procs) > 0 {
				t.Errorf("Procs after KillAll = %v", procs)
			}
			if _, err := m.Open(ctx, name); !errdefs.IsNotFound(err) {
				t.Errorf("Open after KillAll: %v, want not found", err)
			}
			if v1, ok := m.(*v1Manager); ok {
				for _, d := range v1.allDirs(name) {
					if exists(d) {
						t.Errorf("%s remains", d)
					}
				}
			}
		})
	}
}

// TestV2OnUnified exercises the v2 manager on the unified hierarchy of a
// hybrid host, which has the core files (cgroup.kill, cgroup.procs,
// cpu.stat) but no controllers.
func TestV2OnUnified(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ctx := context.Background()
	l, err := readLayout("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if l.unified == "" {
		t.Skip("no cgroup2 mount")
	}
	m := newV2(l.unified, testRoot(t), testLog(t))
	ctrls, _ := readString(l.unified, "cgroup.controllers")
	if !strings.Contains(ctrls, "memory") {
		_, err := m.Create(ctx, "sbx-limited", sandbox.Resources{MemoryMB: 64})
		if !errdefs.IsUnsupported(err) {
			t.Errorf("memory limit without memory controller: %v, want unsupported", err)
		}
	}
	c, err := m.Create(ctx, "sbx-v2", sandbox.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	if names, err := m.List(ctx); err != nil || len(names) != 1 || names[0] != "sbx-v2" {
		t.Errorf("List = %v, %v", names, err)
	}
	if m.Path("sbx-v2") != "/"+m.root+"/sbx-v2" {
		t.Errorf("Path = %q", m.Path("sbx-v2"))
	}
	h := startHelper(t, c, "", "/bin/sh", "-c", "read x; sleep 300 & sleep 300 & echo ok; wait")
	h.goAhead(t)
	if _, err := h.out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	procs, err := c.Procs(ctx)
	if err != nil || len(procs) != 3 {
		t.Errorf("Procs = %v, %v; want 3", procs, err)
	}
	if _, err := c.Stats(ctx); err != nil {
		t.Error(err)
	}
	if err := c.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.done:
		h.done <- nil
	case <-time.After(time.Minute):
		t.Fatal("helper survived KillAll")
	}
	if exists(m.dir("sbx-v2")) {
		t.Error("cgroup remains after KillAll")
	}
}

// TestPartialLeftover: a cgroup that a runtime left only in hierarchies the
// manager does not create (here cpuset and the unified tree) is listed,
// opened and removed.
func TestPartialLeftover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestManager(t)
	v1, ok := m.(*v1Manager)
	if !ok {
		t.Skip("v1 host only")
	}
	var made []string
	for _, d := range v1.allDirs("sbx-left") {
		if strings.Contains(d, "/cpuset/") || (v1.layout.unified != "" && strings.HasPrefix(d, v1.layout.unified)) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			made = append(made, d)
		}
	}
	if len(made) == 0 {
		t.Skip("no cpuset or unified hierarchy")
	}
	names, err := m.List(ctx)
	if err != nil || len(names) != 1 || names[0] != "sbx-left" {
		t.Fatalf("List = %v, %v", names, err)
	}
	c, err := m.Open(ctx, "sbx-left")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range made {
		if exists(d) {
			t.Errorf("%s remains", d)
		}
	}
}

// TestCPUWeight: SetCPUWeight writes the weight (v1: cpu.shares scaled
// from 100 = 1024, at least 2; v2: cpu.weight) and refuses one outside
// 1-10000.
func TestCPUWeight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestManager(t)
	c, err := m.Create(ctx, "sbx-weight", sandbox.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.KillAll(ctx)
	w, ok := c.(CPUWeighter)
	if !ok {
		t.Fatalf("%T has no CPU weight", c)
	}
	for _, bad := range []int{0, 10001} {
		if err := w.SetCPUWeight(ctx, bad); !errdefs.IsInvalid(err) {
			t.Errorf("weight %d: %v, want invalid", bad, err)
		}
	}
	read := func() string {
		t.Helper()
		var b []byte
		var err error
		switch m := m.(type) {
		case *v1Manager:
			b, err = os.ReadFile(filepath.Join(m.dir("cpu", "sbx-weight"), "cpu.shares"))
		case *v2Manager:
			b, err = os.ReadFile(filepath.Join(m.dir("sbx-weight"), "cpu.weight"))
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	_, v1 := m.(*v1Manager)
	for _, tc := range []struct {
		weight int
		v1, v2 string
	}{{1, "10", "1"}, {DefaultCPUWeight, "1024", "100"}, {200, "2048", "200"}} {
		if err := w.SetCPUWeight(ctx, tc.weight); err != nil {
			if !v1 && errdefs.IsUnsupported(err) {
				t.Skip("no cpu controller in the unified tree")
			}
			t.Fatal(err)
		}
		want := tc.v2
		if v1 {
			want = tc.v1
		}
		if got := read(); got != want {
			t.Errorf("weight %d: file says %s, want %s", tc.weight, got, want)
		}
	}
}
