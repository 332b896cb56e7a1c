package process

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/envdtest"
	"github.com/warren-sandbox/warren/internal/envd/reaper"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// testEnv is one process service behind an HTTP server.
type testEnv struct {
	client processconnect.ProcessClient
	state  *state.State
	mgr    *Manager
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	st := state.New(map[string]string{"PATH": defaultPath, "FROM_TEMPLATE": "t", "OVERRIDE": "template"})
	root := "root"
	if os.Geteuid() != 0 {
		cur := os.Getenv("USER")
		root = cur
	}
	st.Apply(state.Update{DefaultUser: &root, EnvVars: map[string]string{"FROM_INIT": "i", "OVERRIDE": "init"}})
	mgr := NewManager(testenv.Logger(t), reaper.Direct{}, time.Minute)
	svc := NewService(mgr, auth.New(st), st)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testEnv{
		client: processconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
		state:  st,
		mgr:    mgr,
	}
}

// result collects a stream's events.
type result struct {
	pid            uint32
	stdout, stderr bytes.Buffer
	pty            bytes.Buffer
	end            *pb.ProcessEvent_EndEvent
	first          string
}

func collect(t *testing.T, next func() (*pb.ProcessEvent, bool), errf func() error) (*result, error) {
	t.Helper()
	r := &result{}
	for {
		ev, ok := next()
		if !ok {
			return r, errf()
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			if r.first == "" {
				r.first = "start"
			}
			r.pid = e.Start.GetPid()
		case *pb.ProcessEvent_Data:
			if r.first == "" {
				r.first = "data"
			}
			r.stdout.Write(e.Data.GetStdout())
			r.stderr.Write(e.Data.GetStderr())
			r.pty.Write(e.Data.GetPty())
		case *pb.ProcessEvent_End:
			if r.first == "" {
				r.first = "end"
			}
			r.end = e.End
		}
	}
}

func (e *testEnv) run(t *testing.T, ctx context.Context, req *pb.StartRequest, user string) (*result, error) {
	t.Helper()
	creq := connect.NewRequest(req)
	if user != "" {
		creq.Header().Set("Authorization", "Basic "+basic(user))
	}
	s, err := e.client.Start(ctx, creq)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
}

func basic(user string) string { return base64.StdEncoding.EncodeToString([]byte(user + ":")) }

func bash(script string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}
}

func noStdin() *bool { f := false; return &f }

func TestStartStreams(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	cases := []struct {
		name       string
		req        *pb.StartRequest
		stdout     string
		stderr     string
		exitCode   int32
		wantErrMsg bool
	}{
		{"stdout and exit 0", &pb.StartRequest{Process: bash("echo hi")}, "hi\n", "", 0, false},
		{"stderr and exit 3", &pb.StartRequest{Process: bash("echo out; echo err >&2; exit 3")}, "out\n", "err\n", 3, true},
		{"env precedence", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "echo $FROM_TEMPLATE$FROM_INIT$OVERRIDE$REQ"},
			Envs: map[string]string{"OVERRIDE": "req", "REQ": "!"}}}, "tireq!\n", "", 0, false},
		{"cwd", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: strp("/tmp")}}, "/tmp\n", "", 0, false},
		{"no stdin reads eof", &pb.StartRequest{Process: bash("cat; echo done"), Stdin: noStdin()}, "done\n", "", 0, false},
		{"large output kept whole", &pb.StartRequest{Process: bash("head -c 1000000 /dev/zero | tr '\\0' a")}, strings.Repeat("a", 1000000), "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := env.run(t, ctx, tc.req, "")
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if r.first != "start" || r.pid == 0 {
				t.Fatalf("first event %q pid %d, want start with a pid", r.first, r.pid)
			}
			if r.stdout.String() != tc.stdout || r.stderr.String() != tc.stderr {
				t.Fatalf("stdout %.80q stderr %q, want %.80q %q", r.stdout.String(), r.stderr.String(), tc.stdout, tc.stderr)
			}
			if r.end == nil || r.end.GetExitCode() != tc.exitCode || !r.end.GetExited() {
				t.Fatalf("end %v, want exit code %d", r.end, tc.exitCode)
			}
			if want := fmt.Sprintf("exit status %d", tc.exitCode); r.end.GetStatus() != want {
				t.Fatalf("status %q, want %q", r.end.GetStatus(), want)
			}
			if (r.end.Error != nil) != tc.wantErrMsg {
				t.Fatalf("error field %v, want present=%v", r.end.Error, tc.wantErrMsg)
			}
		})
	}
}

