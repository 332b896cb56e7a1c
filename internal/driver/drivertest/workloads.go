package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// loopInit is an init that runs until it is killed.
var loopInit = []string{"/bin/sh", "-c", "while true; do sleep 1; done"}

// counterInit counts in memory (the shell variable i) and publishes
// "<token> <i>" in /tmp/counter (tmpfs: part of the sandbox's memory) and i
// in /var/tmp/counter (the root filesystem: visible from the host; written
// in place, so that a copy of the writable layer never meets a vanishing
// temporary file). token is drawn at boot, so a restarted init would show a
// new one.
var counterInit = []string{"/bin/sh", "-c", `
tok=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
i=0
while true; do
  i=$((i+1))
  echo "$tok $i" > /tmp/.counter && mv /tmp/.counter /tmp/counter
  echo "$i" > /var/tmp/counter
  sleep 0.1
done`}

// exec runs args in sandbox id and returns stdout, stderr and the code.
func (s *suite) exec(t *testing.T, id string, p driver.Process) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	p.Stdout, p.Stderr = &stdout, &stderr
	code, err := s.h.Driver.Exec(ctxT(t), id, p)
	if err != nil {
		t.Fatalf("Exec(%s, %q): %v", id, p.Args, err)
	}
	return stdout.String(), stderr.String(), code
}

// sh runs a shell command in id and returns its stdout; a non-zero exit
// fails the test.
func (s *suite) sh(t *testing.T, id, script string) string {
	t.Helper()
	out, errOut, code := s.exec(t, id, driver.Process{Args: []string{"/bin/sh", "-c", script}})
	if code != 0 {
		t.Fatalf("Exec(%s, %q) = code %d, stderr %q", id, script, code, errOut)
	}
	return out
}

// counter reads "<token> <i>" from a sandbox running counterInit.
func (s *suite) counter(t *testing.T, id string) (string, int) {
	t.Helper()
	out := strings.Fields(s.sh(t, id, "cat /tmp/counter 2>/dev/null || echo none 0"))
	if len(out) != 2 {
		t.Fatalf("counter of %s = %q", id, out)
	}
	n, err := strconv.Atoi(out[1])
	if err != nil {
		t.Fatalf("counter of %s = %q", id, out)
	}
	return out[0], n
}

// eventually polls cond every 50 ms until it holds or the suite's timeout
// passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCounter waits until id's counter reaches at least n.
func (s *suite) waitCounter(t *testing.T, id string, n int) (string, int) {
	t.Helper()
	var tok string
	var got int
	eventually(t, fmt.Sprintf("the counter of %s reaches %d", id, n), func() bool {
		tok, got = s.counter(t, id)
		return got >= n
	})
	return tok, got
}

// hostCounter reads the counter that counterInit publishes on the root
// filesystem, from the host.
func hostCounter(t *testing.T, sp driver.Spec) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sp.RootFS, "var/tmp/counter"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return -1
	}
	return n
}

func (s *suite) testExec(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	tests := []struct {
		name       string
		p          driver.Process
		wantOut    string
		wantErr    string
		wantCode   int
		anyNonZero bool
	}{
		{name: "streams and exit code", p: driver.Process{Args: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}},
			wantOut: "out\n", wantErr: "err\n", wantCode: 3},
		{name: "stdin", p: driver.Process{Args: []string{"cat"}, Stdin: strings.NewReader("ping\n")}, wantOut: "ping\n"},
		{name: "env cwd user", p: driver.Process{Args: []string{"/bin/sh", "-c", `echo "$FOO"; pwd; id -u; id -g`},
			Env: []string{"FOO=bar"}, Cwd: "/home/user", User: "1000:1000"}, wantOut: "bar\n/home/user\n1000\n1000\n"},
		{name: "hostname and files", p: driver.Process{Args: []string{"/bin/sh", "-c", "hostname; cat /etc/hostname; grep -c nameserver /etc/resolv.conf"}},
			wantOut: sp.Hostname + "\n" + sp.Hostname + "\n1\n"},
		{name: "killed by a signal", p: driver.Process{Args: []string{"/bin/sh", "-c", "kill -9 $$"}}, wantCode: 137},
		{name: "missing binary", p: driver.Process{Args: []string{"/no/such/binary"}}, anyNonZero: true},
		{name: "no host processes visible", p: driver.Process{Args: []string{"/bin/sh", "-c", "ls -d /proc/[0-9]* | wc -l"}}, anyNonZero: false,
			wantOut: "3\n"}, // sh, ls's pipeline partner wc and the init
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := s.exec(t, sp.ID, tt.p)
			if tt.anyNonZero {
				if code == 0 {
					t.Errorf("code = 0, want non-zero")
				}
				return
			}
			if code != tt.wantCode {
				t.Errorf("code = %d, want %d (stderr %q)", code, tt.wantCode, errOut)
			}
			if tt.name == "no host processes visible" {
				if n, _ := strconv.Atoi(strings.TrimSpace(out)); n < 2 || n > 8 {
					t.Errorf("sandbox sees %q processes, want a handful", out)
				}
				return
			}
			if out != tt.wantOut {
				t.Errorf("stdout = %q, want %q", out, tt.wantOut)
			}
			if tt.wantErr != "" && errOut != tt.wantErr {
				t.Errorf("stderr = %q, want %q", errOut, tt.wantErr)
			}
		})
	}
}

