//go:build e2e

package envde2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// netns creates a network namespace with loopback up and deletes it at
// cleanup.
func netns(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "wenvd-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Logf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in %s: %v: %s", name, err, out)
	}
	return name
}

// startEnvd runs envd on port 49983 in ns as PID 1 of a new PID namespace
// (as in a sandbox) and waits until it listens. Its mount namespace has an
// empty tmpfs over /root: the SDK runs commands as `bash -l`, and this
// host's root login files are no part of the test (a developer's
// ~/.bashrc can do anything; pyenv's init waits a minute on a lock a
// killed shell left).
func startEnvd(t *testing.T, envd, ns string) {
	t.Helper()
	startAndWait(t, exec.Command("ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
		"sh", "-c", `mount -t tmpfs -o mode=0700 tmpfs /root && exec "$0" "$@"`,
		envd, "--port", "49983", "--log-level", "debug"))
}

// startAndWait starts cmd (which runs envd) and waits for envd's
// "listening" log line; at cleanup it stops envd.
func startAndWait(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start envd: %v", err)
	}
	t.Cleanup(func() {
		// unshare ignores SIGTERM while it waits: stop envd (its child,
		// PID 1 of the namespace, whose exit ends every process there).
		pid := cmd.Process.Pid
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if child, err := strconv.Atoi(f); err == nil {
					_ = unix.Kill(child, unix.SIGTERM)
				}
			}
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if os.Getenv("WARREN_E2E_VERBOSE") != "" {
				t.Log("envd:", line)
			}
			if !signalled && strings.Contains(line, `"envd listening"`) {
				signalled = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("envd did not start listening")
	}
}

// userXattrs reports whether dir's filesystem stores user xattrs.
func userXattrs(dir string) bool {
	f := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return false
	}
	defer os.Remove(f)
	return unix.Setxattr(f, "user.probe", []byte("1"), 0) == nil
}

func TestSDK(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "needs root for a network namespace")
	envd := os.Getenv("WARREN_ENVD")
	testenv.Require(t, envd != "", "WARREN_ENVD is not set (make build)")
	_, err := os.Stat(envd)
	testenv.Require(t, err == nil, "envd binary "+envd+" missing (make build)")
	node, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "needs node")
	_, err = os.Stat("../node_modules/e2b")
	testenv.Require(t, err == nil, "e2e/node_modules/e2b missing (npm ci in e2e/)")
	_, err = exec.LookPath("ip")
	testenv.Require(t, err == nil, "needs iproute2")
	_, err = exec.LookPath("unshare")
	testenv.Require(t, err == nil, "needs unshare (util-linux)")

	ns := netns(t)
	startEnvd(t, envd, ns)

	runScripts(t, node, ns, func(t *testing.T) string {
		work, err := os.MkdirTemp("", "envd-e2e-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(work) })
		return work
	}, userXattrs)
}

// scripts are the SDK scripts, in order (signed.mjs sets and clears a token).
var scripts = []string{"commands.mjs", "files.mjs", "pty.mjs", "watch.mjs", "signed.mjs"}

// runScripts runs every SDK script in ns, each with a fresh work directory
// (a path as envd sees it).
func runScripts(t *testing.T, node, ns string, workDir func(*testing.T) string, xattrs func(string) bool) {
	for _, script := range scripts {
		t.Run(strings.TrimSuffix(script, ".mjs"), func(t *testing.T) {
			work := workDir(t)
			x := "0"
			if xattrs(work) {
				x = "1"
			}
			t.Logf("user xattrs in %s: %s", work, x)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, node, script)
			cmd.Env = append(os.Environ(), "E2B_DEBUG=true", "E2B_API_KEY=e2b_test", "WORK_DIR="+work, "XATTRS="+x)
			out, err := cmd.CombinedOutput()
			t.Logf("%s:\n%s", script, out)
			if err != nil {
				t.Fatalf("%s: %v", script, err)
			}
		})
	}
}