func strp(s string) *string { return &s }

func TestStartErrors(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	cases := []struct {
		name string
		req  *pb.StartRequest
		user string
		code connect.Code
	}{
		{"missing cwd", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: strp("/does/not/exist")}}, "", connect.CodeInvalidArgument},
		{"unknown user", &pb.StartRequest{Process: bash("true")}, "no-such-user-xyz", connect.CodeUnauthenticated},
		{"empty command", &pb.StartRequest{Process: &pb.ProcessConfig{}}, "", connect.CodeInvalidArgument},
		{"command not found", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-xyz"}}, "", connect.CodeInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := env.run(t, ctx, tc.req, tc.user)
			if connect.CodeOf(err) != tc.code {
				t.Fatalf("error %v, want code %v", err, tc.code)
			}
		})
	}
}

func TestRunsAsSelectedUser(t *testing.T) {
	nobody := envdtest.Nobody(t)
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := env.run(t, ctx, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id -u; id -g; echo $USER; echo $HOME"}, Cwd: strp("/")}}, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d\n%d\nnobody\n%s\n", nobody.UID, nobody.GID, nobody.Home)
	if r.stdout.String() != want {
		t.Fatalf("got %q, want %q", r.stdout.String(), want)
	}
	// A PTY process too, on a terminal it owns.
	r, err = env.run(t, ctx, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id -u; stat -c %u $(tty)"}, Cwd: strp("/")},
		Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d\r\n%d\r\n", nobody.UID, nobody.UID); r.pty.String() != want {
		t.Fatalf("pty got %q, want %q", r.pty.String(), want)
	}
}

// startBackground starts a process and returns its pid once the start
// event arrived; the stream is then dropped (the process must survive).
func startBackground(t *testing.T, env *testEnv, req *pb.StartRequest) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := env.client.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatalf("no start event: %v", s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	cancel()
	_ = s.Close()
	t.Cleanup(func() { _ = unix.Kill(-int(pid), unix.SIGKILL) })
	return pid
}

func connectStream(t *testing.T, env *testEnv, ctx context.Context, sel *pb.ProcessSelector) (*result, error) {
	t.Helper()
	s, err := env.client.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
}

func TestBackgroundConnectInputAndList(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tag := "cat-" + strconv.Itoa(os.Getpid())
	pid := startBackground(t, env, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: &tag})

	list, err := env.client.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid && p.GetTag() == tag && p.GetConfig().GetCmd() == "cat" {
			found = true
		}
	}
	if !found {
		t.Fatalf("pid %d tag %q not listed: %v", pid, tag, list.Msg.GetProcesses())
	}

	done := make(chan *result, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := connectStream(t, env, ctx, &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}})
		errc <- err
		done <- r
	}()
	if _, err := env.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("ping\n")}},
	})); err != nil {
		t.Fatalf("send input: %v", err)
	}
	// Closing stdin ends cat; the attached stream sees the end.
	if _, err := env.client.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
	})); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("connect: %v", err)
	}
	r := <-done
	if r.first != "start" || r.pid != pid || r.end == nil || r.end.GetExitCode() != 0 {
		t.Fatalf("connect stream: first %q pid %d end %v", r.first, r.pid, r.end)
	}
	// A late Connect replays the end of the ended process.
	late, err := connectStream(t, env, ctx, &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}})
	if err != nil || late.end == nil || late.first != "start" {
		t.Fatalf("late connect: %v %+v", err, late)
	}
	// SendInput to an ended process is not_found.
	_, err = env.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}},
	}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("input to ended process: %v, want not_found", err)
	}
}

func TestInputReachesProcess(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := env.client.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("read line; echo got:$line")}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	if _, err := env.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}},
	})); err != nil {
		t.Fatal(err)
	}
	r, err := collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout.String() != "got:hello\n" {
		t.Fatalf("stdout %q", r.stdout.String())
	}
}