func (s *suite) testExecContext(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := s.h.Driver.Exec(ctx, sp.ID, driver.Process{Args: []string{"sleep", "1000"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec past its deadline = %v, want context.DeadlineExceeded", err)
	}
	eventually(t, "the cancelled process is gone", func() bool {
		return s.sh(t, sp.ID, "ps -eo args | grep -c '^sleep 1000' || true") == "0\n"
	})
}

func (s *suite) testInitExit(t *testing.T) {
	// The init lives a moment: runsc reports an exit status only to a
	// waiter registered before the exit (see the runsc package doc).
	sp := s.spec(t, SpecOptions{}, "/bin/sh", "-c", "sleep 1; exit 7")
	s.start(t, sp)
	e := s.waitExit(t, sp.ID)
	if e.Code != 7 || e.Signaled || e.OOM {
		t.Errorf("exit = %+v, want code 7", e)
	}
	s.wantState(t, sp.ID, driver.StateStopped)
	if e2 := s.waitExit(t, sp.ID); e2.Code != e.Code {
		t.Errorf("second Wait = %+v, want the same exit %+v", e2, e)
	}
}

func (s *suite) testSignal(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, "/bin/sh", "-c", `trap "exit 42" TERM; while true; do sleep 0.2; done`)
	s.start(t, sp)
	s.sh(t, sp.ID, "kill -TERM 1")
	if e := s.waitExit(t, sp.ID); e.Code != 42 {
		t.Errorf("exit after SIGTERM = %+v, want code 42 from the trap", e)
	}
}

func (s *suite) testOOM(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, "/usr/bin/python3", "-c",
		"import time\nb = []\nwhile True:\n    b.append(b'x' * (8 << 20))\n    time.sleep(0.01)\n")
	sp.Resources = sandbox.Resources{MemoryMB: 128}
	s.start(t, sp)
	e := s.waitExit(t, sp.ID)
	if !e.OOM || e.Code != 137 {
		t.Errorf("exit of a memory hog = %+v, want OOM with code 137", e)
	}
}

