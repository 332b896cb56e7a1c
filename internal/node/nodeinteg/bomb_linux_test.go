package nodeinteg

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Fork bombs as a new user of the JS SDK starts them: commands.run('bash
// -c ":(){ :|:& };:"', {background: true}) runs the bomb under the SDK's
// login shell with its output streamed to the caller. Its first process
// exits at once; envd then keeps draining the command's pipes, so at the
// task limit each of the bomb's processes reports its failed fork there
// and retries it later (bash's fork retry), as the same bomb with its
// errors to /dev/null does. Had envd closed the pipes, each process
// would die of SIGPIPE at its first failed fork and the bomb would churn
// (churnBomb does that on purpose). Root's commands go through the same
// login shell (bash -l -c), which forks a few times itself.

// sdkBomb is the bomb as the SDK runs it; quietBomb the same with its
// errors to /dev/null; churnBomb the same with its errors to a pipe
// nobody reads, so that each of its processes dies at its first failed
// fork and the others fork again at once.
var (
	sdkBomb   = sdkCommand(`bash -c ":(){ :|:& };:"`)
	quietBomb = sdkCommand(`bash -c ":(){ :|:& };:" 2>/dev/null`)
	churnBomb = sdkCommand(`exec 2> >(exec true); sleep 0.2; bash -c ":(){ :|:& };:"`)
)

// sdkCommand is cmd as the SDK's commands.run runs it.
func sdkCommand(cmd string) *process.ProcessConfig {
	return &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
}

// envdClient calls the process service of one sandbox's envd.
type envdClient struct {
	c     processconnect.ProcessClient
	token string
}

func newEnvdClient(sb *nodeapi.Sandbox, token string) envdClient {
	return envdClient{c: processconnect.NewProcessClient(http1Client, "http://"+sb.Address), token: token}
}

// request wraps msg with the access token and, unless user is empty, the
// user to run as.
func request[T any](msg *T, token, user string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("X-Access-Token", token)
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return req
}

// background starts cfg as user and returns its pid; its output is read
// (and dropped) until the process ends or ctx does, as the SDK reads a
// background command's.
func (e envdClient) background(ctx context.Context, user string, cfg *process.ProcessConfig) (uint32, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stream, err := e.c.Start(ctx, request(&process.StartRequest{Process: cfg, Stdin: proto.Bool(false)}, e.token, user))
	if err != nil {
		return 0, err
	}
	started := make(chan uint32, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			if s := stream.Msg().GetEvent().GetStart(); s != nil {
				started <- s.GetPid()
			}
		}
		close(started)
	}()
	select {
	case pid, ok := <-started:
		if !ok {
			return 0, fmt.Errorf("start %v: no start event: %w", cfg.GetArgs(), stream.Err())
		}
		return pid, nil
	case <-sctx.Done():
		return 0, fmt.Errorf("start %v: %w", cfg.GetArgs(), sctx.Err())
	}
}

// run runs cfg as user within timeout and returns its stdout.
func (e envdClient) run(ctx context.Context, timeout time.Duration, user string, cfg *process.ProcessConfig) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stream, err := e.c.Start(ctx, request(&process.StartRequest{Process: cfg, Stdin: proto.Bool(false)}, e.token, user))
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				return out.String(), fmt.Errorf("run %v: %s", cfg.GetArgs(), end.GetStatus())
			}
			return out.String(), nil
		}
	}
	return out.String(), fmt.Errorf("run %v: no end event: %w", cfg.GetArgs(), stream.Err())
}

// list lists the running processes within timeout.
func (e envdClient) list(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := e.c.List(ctx, request(&process.ListRequest{}, e.token, ""))
	return err
}

// kill sends SIGKILL to the process pid (its group; pid 0: every process
// of the default user) within timeout, as the SDK's commands.kill does.
func (e envdClient) kill(ctx context.Context, timeout time.Duration, pid uint32) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := e.c.SendSignal(ctx, request(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: process.Signal_SIGNAL_SIGKILL,
	}, e.token, ""))
	return err
}

