//go:build e2e

package replicas

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a started process and what it wrote to stderr.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	out  chan string // stdout lines
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

// Logs returns what the process wrote to stderr so far.
func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// start runs cmd with env added; the test's end stops it (SIGTERM) if it
// still runs and logs its stderr when the test failed.
func start(t *testing.T, name string, cmd *exec.Cmd, env ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: make(chan string, 64), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p
	// A pipe of our own rather than StdoutPipe: Wait must return when the
	// process ends, though sandboxes it started may hold the pipe open.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = w
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		stdout.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(p.out)
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.out <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", name, p.cmd.Process.Pid, p.Logs())
		}
	})
	return p
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) unless it ended.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exports waits for the export lines a warren role prints on stdout.
func (p *proc) exports(t *testing.T, names ...string) map[string]string {
	t.Helper()
	env := map[string]string{}
	re := regexp.MustCompile(`^export (\w+)=(\S+)$`)
	timeout := time.After(3 * time.Minute)
	for _, n := range names {
		for env[n] == "" {
			select {
			case l, ok := <-p.out:
				if !ok {
					t.Fatalf("%s exited before printing %s:\n%s", p.name, n, p.Logs())
				}
				if m := re.FindStringSubmatch(l); m != nil {
					env[m[1]] = m[2]
				}
			case <-p.done:
				t.Fatalf("%s exited before printing %s:\n%s", p.name, n, p.Logs())
			case <-timeout:
				t.Fatalf("%s printed no %s:\n%s", p.name, n, p.Logs())
			}
		}
	}
	return env
}

// call sends an admin request to url and returns the body of its 2xx answer.
func call(t *testing.T, method, url string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("X-Admin-Token", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return b
}

// nodeInfo is what the test reads of GET /admin/nodes.
type nodeInfo struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ProxyAddress string `json:"proxyAddress"`
	BootID       string `json:"bootID"`
	Sandboxes    int    `json:"sandboxes"`
}

// waitFor polls cond every 250 ms until it holds; after timeout (generous:
// the machine is loaded) it fails the test with what and cond's last state.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, any)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last %+v", what, timeout, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// steps runs steps.mjs with the real SDK against the replica at base and
// returns its output; a failed step fails the test.
func steps(t *testing.T, base string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"steps.mjs"}, args...)...)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+apiKey)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("steps.mjs %s against %s: %v\n%s", strings.Join(args, " "), base, err, out)
	}
	return string(out)
}

// createVia creates n sandboxes through the replica at base.
func createVia(t *testing.T, base string, n int) []string {
	t.Helper()
	out := steps(t, base, "create", fmt.Sprint(n))
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "ids "); ok {
			var ids []string
			if err := json.Unmarshal([]byte(rest), &ids); err != nil {
				t.Fatal(err)
			}
			return ids
		}
	}
	t.Fatalf("create printed no ids:\n%s", out)
	return nil
}

// runscUnder lists the PIDs of runsc processes whose --root lies under dir
// (the sandboxes of the test's nodes).
func runscUnder(dir string) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("--root="+dir)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}
