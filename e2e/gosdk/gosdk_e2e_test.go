//go:build e2e

package gosdke2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/client/buildcontext"
	"github.com/warren-sandbox/warren/pkg/e2b"
)

// iso names the host objects of this test process's servers.
var iso = e2eserve.NewIsolation("gosdk", "100.97.0.0/16", "wg")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const apiKey = "e2b_c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3"

// serve runs warren serve on this package's port with its data under the
// worktree's var/, and returns the SDK configuration it printed.
func serve(t *testing.T) e2b.Config {
	t.Helper()
	e2eserve.Require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		e2eserve.Require(t, e2eserve.Exists(os.Getenv(env)), "$"+env+" does not exist; run make build base-rootfs")
	}
	if err := os.MkdirAll("../../var", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("../../var", "gosdk-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.Abs(dir)
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after the server's cleanup
	s := e2eserve.Start(t, e2eserve.Options{DataDir: dir, Listen: "127.0.0.1:3700", APIKey: apiKey, Isolation: iso})
	return e2b.Config{APIKey: s.Env["E2B_API_KEY"], APIURL: s.Env["E2B_API_URL"], SandboxURL: s.Env["E2B_SANDBOX_URL"], Domain: s.Env["E2B_DOMAIN"]}
}

// TestReadmeFlow does what the README's JS example does, in Go: create a
// sandbox, run python with streamed output (and stdin, and a PTY), write
// and read a file, watch a directory, pause, connect (the processes and
// files are still there), and kill.
func TestReadmeFlow(t *testing.T) {
	cfg := serve(t)
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 5 * time.Minute, Metadata: map[string]string{"test": "gosdk"}})
	if err != nil {
		t.Fatal(err)
	}

	var streamed strings.Builder
	r, err := sb.Commands.Run(ctx, `python -c "print(6*7)"`, e2b.RunOptions{OnStdout: func(s string) { streamed.WriteString(s) }})
	if err != nil || r.Stdout != "42\n" || streamed.String() != "42\n" {
		t.Fatalf("python: %+v %v, streamed %q", r, err, streamed.String())
	}
	r, err = sb.Commands.Run(ctx, `echo "$WHO in $(pwd) as $(id -un)"; echo oops >&2; exit 7`, e2b.RunOptions{Env: map[string]string{"WHO": "go"}, Cwd: "/tmp", User: "root"})
	var exit *e2b.CommandExitError
	if !errors.As(err, &exit) || exit.ExitCode != 7 || r.Stdout != "go in /tmp as root\n" || r.Stderr != "oops\n" {
		t.Fatalf("exit 7: %+v %v", r, err)
	}

	if _, err := sb.Files.Write(ctx, "/home/user/a.txt", []byte("hello"), e2b.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, err := sb.Files.Read(ctx, "/home/user/a.txt", e2b.FileOptions{}); err != nil || string(data) != "hello" {
		t.Fatalf("read: %q %v", data, err)
	}
	st, err := sb.Files.Stat(ctx, "a.txt", e2b.FileOptions{}) // relative to the default user's home
	if err != nil || st.Path != "/home/user/a.txt" || st.Owner != "user" || st.Size != 5 {
		t.Fatalf("stat: %+v %v", st, err)
	}
	entries, err := sb.Files.List(ctx, "/home/user", e2b.ListDirOptions{})
	if err != nil || !slices.ContainsFunc(entries, func(e e2b.EntryInfo) bool { return e.Name == "a.txt" }) {
		t.Fatalf("list: %+v %v", entries, err)
	}
	if ok, err := sb.Files.MakeDir(ctx, "/home/user/w", e2b.FileOptions{}); !ok || err != nil {
		t.Fatalf("mkdir: %v %v", ok, err)
	}
	w, err := sb.Files.Watch(ctx, "/home/user/w", e2b.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Run(ctx, "echo x > /home/user/w/made-by-shell", e2b.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := <-w.Events; !ok || ev.Name != "made-by-shell" {
		t.Fatalf("watch event %+v open %v err %v", ev, ok, w.Err())
	}
	w.Stop()

	py, err := sb.Commands.Start(ctx, "python3 -c 'import sys; print(sum(int(l) for l in sys.stdin))'", e2b.RunOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := py.SendStdin(ctx, []byte("40\n2\n")); err != nil {
		t.Fatal(err)
	}
	if err := py.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := py.Wait(ctx); err != nil || r.Stdout != "42\n" {
		t.Fatalf("stdin: %+v %v", r, err)
	}
	var term strings.Builder
	var termMu sync.Mutex
	pty, err := sb.Pty.Create(ctx, e2b.PtyOptions{Cols: 80, Rows: 24, OnData: func(s string) { termMu.Lock(); term.WriteString(s); termMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Pty.Resize(ctx, pty.PID, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := sb.Pty.SendInput(ctx, pty.PID, []byte("stty size; tty; exit\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := pty.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	termMu.Lock()
	out := term.String()
	termMu.Unlock()
	if !strings.Contains(out, "40 120") || !strings.Contains(out, "/dev/pts/") {
		t.Fatalf("pty output %q", out)
	}

	bg, err := sb.Commands.Start(ctx, "sleep 600", e2b.RunOptions{Tag: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	bg.Disconnect()
	if ok, err := sb.Pause(ctx); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if running, err := sb.IsRunning(ctx); running || err != nil {
		t.Fatalf("paused sandbox running: %v %v", running, err)
	}
	again, err := e2b.Connect(ctx, sb.ID, e2b.ConnectOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	procs, err := again.Commands.List(ctx)
	if err != nil || !slices.ContainsFunc(procs, func(p e2b.ProcessInfo) bool { return p.PID == bg.PID && p.Tag == "survivor" }) {
		t.Fatalf("process %d not kept across the pause: %+v %v", bg.PID, procs, err)
	}
	if data, err := again.Files.Read(ctx, "a.txt", e2b.FileOptions{}); err != nil || string(data) != "hello" {
		t.Fatalf("read after resume: %q %v", data, err)
	}
	if ok, err := again.Commands.Kill(ctx, bg.PID); !ok || err != nil {
		t.Fatalf("kill process: %v %v", ok, err)
	}

	list, _, err := e2b.List(ctx, e2b.ListOptions{Config: cfg, Metadata: map[string]string{"test": "gosdk"}})
	if err != nil || len(list) != 1 || list[0].SandboxID != sb.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if ok, err := again.Kill(ctx); !ok || err != nil {
		t.Fatalf("kill: %v %v", ok, err)
	}
	if running, err := sb.IsRunning(ctx); running || err != nil {
		t.Fatalf("killed sandbox running: %v %v", running, err)
	}
	if _, err := sb.Info(ctx); !e2b.IsNotFound(err) {
		t.Fatalf("info after kill: %v, want not found", err)
	}
}

// TestForkSnapshotMetrics changes a sandbox's network rules, forks it and
// snapshots it: the copies
// and a sandbox started from the snapshot have its files; the snapshot is
// listed and deleted; metrics come within a minute of the start.
func TestForkSnapshotMetrics(t *testing.T) {
	cfg := serve(t)
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.Write(ctx, "state.txt", []byte("before"), e2b.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.UpdateNetwork(ctx, e2b.NetworkUpdate{DenyOut: []string{"0.0.0.0/0"}, AllowOut: []string{"10.9.8.7"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := sb.Info(ctx); err != nil || info.Network == nil || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) || !slices.Equal(info.Network.AllowOut, []string{"10.9.8.7"}) {
		t.Fatalf("network after update: %+v %v", info, err)
	}
	forks, err := sb.Fork(ctx, 1, time.Minute)
	if err != nil || len(forks) != 1 || forks[0].ID == sb.ID {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	if data, err := forks[0].Files.Read(ctx, "state.txt", e2b.FileOptions{}); err != nil || string(data) != "before" {
		t.Fatalf("fork's file: %q %v", data, err)
	}
	if _, err := forks[0].Files.Write(ctx, "state.txt", []byte("fork"), e2b.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := sb.Files.Read(ctx, "state.txt", e2b.FileOptions{}); string(data) != "before" {
		t.Fatalf("a fork's write reached its source: %q", data)
	}

	snap, err := sb.CreateSnapshot(ctx, "gosdk-snap")
	if err != nil {
		t.Fatal(err)
	}
	snaps, _, err := e2b.ListSnapshots(ctx, e2b.SnapshotListOptions{Config: cfg, SandboxID: sb.ID})
	if err != nil || !slices.ContainsFunc(snaps, func(s e2b.Snapshot) bool { return s.SnapshotID == snap.SnapshotID }) {
		t.Fatalf("snapshot %+v not listed: %+v %v", snap, snaps, err)
	}
	from, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: snap.SnapshotID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := from.Files.Read(ctx, "state.txt", e2b.FileOptions{}); err != nil || string(data) != "before" {
		t.Fatalf("file in a sandbox from the snapshot: %q %v", data, err)
	}
	if _, err := from.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := e2b.DeleteSnapshot(ctx, snap.SnapshotID, cfg); !ok || err != nil {
		t.Fatalf("delete snapshot: %v %v", ok, err)
	}
	if ok, err := e2b.DeleteSnapshot(ctx, snap.SnapshotID, cfg); ok || err != nil {
		t.Fatalf("second delete: %v %v, want false", ok, err)
	}

	deadline := time.Now().Add(time.Minute) // samples are taken every 5 s
	for {
		m, err := sb.Metrics(ctx, e2b.MetricsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			if m[0].MemTotal == 0 || m[0].CPUCount == 0 {
				t.Fatalf("metric %+v", m[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no metrics a minute after the start")
		}
		time.Sleep(time.Second)
	}
}

// TestBuildTemplate builds a template from the base one with the log
// streamed to a callback; a sandbox of it has what the steps made, and a
// failing step returns the build's reason.
func TestBuildTemplate(t *testing.T) {
	cfg := serve(t)
	ctx := context.Background()
	contextDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(contextDir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(contextDir, "app", "main.py"), []byte("print(6*7)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs []e2b.BuildLogEntry
	info, err := e2b.BuildTemplate(ctx, e2b.TemplateOptions{Config: cfg, Name: "gosdk-tpl", FromTemplate: "base", ContextDir: contextDir,
		Steps: []e2b.TemplateStep{e2b.StepEnv("GREETING", "built"), e2b.StepRun(`echo "$GREETING" > /home/user/made`, "user"),
			e2b.StepCopy("app", "/opt/app", "user"), e2b.StepWorkdir("/home/user")},
		OnLog: func(e e2b.BuildLogEntry) { logs = append(logs, e) }})
	if err != nil {
		t.Fatalf("build: %v; log %+v", err, logs)
	}
	if info.Status != "ready" || len(logs) == 0 {
		t.Fatalf("build %+v with %d log lines", info, len(logs))
	}
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: "gosdk-tpl", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sb.Commands.Run(ctx, `cat made; echo "$GREETING"; pwd; python3 /opt/app/main.py; stat -c %U /opt/app/main.py`, e2b.RunOptions{})
	if err != nil || r.Stdout != "built\nbuilt\n/home/user\n42\nuser\n" {
		t.Fatalf("in a sandbox of the template: %+v %v", r, err)
	}
	// A COPY through a symlink out of the context is refused here, before
	// the server is asked for anything.
	if err := os.Symlink("/etc", filepath.Join(contextDir, "etclink")); err != nil {
		t.Fatal(err)
	}
	_, err = e2b.BuildTemplate(ctx, e2b.TemplateOptions{Config: cfg, Name: "gosdk-escape", ContextDir: contextDir,
		Steps: []e2b.TemplateStep{e2b.StepCopy("etclink/passwd", "/x")}})
	if !errors.Is(err, buildcontext.ErrInvalid) {
		t.Fatalf("COPY etclink/passwd: %v, want buildcontext.ErrInvalid", err)
	}
	_, err = e2b.BuildTemplate(ctx, e2b.TemplateOptions{Config: cfg, Name: "gosdk-bad", Steps: []e2b.TemplateStep{e2b.StepRun("exit 9")}})
	var failed *client.BuildFailedError
	if !errors.As(err, &failed) {
		t.Fatalf("failing build: %v, want *client.BuildFailedError", err)
	}
}

// TestFilesSurface covers the transfer and watch options against a real
// envd: gzip both ways (also after a pause), entry info on streamed and
// polled watch events, and the startedAfter list filter.
func TestFilesSurface(t *testing.T) {
	cfg := serve(t)
	ctx := context.Background()
	first, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	firstInfo, err := first.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// startedAfter is "at or after" (E2B's API): the first sandbox's own
	// start keeps both, a nanosecond later only the second.
	list, _, err := e2b.List(ctx, e2b.ListOptions{Config: cfg, StartedAfter: firstInfo.StartedAt})
	if err != nil || len(list) != 2 {
		t.Fatalf("started at or after the first sandbox: %+v %v, want both", list, err)
	}
	list, _, err = e2b.List(ctx, e2b.ListOptions{Config: cfg, StartedAfter: firstInfo.StartedAt.Add(time.Nanosecond)})
	if err != nil || len(list) != 1 || list[0].SandboxID != sb.ID {
		t.Fatalf("started after the first sandbox: %+v %v, want only %s", list, err, sb.ID)
	}
	if all, _, err := e2b.List(ctx, e2b.ListOptions{Config: cfg, Order: "asc"}); err != nil || len(all) != 2 || all[0].SandboxID != first.ID {
		t.Fatalf("list oldest first: %+v %v", all, err)
	}

	content := []byte(strings.Repeat("gzip me ", 50_000))
	if _, err := sb.Files.Write(ctx, "/home/user/big.txt", content, e2b.FileOptions{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.WriteStream(ctx, "/home/user/big2.txt", strings.NewReader(string(content)), e2b.FileOptions{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Commands.Run(ctx, "cmp big.txt big2.txt && wc -c < big.txt", e2b.RunOptions{Cwd: "/home/user"})
	if err != nil || strings.TrimSpace(r.Stdout) != "400000" {
		t.Fatalf("gzip uploads in the sandbox: %+v %v", r, err)
	}
	for _, gz := range []bool{true, false} {
		if data, err := sb.Files.Read(ctx, "/home/user/big.txt", e2b.FileOptions{Gzip: gz}); err != nil || string(data) != string(content) {
			t.Fatalf("read (gzip %v): %d bytes, %v", gz, len(data), err)
		}
	}

	if _, err := sb.Files.MakeDir(ctx, "/home/user/w", e2b.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := sb.Files.Watch(ctx, "/home/user/w", e2b.WatchOptions{IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	poll, err := sb.Files.WatchPolling(ctx, "/home/user/w", e2b.WatchOptions{IncludeEntry: true, Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Run(ctx, "printf 12345 > /home/user/w/made", e2b.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, ok := <-w.Events
	if !ok || ev.Name != "made" || ev.Entry == nil || ev.Entry.Path != "/home/user/w/made" || ev.Entry.Owner != "user" {
		t.Fatalf("watch event %+v entry %+v open %v err %v", ev, ev.Entry, ok, w.Err())
	}
	w.Stop()
	// The polled events are in envd once the streamed one arrived (both
	// watches read the same inotify events), but poll a bounded while.
	var polled []e2b.FilesystemEvent
	for i := 0; i < 100 && !slices.ContainsFunc(polled, func(e e2b.FilesystemEvent) bool { return e.Name == "made" }); i++ {
		evs, err := poll.NewEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		polled = append(polled, evs...)
		time.Sleep(100 * time.Millisecond)
	}
	i := slices.IndexFunc(polled, func(e e2b.FilesystemEvent) bool { return e.Name == "made" })
	if i < 0 || polled[i].Entry == nil || polled[i].Entry.Name != "made" {
		t.Fatalf("polled events %+v", polled)
	}
	if err := poll.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Reads after a pause and resume, plain and gzip'd: the whole file or
	// an error, never a short body.
	if ok, err := sb.Pause(ctx); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	again, err := e2b.Connect(ctx, sb.ID, e2b.ConnectOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for _, gz := range []bool{false, true} {
		if data, err := again.Files.Read(ctx, "/home/user/big.txt", e2b.FileOptions{Gzip: gz}); err != nil || string(data) != string(content) {
			t.Fatalf("read after resume (gzip %v): %d bytes, %v", gz, len(data), err)
		}
	}
	for _, s := range []*e2b.Sandbox{first, again} {
		if _, err := s.Kill(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
