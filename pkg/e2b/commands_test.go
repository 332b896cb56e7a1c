package e2b

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func startSandbox(t *testing.T) (*fakeAPI, *Sandbox) {
	t.Helper()
	api, cfg := newServer(t)
	sb, err := Create(context.Background(), CreateOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return api, sb
}

// TestCommandsRun streams stdout to a writer and stderr to a callback,
// returns the exit code, and turns a non-zero exit into a
// *CommandExitError carrying the result.
func TestCommandsRun(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	var out strings.Builder
	var mu sync.Mutex
	var errChunks []string
	r, err := sb.Commands.Run(ctx, "echo out; echo err >&2", RunOptions{Stdout: &out, OnStderr: func(s string) {
		mu.Lock()
		errChunks = append(errChunks, s)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 || r.Stdout != "out\n" || r.Stderr != "err\n" || out.String() != "out\n" || strings.Join(errChunks, "") != "err\n" {
		t.Fatalf("result %+v, writer %q, callback %q", r, out.String(), errChunks)
	}

	r, err = sb.Commands.Run(ctx, "echo partial; exit 3", RunOptions{})
	var exit *CommandExitError
	if !errors.As(err, &exit) || exit.ExitCode != 3 || r == nil || r.ExitCode != 3 || r.Stdout != "partial\n" {
		t.Fatalf("exit 3: %+v %v", r, err)
	}
}

// TestCommandsEnvCwdUser sets the environment, working directory and user
// of one command.
func TestCommandsEnvCwdUser(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	r, err := sb.Commands.Run(ctx, `echo "$GREETING"; pwd`, RunOptions{Env: map[string]string{"GREETING": "hi there"}, Cwd: dir})
	if err != nil || r.Stdout != "hi there\n"+dir+"\n" {
		t.Fatalf("env/cwd: %+v %v", r, err)
	}
	r, err = sb.Commands.Run(ctx, "id -un", RunOptions{User: "nobody"})
	if err != nil || r.Stdout != "nobody\n" {
		t.Fatalf("user nobody: %+v %v", r, err)
	}
	if _, err := sb.Commands.Run(ctx, "true", RunOptions{User: "no-such-user-here"}); err == nil {
		t.Fatal("unknown user accepted")
	}
}

// TestCommandsBackground runs commands in the background: stdin through
// the handle, list, kill, re-attaching to a running process after
// disconnecting from it, and envd killing one past its timeout.
func TestCommandsBackground(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()

	cat, err := sb.Commands.Start(ctx, "cat", RunOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.SendStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := cat.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := cat.Wait(ctx); err != nil || r.Stdout != "hello\n" {
		t.Fatalf("cat: %+v %v", r, err)
	}

	sleeper, err := sb.Commands.Start(ctx, "sleep 600", RunOptions{Tag: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	procs, err := sb.Commands.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs {
		found = found || (p.PID == sleeper.PID && p.Tag == "sleeper" && p.Args[len(p.Args)-1] == "sleep 600")
	}
	if !found {
		t.Fatalf("pid %d not in %+v", sleeper.PID, procs)
	}
	if ok, err := sleeper.Kill(ctx); !ok || err != nil {
		t.Fatalf("kill: %v %v", ok, err)
	}
	var exit *CommandExitError
	if _, err := sleeper.Wait(ctx); !errors.As(err, &exit) {
		t.Fatalf("killed command: %v, want *CommandExitError", err)
	}
	// A kill after the end reaches what is left of the command's group:
	// true while a member is (one not yet reaped included), false once
	// the group is gone.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, err := sb.Commands.Kill(ctx, sleeper.PID)
		if err != nil {
			t.Fatalf("second kill: %v", err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a kill after the command ended still finds its group after 10 s")
		}
	}

	reader, err := sb.Commands.Start(ctx, `read line; echo "got $line"`, RunOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	reader.Disconnect()
	again, err := sb.Commands.Connect(ctx, reader.PID, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Commands.SendStdin(ctx, reader.PID, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	if r, err := again.Wait(ctx); err != nil || r.Stdout != "got it\n" {
		t.Fatalf("re-attached: %+v %v", r, err)
	}
	bounded, err := sb.Commands.Start(ctx, "sleep 600", RunOptions{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := bounded.Wait(ctx); err == nil {
		t.Fatalf("a command past its timeout ended well: %+v", r)
	}
	// envd kills it when its side of the deadline fires, a moment after
	// the client hung up.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		procs, err := sb.Commands.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(procs, func(p ProcessInfo) bool { return p.PID == bounded.PID }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a command past its timeout still runs")
		}
	}
	if _, err := sb.Commands.Connect(ctx, 1<<30, RunOptions{}); !IsNotFound(err) {
		t.Fatalf("connect to a missing pid: %v, want not found", err)
	}
}
