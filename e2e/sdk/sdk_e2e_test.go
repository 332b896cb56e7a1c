//go:build e2e

package sdke2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// prerequisites checks what a runsc-backed warren serve and the SDK need.
func prerequisites(t testing.TB) {
	t.Helper()
	require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		require(t, exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
	_, err := exec.LookPath("node")
	require(t, err == nil, "node is not installed")
	require(t, exists("../node_modules/e2b/package.json"), "e2e/node_modules/e2b missing; run npm ci in e2e/")
}

// isolation names the host objects of this test process's servers; a
// restarted server must find the same ones.
var isolation = struct{ cgroupRoot, table string }{
	cgroupRoot: fmt.Sprintf("warren-e2e-%d", os.Getpid()),
	table:      fmt.Sprintf("warrene2e%d", os.Getpid()),
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
	logs *lockedWriter // the server's stderr
}

const apiKey = "e2b_00112233445566778899aabbccddeeff00112233"

// startServe runs warren serve --driver runsc on a free loopback port
// with its state in dataDir, and waits for its export lines.
func startServe(t testing.TB, dataDir, listen string) *server {
	t.Helper()
	if listen == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = l.Addr().String()
		l.Close()
	}
	cmd := exec.Command(os.Getenv("WARREN_WARREN"), "serve", "--driver", "runsc", "--listen", listen,
		"--data-dir", dataDir, "--api-key", apiKey, "--runsc", os.Getenv("WARREN_RUNSC"),
		"--envd", os.Getenv("WARREN_ENVD"), "--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"),
		// Host objects of their own, apart from other tests and servers.
		"--cgroup-root", isolation.cgroupRoot, "--nft-table", isolation.table,
		"--net-cidr", "100.66.0.0/16", "--veth-prefix", "we")
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
			// Leave nothing running: kill what the test left, then stop.
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

// unmountUnder unmounts what is left mounted below dir (the runtime's
// null network namespace, sandbox layers), deepest first.
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

func (s *server) environ() []string {
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	return env
}

func (s *server) node(t testing.TB, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Env = s.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return string(out)
}

// health asks the sandbox's envd for /health through the server's proxy.
func (s *server) health(t testing.TB, id string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.env["E2B_SANDBOX_URL"]+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestSDKFlow(t *testing.T) {
	prerequisites(t)
	s := startServe(t, t.TempDir(), "")
	out := s.node(t, "flow.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("flow did not finish:\n%s", out)
	}
}

func TestCLI(t *testing.T) {
	prerequisites(t)
	cli := "../node_modules/@e2b/cli/dist/index.js"
	require(t, exists(cli), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	s := startServe(t, t.TempDir(), "")
	ctx := context.Background()
	c := client.New(s.env["E2B_API_URL"], apiKey)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	out := s.node(t, cli, "sandbox", "list")
	if !strings.Contains(out, sb.SandboxID) {
		t.Fatalf("sandbox list lacks %s:\n%s", sb.SandboxID, out)
	}
	s.node(t, cli, "sandbox", "kill", sb.SandboxID)
	if _, err := c.Get(ctx, sb.SandboxID); !client.IsNotFound(err) {
		t.Fatalf("after CLI kill: %v", err)
	}
}

// TestRestart kills warren serve with SIGKILL while sandboxes run; after a
// restart they are listed, reachable, and their deadlines still fire.
func TestRestart(t *testing.T) {
	prerequisites(t)
	dir := t.TempDir()
	s := startServe(t, dir, "")
	ctx := context.Background()
	c := client.New(s.env["E2B_API_URL"], apiKey)
	short, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: ptr(45)})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: ptr(600)})
	if err != nil {
		t.Fatal(err)
	}
	listen := strings.TrimPrefix(s.env["E2B_API_URL"], "http://")
	s.cmd.Process.Kill()
	s.cmd.Wait()

	s = startServe(t, dir, listen)
	list, _, err := c.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sb := range list {
		got[sb.SandboxID] = true
	}
	if !got[short.SandboxID] || !got[long.SandboxID] {
		t.Fatalf("after restart the list is %v", list)
	}
	for _, id := range []string{short.SandboxID, long.SandboxID} {
		if code := s.health(t, id); code != http.StatusNoContent {
			t.Fatalf("sandbox %s after restart: health %d", id, code)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for s.health(t, short.SandboxID) != http.StatusBadGateway {
		if time.Now().After(deadline) {
			t.Fatal("the short sandbox's deadline did not fire after the restart")
		}
		time.Sleep(time.Second)
	}
	if code := s.health(t, long.SandboxID); code != http.StatusNoContent {
		t.Fatalf("long sandbox: health %d", code)
	}
	c.Kill(ctx, long.SandboxID)
}

func ptr[T any](v T) *T { return &v }

// BenchmarkCreateFirstCommand measures Sandbox.create → first
// commands.run through the SDK on loopback (runsc driver). It reports p50
// and p99 over b.N sandboxes.
func BenchmarkCreateFirstCommand(b *testing.B) {
	prerequisites(b)
	s := startServe(b, b.TempDir(), "")
	out := s.node(b, "bench.mjs", strconv.Itoa(b.N))
	var res struct{ MS []float64 }
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &res); err != nil || len(res.MS) == 0 {
		b.Fatalf("bench output %q: %v", out, err)
	}
	sort.Float64s(res.MS)
	b.ReportMetric(res.MS[len(res.MS)/2], "p50-ms")
	b.ReportMetric(res.MS[(len(res.MS)*99)/100], "p99-ms")
}
