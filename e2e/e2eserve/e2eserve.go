// Package e2eserve runs Warren's servers (the binary at $WARREN_WARREN,
// with the runsc driver) for the end-to-end tests, each test process on
// host objects of its own (cgroup root, nftables table, address range,
// veth prefix): `warren serve`, against which it runs node scripts that
// use the real E2B SDK, or, for the tests across machines, `warren api`
// replicas and `warren node` processes (StartAPI, Node, StartProc), with
// calls of their admin API (Admin) and nodes' RPC.
package e2eserve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/pkg/client"
)

// Require skips the test with reason when ok is false, or fails it when
// the environment has CI=true (CI must run every test).
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	testenv.Require(t, ok, reason)
}

// Exists reports whether the path p is non-empty and exists.
func Exists(p string) bool {
	_, err := os.Stat(p)
	return p != "" && err == nil
}

// Prerequisites checks what a runsc-backed warren serve and the SDK need:
// root, the built binaries and rootfs, node, and e2e/node_modules (the
// tests run in a subdirectory of e2e/).
func Prerequisites(t testing.TB) {
	t.Helper()
	RunscPrerequisites(t)
	_, err := exec.LookPath("node")
	Require(t, err == nil, "node is not installed")
	Require(t, Exists("../node_modules/e2b/package.json"), "e2e/node_modules/e2b missing; run npm ci in e2e/")
}

// Isolation names the host objects of one test process's servers, apart
// from other tests and servers; a restarted server must get the same.
type Isolation struct {
	CgroupRoot, Table, CIDR, VethPrefix string
}

// NewIsolation returns host object names for this process: name (letters
// only) tells test packages apart, cidr and vethPrefix must differ between
// packages that run at the same time.
func NewIsolation(name, cidr, vethPrefix string) Isolation {
	return Isolation{
		CgroupRoot: fmt.Sprintf("warren-e2e%s-%d", name, os.Getpid()),
		Table:      fmt.Sprintf("warrene2e%s%d", name, os.Getpid()),
		CIDR:       cidr,
		VethPrefix: vethPrefix,
	}
}

// Cleanup removes the nftables table with the network namespace directory
// named after it, and the cgroup roots (the node's and the build
// sandboxes' beside it); call it from TestMain after the tests ran.
func (i Isolation) Cleanup() {
	_ = netslot.DeleteTable(netslot.Config{Table: i.Table})
	for _, root := range []string{i.CgroupRoot, i.CgroupRoot + "-build"} {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + root)
		for _, d := range dirs {
			os.Remove(d)
		}
	}
}

// Options describe one server.
type Options struct {
	DataDir    string
	Listen     string // HOST:PORT; empty picks a free loopback port
	APIKey     string
	AdminToken string // optional
	// ExtraArgs are added to the serve command line. Without a
	// --pool-size among them the server runs with --pool-size 0 (no warm
	// pool).
	ExtraArgs []string
	Isolation Isolation
	// Domain runs the server in E2B's own topology ("domain mode"): HTTPS
	// with a throw-away CA, --domain e2b.localhost:<port>, and an SDK
	// environment (Environ) of E2B_DOMAIN and NODE_EXTRA_CA_CERTS only,
	// so the SDK reaches https://api.<domain> and each sandbox at
	// https://<port>-<id>.<domain>. Needs DomainPrerequisites.
	Domain bool
}

// Server is a running warren serve.
type Server struct {
	Cmd *exec.Cmd
	// Env holds the E2B_* variables the server printed.
	Env map[string]string
	// Domain is the sandbox domain in domain mode (e2b.localhost:<port>).
	Domain string
	opts   Options
	logs   *lockedWriter // the server's stderr
	tls    *domainTLS    // domain mode
}