func alive(pid int) bool {
	// A zombie is dead for this purpose.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestSignalKillsProcessTree(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := env.client.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: bash("sleep 1000 & echo $!; sleep 1000 & echo $!; wait"), Stdin: noStdin()}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	var out bytes.Buffer
	for strings.Count(out.String(), "\n") < 2 && s.Receive() {
		out.Write(s.Msg().GetEvent().GetData().GetStdout())
	}
	var children []int
	for _, l := range strings.Fields(out.String()) {
		n, _ := strconv.Atoi(l)
		children = append(children, n)
	}
	if len(children) != 2 {
		t.Fatalf("children %q", out.String())
	}
	if _, err := env.client.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatal(err)
	}
	r, err := collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
	if err != nil {
		t.Fatal(err)
	}
	if r.end == nil || r.end.GetExited() || r.end.GetStatus() != "signal: killed" || r.end.GetExitCode() != -1 {
		t.Fatalf("end %v, want killed", r.end)
	}
	// The children were in the same group: killed too (re-parented to
	// init and reaped there, or zombies until then).
	for _, c := range children {
		deadline := time.Now().Add(30 * time.Second)
		for alive(c) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(c) {
			t.Fatalf("child %d survived the kill", c)
		}
	}
	_, err = env.client.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}, Signal: pb.Signal_SIGNAL_SIGKILL,
	}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "process with pid 999999 not found") {
		t.Fatalf("unknown pid: %v", err)
	}
}

func TestDisconnectKeepsProcessTimeoutKills(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	pid := startBackground(t, env, &pb.StartRequest{Process: bash("sleep 1000"), Stdin: noStdin()})
	if !alive(int(pid)) {
		t.Fatalf("process %d died with its stream", pid)
	}

	// Connect-Timeout-Ms: the deadline of the Start call kills the process.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s, err := env.client.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("sleep 1000"), Stdin: noStdin()}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	tpid := s.Msg().GetEvent().GetStart().GetPid()
	for s.Receive() {
	}
	_ = s.Close()
	p, err := env.mgr.get(tpid)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("process %d outlived its deadline", tpid)
	}
	if p.end.GetStatus() != "signal: killed" {
		t.Fatalf("timed-out process ended with %q", p.end.GetStatus())
	}
}

func TestPTY(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := env.client.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Envs: map[string]string{"TERM": "xterm-256color", "PS1": "$ "}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := env.client.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 40}}})); err != nil {
		t.Fatalf("resize: %v", err)
	}
	if _, err := env.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel,
		Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("stty size; tty -s && echo is-tty; exit 7\n")}}})); err != nil {
		t.Fatal(err)
	}
	r, err := collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
	if err != nil {
		t.Fatal(err)
	}
	out := r.pty.String()
	if !strings.Contains(out, "40 100") || !strings.Contains(out, "is-tty") {
		t.Fatalf("pty output %q lacks the new size or tty", out)
	}
	if r.end.GetExitCode() != 7 || r.stdout.Len() != 0 {
		t.Fatalf("end %v stdout %q", r.end, r.stdout.String())
	}
	// CloseStdin and Update on ended or non-pty processes are refused.
	_, err = env.client.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("close stdin of ended: %v", err)
	}
}

func TestStreamInput(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := env.client.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("head -c 6; echo")}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	in := env.client.StreamInput(ctx)
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("abc")}}}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("def")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Skipf("client streaming needs HTTP/2 in this client: %v", err)
	}
	r, err := collect(t, func() (*pb.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}, s.Err)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout.String() != "abcdef\n" {
		t.Fatalf("stdout %q", r.stdout.String())
	}
}

func TestKeepaliveAndDefaultWorkdir(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	wd := t.TempDir()
	env.state.Apply(state.Update{DefaultWorkdir: &wd})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := connect.NewRequest(&pb.StartRequest{Process: bash("pwd; sleep 2.5"), Stdin: noStdin()})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := env.client.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keepalives := 0
	var out bytes.Buffer
	for s.Receive() {
		ev := s.Msg().GetEvent()
		if ev.GetKeepalive() != nil {
			keepalives++
		}
		out.Write(ev.GetData().GetStdout())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if keepalives < 1 || out.String() != wd+"\n" {
		t.Fatalf("keepalives %d, output %q (want cwd %s)", keepalives, out.String(), wd)
	}
}