// testPids runs a fork bomb under a pids limit. Two outcomes conform: the
// limit makes forks fail inside and the sandbox lives on (runc), or the
// runtime's own tasks hit the host limit and the sandbox stops (runsc
// without envd, which sets the guest's own limit: the host limit caps the
// sentry's threads and stub processes). Either way the sandbox's cgroup
// never holds more tasks than the host limit.
func (s *suite) testPids(t *testing.T) {
	const limit = 128
	sp := s.spec(t, SpecOptions{}, loopInit...)
	sp.Resources = sandbox.Resources{Pids: limit}
	s.start(t, sp)
	want := int64(limit)
	if s.h.HostPids != nil {
		want = s.h.HostPids(limit)
	}
	if max, ok := pidsMax(sp.CgroupParent); ok && max != strconv.FormatInt(want, 10) {
		t.Errorf("pids.max of %s = %s, want %d", sp.CgroupParent, max, want)
	}
	// Fork 400 sleepers from one process, count what the limit let run,
	// then kill them.
	var stdout, stderr bytes.Buffer
	code, err := s.h.Driver.Exec(ctxT(t), sp.ID, driver.Process{
		Args: []string{"python3", "-c", `
import os, time
kids, fails = [], 0
for i in range(400):
    try:
        pid = os.fork()
    except OSError:
        fails += 1
        continue
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    kids.append(pid)
print(len(kids), fails, flush=True)
for pid in kids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
`},
		Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil || code != 0 {
		// Either the sandbox stopped (runsc), or this is a failure.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		e, werr := s.h.Driver.Wait(ctx, sp.ID)
		if werr != nil {
			t.Fatalf("fork bomb: code %d, %v, stderr %q, and the sandbox still runs", code, err, stderr.String())
		}
		t.Logf("the fork bomb stopped the sandbox (exec: code %d, %v; exit %+v)", code, err, e)
		s.wantState(t, sp.ID, driver.StateStopped)
		return
	}
	var kids, fails int
	if _, err := fmt.Sscan(stdout.String(), &kids, &fails); err != nil {
		t.Fatalf("fork bomb printed %q", stdout.String())
	}
	t.Logf("under a pids limit of %d: %d forks succeeded, %d failed", limit, kids, fails)
	if int64(kids) >= want || fails == 0 {
		t.Errorf("%d of 400 forks succeeded under a pids limit of %d", kids, limit)
	}
	eventually(t, "the sandbox answers again", func() bool {
		var buf bytes.Buffer
		code, err := s.h.Driver.Exec(ctxT(t), sp.ID, driver.Process{Args: []string{"echo", "alive"}, Stdout: &buf})
		return err == nil && code == 0 && buf.String() == "alive\n"
	})
}

// pidsMax reads pids.max of an OCI cgroups path (v1, then v2).
func pidsMax(cgroupsPath string) (string, bool) {
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/pids", cgroupsPath, "pids.max"),
		filepath.Join("/sys/fs/cgroup", cgroupsPath, "pids.max"),
	} {
		if data, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(data)), true
		}
	}
	return "", false
}

func (s *suite) testNetwork(t *testing.T) {
	sp := s.spec(t, SpecOptions{Network: true}, loopInit...)
	s.start(t, sp)
	out := s.sh(t, sp.ID, `python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"ok"); print(a.recv(2).decode())'`)
	if out != "ok\n" {
		t.Errorf("loopback echo = %q, want ok", out)
	}
}

func (s *suite) freezer(t *testing.T) driver.Freezer {
	t.Helper()
	f, ok := s.h.Driver.(driver.Freezer)
	if !s.h.Driver.Capabilities().Freeze {
		t.Skip("the driver does not advertise Freeze")
	}
	if !ok {
		t.Fatal("Capabilities().Freeze is set but the driver does not implement driver.Freezer")
	}
	return f
}

func (s *suite) testFreezeThaw(t *testing.T) {
	f := s.freezer(t)
	ctx := ctxT(t)
	sp := s.spec(t, SpecOptions{}, counterInit...)
	s.start(t, sp)
	if !s.h.Simulated {
		eventually(t, "the counter runs", func() bool { return hostCounter(t, sp) >= 2 })
	}
	for range 2 { // idempotent
		if err := f.Freeze(ctx, sp.ID); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
	}
	s.wantState(t, sp.ID, driver.StateFrozen)
	if _, err := s.h.Driver.Exec(ctx, sp.ID, driver.Process{Args: []string{"true"}, Stdout: io.Discard}); !errdefs.IsConflict(err) {
		t.Errorf("Exec while frozen = %v, want conflict", err)
	}
	var frozenAt int
	if !s.h.Simulated {
		frozenAt = hostCounter(t, sp)
		time.Sleep(1500 * time.Millisecond) // let time pass: a running counter would move ~15 steps
		if now := hostCounter(t, sp); now != frozenAt {
			t.Errorf("counter moved from %d to %d while frozen", frozenAt, now)
		}
	}
	for range 2 {
		if err := f.Thaw(ctx, sp.ID); err != nil {
			t.Fatalf("Thaw: %v", err)
		}
	}
	s.wantState(t, sp.ID, driver.StateRunning)
	if !s.h.Simulated {
		eventually(t, "the counter runs again after Thaw", func() bool { return hostCounter(t, sp) > frozenAt })
	}
}