// userProcesses counts the default user's processes (as root).
func (e envdClient) userProcesses(ctx context.Context, timeout time.Duration) (int, error) {
	out, err := e.run(ctx, timeout, "root", &process.ProcessConfig{Cmd: "/usr/bin/pgrep", Args: []string{"-c", "-u", "user"}})
	if err != nil && strings.TrimSpace(out) != "0" { // pgrep exits 1 when it counts 0
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// waitUserEcho asks the default user's `echo alive` until it answers or
// limit passes, and returns how long it took.
func (e envdClient) waitUserEcho(ctx context.Context, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		out, err := e.run(ctx, 30*time.Second, "user", sdkCommand("echo alive"))
		if err == nil && strings.TrimSpace(out) == "alive" {
			return time.Since(t0), nil
		}
		if time.Since(t0) > limit {
			return 0, fmt.Errorf("the default user's echo: %q, %v after %v", out, err, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startBomb starts quietBomb as the default user and waits until it has
// half the task limit's processes (or for a minute), so that what follows
// runs while the guest is saturated. It returns the bomb's pid.
func startBomb(t testing.TB, e envdClient, limit int) uint32 {
	t.Helper()
	ctx := t.Context()
	pid, err := e.background(ctx, "user", quietBomb)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := e.userProcesses(ctx, time.Minute)
		if err == nil && n >= limit/2 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bomb did not reach half the task limit (%d) in a minute: root counts %d, %v", limit, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestForkBombKilledByItsHandle: while a bomb started as the SDK does saturates the
// guest, root's command answers, the bomb's own kill (its pid, whose
// first process has long exited) ends every process it made, and the
// default user's commands work again. The sandbox lives on. Without the
// group kill the kill answers not found and the bomb goes on; without the
// reaper's rounds root's command waits behind the bomb's orphans.
func TestForkBombKilledByItsHandle(t *testing.T) {
	h := newHost(t)
	a, _ := h.agent()
	defer a.Close()
	sb, tok := abuseSandbox(t, h, a, "fk", sandbox.Resources{VCPUs: 2})
	e := newEnvdClient(sb, tok)
	ctx := t.Context()
	pid := startBomb(t, e, 512)
	for i := range 3 {
		if out, err := e.run(ctx, time.Minute, "root", sdkCommand("echo rootok")); err != nil || strings.TrimSpace(out) != "rootok" {
			t.Fatalf("root's command %d during the bomb: %q, %v", i, out, err)
		}
	}
	if err := e.kill(ctx, time.Minute, pid); err != nil {
		t.Fatalf("kill of the bomb's pid %d: %v", pid, err)
	}
	waitNoUserProcesses(t, e)
	if _, err := e.waitUserEcho(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.kill(ctx, time.Minute, pid); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("second kill of the bomb: %v, want not found (nothing left)", err)
	}
	assertAlive(t, a, sb, tok)
}

// TestForkBombResetByUser: commands.kill(0) ends every process of the
// default user, a bomb's included (here two: one of them in a session of
// its own, out of the command's group), and leaves root's alone.
func TestForkBombResetByUser(t *testing.T) {
	h := newHost(t)
	a, _ := h.agent()
	defer a.Close()
	sb, tok := abuseSandbox(t, h, a, "fr", sandbox.Resources{VCPUs: 2})
	e := newEnvdClient(sb, tok)
	ctx := t.Context()
	if _, err := e.background(ctx, "root", &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"600"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.background(ctx, "user", &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c",
		"exec 2>/dev/null; setsid bash -c ':(){ :|:& };:' & :(){ :|:& };:"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for n, _ := e.userProcesses(ctx, time.Minute); n < 256; n, _ = e.userProcesses(ctx, time.Minute) {
		if time.Now().After(deadline) {
			t.Fatalf("the bomb has %d processes after a minute", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := e.kill(ctx, time.Minute, 0); err != nil {
		t.Fatalf("kill(0): %v", err)
	}
	waitNoUserProcesses(t, e)
	if _, err := e.waitUserEcho(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out, err := e.run(ctx, time.Minute, "root", &process.ProcessConfig{Cmd: "/usr/bin/pgrep", Args: []string{"-c", "-x", "sleep"}}); err != nil || strings.TrimSpace(out) != "1" {
		t.Errorf("root's sleep after kill(0): %q, %v; want it running", out, err)
	}
	if err := e.kill(ctx, time.Minute, 0); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("kill(0) with nothing left: %v, want not found", err)
	}
	assertAlive(t, a, sb, tok)
}

// waitNoUserProcesses waits (up to a minute) until the default user has
// no process left.
func waitNoUserProcesses(t testing.TB, e envdClient) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := e.userProcesses(t.Context(), time.Minute)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default user still has %d processes (%v) a minute after the kill", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// spinBomb forks without end in every process it makes: at the task limit
// each process retries its fork at once, and each fork of a Python
// process copies pages (copy-on-write, done by the sentry), so the guest's
// memory reaches the host wall while the sentry has touched nearly all of
// it.
var spinBomb = sdkCommand(`python3 -c '
import os
while True:
    try: os.fork()
    except OSError: pass'`)

// TestForkBombAtTheMemoryWall: a bomb of forking Python processes drives
// the sandbox to its host memory wall for a minute, where the host's OOM
// killer takes stubs (guest processes), never one of the sandbox's other
// processes (the sentry, the gofer, envd's stubs). Without the OOM reserve
// the kernel chose the sentry, whose resident memory counts nearly all of
// the guest's plus the runsc binary's pages, while stubs were left (3 of
// 3 runs). Whether the sandbox lives through the cascade of kills is
// gVisor's: the kernel takes the stub pool too, after which the sentry
// panics at the next fork (docs/configuration.md). The test logs the kill
// order and whether the sandbox lived, and asserts who was chosen.
func TestForkBombAtTheMemoryWall(t *testing.T) {
	h := newHost(t)
	a, _ := h.agent()
	defer a.Close()
	sb, tok := abuseSandbox(t, h, a, "fm", sandbox.Resources{VCPUs: 2})
	e := newEnvdClient(sb, tok)
	ctx := t.Context()
	protected := runtimeProcesses(t, h, sb.ID)
	pool := stubPool(t, h, sb.ID)
	before := dmesgLines()
	if _, err := e.background(ctx, "user", spinBomb); err != nil {
		t.Fatal(err)
	}
	alive := true
	for stop := time.Now().Add(time.Minute); alive && time.Now().Before(stop); time.Sleep(time.Second) {
		cur, err := a.Get(ctx, sb.ID)
		alive = err == nil && cur.State == sandbox.StateRunning
	}
	kills := oomKillsSince(before)
	logKillOrder(t, "the bomb", kills, pool)
	t.Logf("the sandbox lived: %v", alive)
	for _, k := range kills {
		if protected[k.pid] != "" {
			t.Errorf("the host OOM killer chose the sandbox's %s: %s", protected[k.pid], k.line)
		}
	}
	if len(kills) == 0 {
		t.Fatal("the bomb never reached the host memory wall")
	}
	if !alive {
		return
	}
	// The bomb still spins at its task limit: the kill may wait long.
	for deadline := time.Now().Add(3 * time.Minute); ; {
		err := e.kill(ctx, time.Minute, 0)
		if err == nil || connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kill(0) during the bomb: %v", err)
		}
	}
	waitNoUserProcesses(t, e)
	assertAlive(t, a, sb, tok)
}

// runtimeProcesses returns the processes of sandbox id's host cgroup that
// are not stubs scored 1000 (the sentry, the gofer, envd's stubs), by pid,
// each with what it is.
func runtimeProcesses(t testing.TB, h *host, id string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", h.cgRoot, sandbox.HostName(id), "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pid := range strings.Fields(string(b)) {
		adj, err := os.ReadFile("/proc/" + pid + "/oom_score_adj")
		if err != nil || strings.TrimSpace(string(adj)) == "1000" {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		name, _, _ := strings.Cut(string(cmd), "\x00")
		if name == "" {
			name = "stub of envd"
		}
		out[pid] = name + " (pid " + pid + ")"
	}
	if len(out) < 2 {
		t.Fatalf("runtime processes %v: want the sentry and the gofer at least", out)
	}
	return out
}