// Start runs warren serve with opts and waits for its export lines. At the
// end of the test it kills the sandboxes left, stops the server, unmounts
// what is left under the data dir, and logs the server's output if the test
// failed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Listen == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		opts.Listen = l.Addr().String()
		l.Close()
	}
	args := []string{"serve", "--driver", "runsc", "--listen", opts.Listen,
		"--data-dir", opts.DataDir, "--api-key", opts.APIKey, "--runsc", os.Getenv("WARREN_RUNSC"),
		"--envd", os.Getenv("WARREN_ENVD"), "--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"),
		"--cgroup-root", opts.Isolation.CgroupRoot, "--nft-table", opts.Isolation.Table,
		"--net-cidr", opts.Isolation.CIDR, "--veth-prefix", opts.Isolation.VethPrefix}
	if opts.AdminToken != "" {
		args = append(args, "--admin-token", opts.AdminToken)
	}
	var dom *domainTLS
	if opts.Domain {
		dom = newDomainTLS(t, t.TempDir())
		_, port, _ := net.SplitHostPort(opts.Listen)
		args = append(args, "--tls-cert", dom.certFile, "--tls-key", dom.keyFile, "--domain", DomainBase+":"+port)
	}
	if !slices.Contains(opts.ExtraArgs, "--pool-size") {
		// No warm pool unless a test asks for one: the tests count
		// sandboxes and host objects, and the machine is small.
		args = append(args, "--pool-size", "0")
	}
	args = append(args, opts.ExtraArgs...)
	cmd := exec.Command(os.Getenv("WARREN_WARREN"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Cmd: cmd, Env: map[string]string{}, opts: opts, logs: &lockedWriter{}, tls: dom}
	if dom != nil {
		_, port, _ := net.SplitHostPort(opts.Listen)
		s.Domain = DomainBase + ":" + port
	}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			// Leave nothing running: kill what the test left, then stop.
			c := s.Client()
			if list, _, err := c.List(context.Background(), client.ListOptions{}); err == nil {
				for _, sb := range list {
					c.Kill(context.Background(), sb.SandboxID)
				}
			}
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
		UnmountUnder(t, opts.DataDir)
		if t.Failed() {
			t.Logf("warren serve log:\n%s", s.Logs())
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
	for s.Env["E2B_API_KEY"] == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("warren serve exited before printing its exports:\n%s", s.Logs())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				s.Env[m[1]] = m[2]
			}
		case <-timeout:
			t.Fatalf("warren serve printed no exports:\n%s", s.Logs())
		}
	}
	go io.Copy(io.Discard, stdout)
	return s
}

// Logs returns what the server wrote to stderr so far.
func (s *Server) Logs() string { return s.logs.String() }

// Environ is the test process's environment plus the server's exports
// (in domain mode: plus E2B_DOMAIN, E2B_API_KEY and NODE_EXTRA_CA_CERTS,
// without E2B_API_URL and E2B_SANDBOX_URL).
func (s *Server) Environ() []string {
	env := os.Environ()
	if s.tls != nil {
		return s.domainEnv(env)
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// Node runs a node script with the server's exports in its environment
// and returns its combined output; a failing script fails the test.
func (s *Server) Node(t testing.TB, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Env = s.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return string(out)
}

// UnmountUnder unmounts what is left mounted below dir (the runtime's null
// network namespace, sandbox layers), deepest first.
func UnmountUnder(t testing.TB, dir string) {
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
		if err := unmountDetach(m); err != nil {
			t.Logf("unmount %s: %v", m, err)
		}
	}
}

type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Run runs name with args and the server's exports (plus env) in its
// environment, for at most 15 minutes, and returns its combined output and
// exit code; it fails the test when the command did not run to an exit.
func (s *Server) Run(t testing.TB, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(s.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee) && ee.Exited():
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		return "", -1
	}
}

// Main runs the tests of m, removes the host objects of isos (Cleanup)
// and exits with the tests' code; call it from TestMain.
func Main(m *testing.M, isos ...Isolation) {
	code := m.Run()
	for _, i := range isos {
		i.Cleanup()
	}
	os.Exit(code)
}
