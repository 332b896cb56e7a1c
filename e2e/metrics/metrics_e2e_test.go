//go:build e2e

package metricse2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warren-sandbox/warren/pkg/client"
)

func require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing under CI: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return p != "" && err == nil
}

// prerequisites checks what a runsc-backed warren serve, its template
// builds (runc) and the SDK need.
func prerequisites(t testing.TB) {
	t.Helper()
	require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc, build overlays)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		require(t, exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
	for _, bin := range []string{"node", "runc"} {
		_, err := exec.LookPath(bin)
		require(t, err == nil, bin+" is not installed")
	}
	require(t, exists("../node_modules/e2b/package.json"), "e2e/node_modules/e2b missing; run npm ci in e2e/")
}

// isolation names the host objects of this test process's servers.
var isolation = struct{ cgroupRoot, table string }{
	cgroupRoot: fmt.Sprintf("warren-e2em-%d", os.Getpid()),
	table:      fmt.Sprintf("warrene2emm%d", os.Getpid()),
}

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) {
	code := m.Run()
	exec.Command("nft", "delete", "table", "inet", isolation.table).Run()
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + isolation.cgroupRoot)
	for _, d := range dirs {
		os.Remove(d)
	}
	os.Exit(code)
}

type server struct {
	cmd  *exec.Cmd
	env  map[string]string
	logs *lockedWriter
}

const (
	apiKey     = "e2b_a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3"
	adminToken = "e2e-metrics-admin"
)

// startServe runs warren serve --driver runsc on a free loopback port with
// its state in dataDir and waits for its export lines.
func startServe(t testing.TB, dataDir string) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Getenv("WARREN_WARREN"), "serve", "--driver", "runsc", "--listen", listen,
		"--data-dir", dataDir, "--api-key", apiKey, "--admin-token", adminToken, "--runsc", os.Getenv("WARREN_RUNSC"),
		"--envd", os.Getenv("WARREN_ENVD"), "--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"),
		"--cgroup-root", isolation.cgroupRoot, "--nft-table", isolation.table,
		"--net-cidr", "100.68.0.0/16", "--veth-prefix", "wm")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, env: map[string]string{}, logs: &lockedWriter{w: &strings.Builder{}}}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			c := client.New(s.env["E2B_API_URL"], apiKey)
			if list, _, err := c.List(context.Background(), client.ListOptions{}); err == nil {
				for _, sb := range list {
					c.Kill(context.Background(), sb.SandboxID)
				}
			}
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
		unmountUnder(t, dataDir)
		if t.Failed() {
			t.Logf("warren serve log:\n%s", s.logs.String())
		}
	})
	re := regexp.MustCompile(`^export (\w+)=(\S+)$`)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(5 * time.Minute) // the first start unpacks the base rootfs
	for s.env["E2B_API_KEY"] == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("warren serve exited before printing its exports:\n%s", s.logs.String())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				s.env[m[1]] = m[2]
			}
		case <-timeout:
			t.Fatalf("warren serve printed no exports:\n%s", s.logs.String())
		}
	}
	go io.Copy(io.Discard, stdout)
	return s
}

// unmountUnder unmounts what is left mounted below dir, deepest first.
func unmountUnder(t testing.TB, dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var mounts []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			mounts = append(mounts, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", m, err)
		}
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(*strings.Builder).String()
}

// node runs a script with the server's exports in its environment.
func (s *server) node(t testing.TB, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return string(out)
}

// TestTemplateBuild builds a template with the SDK's Template.build()

// TestGetMetrics creates a sandbox with the SDK and polls getMetrics()
// (instance and static) until it returns samples; they must come within
// 30 s of the create and carry CPU, memory and disk figures.
func TestGetMetrics(t *testing.T) {
	prerequisites(t)
	s := startServe(t, t.TempDir())
	out := s.node(t, "metrics.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("metrics flow did not finish:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestWatchdogHealth checks the watchdog against a real sandbox: within
// 90 s of its create (probes every 25-40 s) the sandbox detail reads
// healthy, and /metrics has a guest memory sample from envd's answer.
func TestWatchdogHealth(t *testing.T) {
	prerequisites(t)
	s := startServe(t, t.TempDir())
	ctx := context.Background()
	c := client.New(s.env["E2B_API_URL"], apiKey)
	timeout := 300
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		d, err := c.Get(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Health == "healthy" {
			break
		}
		if d.Health != "unknown" || time.Now().After(deadline) {
			t.Fatalf("health %q %s after create, want healthy", d.Health, time.Since(deadline.Add(-90*time.Second)))
		}
		time.Sleep(time.Second)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.env["E2B_API_URL"]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	var samples uint64
	var sum float64
	for _, m := range mfs["sandbox_guest_mem_used_bytes"].GetMetric() {
		samples += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	if samples == 0 || sum <= 0 {
		t.Fatalf("sandbox_guest_mem_used_bytes: %d samples, sum %v; want a reading from the accepted probe", samples, sum)
	}
	t.Logf("guest memory: %d samples, mean %.0f MiB", samples, sum/float64(samples)/(1<<20))
	if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
}
