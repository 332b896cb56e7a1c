package mcpgateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// handoff is what the starting command sends the serving process on its
// stdin (never in its arguments or environment, which other processes of
// the sandbox can read).
type handoff struct {
	Config json.RawMessage `json:"config"`
	Token  string          `json:"token"`
}

// readyMsg is what the serving process reports on its ready pipe (fd 3).
type readyMsg struct {
	Addr    string   `json:"addr,omitempty"`
	Servers []string `json:"servers,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// StartOptions configure Start.
type StartOptions struct {
	// Config is the JSON of --config.
	Config []byte
	// Token is the token to serve behind ($GATEWAY_ACCESS_TOKEN, which
	// the SDK sets); "" makes one.
	Token  string
	Layout Layout
	// Exe and Args run the serving process (`<exe> serve`).
	Exe  string
	Args []string
}

// Started is a successful start.
type Started struct {
	Addr    string
	Servers []string
	PID     int
}

// Start is `mcp-gateway --config JSON`: it checks the config, starts the
// serving process in a session of its own and returns once every server
// is up and the port is served, or with why not (every server that failed
// named). The serving process logs to the layout's LogFile.
func Start(ctx context.Context, o StartOptions) (*Started, error) {
	if _, err := ParseConfig(o.Config, o.Layout); err != nil {
		return nil, err
	}
	token := o.Token
	if token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		token = hex.EncodeToString(b)
	} else if err := checkToken(token); err != nil {
		return nil, err
	}
	logf, err := openLog(o.Layout.LogFile)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	cmd := exec.Command(o.Exe, o.Args...)
	cmd.Dir = "/"
	cmd.Env = baseEnv()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, logf, logf
	cmd.ExtraFiles = []*os.File{readyW}
	// A session of its own: it outlives this command, and envd's signals
	// to the command's process group do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	inR.Close()
	readyW.Close()
	if err != nil {
		inW.Close()
		return nil, fmt.Errorf("start the serving process: %w", err)
	}
	go func() {
		_ = json.NewEncoder(inW).Encode(handoff{Config: o.Config, Token: token})
		inW.Close()
	}()
	wait := o.Layout.StartTimeout + 10*time.Second
	_ = readyR.SetReadDeadline(time.Now().Add(wait))
	line, rerr := bufio.NewReader(io.LimitReader(readyR, 1<<20)).ReadBytes('\n')
	var msg readyMsg
	switch {
	case rerr == nil && json.Unmarshal(line, &msg) == nil && msg.Error == "" && msg.Addr != "":
		pid := cmd.Process.Pid
		_ = cmd.Process.Release()
		return &Started{Addr: msg.Addr, Servers: msg.Servers, PID: pid}, nil
	case rerr == nil && msg.Error != "":
		_ = cmd.Wait()
		return nil, errors.New(msg.Error)
	case errors.Is(rerr, os.ErrDeadlineExceeded):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, fmt.Errorf("the gateway did not report within %s (its log: %s)", wait, o.Layout.LogFile)
	default:
		werr := cmd.Wait()
		return nil, fmt.Errorf("the gateway's serving process ended without reporting (%v; its log: %s)", werr, o.Layout.LogFile)
	}
}

// RunServe is `mcp-gateway serve`, the serving process Start runs: it
// reads the handoff from in, reports on ready, and serves until ctx ends.
func RunServe(ctx context.Context, l Layout, in io.Reader, ready io.WriteCloser, logw io.Writer) error {
	var h handoff
	if err := json.NewDecoder(io.LimitReader(in, MaxConfigBytes+64<<10)).Decode(&h); err != nil {
		return reportReady(ready, fmt.Errorf("read the handoff: %w", err), "", nil)
	}
	servers, err := ParseConfig(h.Config, l)
	if err == nil {
		err = checkToken(h.Token)
	}
	if err != nil {
		return reportReady(ready, err, "", nil)
	}
	log := newLogger(logw, newRedactor(append(secretsOf(servers), h.Token)...))
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return reportReady(ready, fmt.Errorf("listen on %s (is a gateway running already?): %w", l.Addr, err), "", nil)
	}
	log.Info("gateway starting", "servers", strings.Join(serverNames(servers), ","), "addr", ln.Addr().String())
	return Serve(ctx, ServeOptions{Layout: l, Servers: servers, Token: h.Token, Listener: ln, Log: log,
		Ready: func(err error) {
			if err != nil {
				log.Error("gateway not started", "error", err)
			}
			_ = reportReady(ready, err, ln.Addr().String(), serverNames(servers))
		}})
}

// reportReady writes the outcome of a start on the ready pipe, closes it,
// and returns err.
func reportReady(ready io.WriteCloser, err error, addr string, servers []string) error {
	msg := readyMsg{Addr: addr, Servers: servers}
	if err != nil {
		msg = readyMsg{Error: err.Error()}
	}
	b, _ := json.Marshal(msg)
	_, _ = ready.Write(append(b, '\n'))
	_ = ready.Close()
	return err
}

// checkToken refuses a token that cannot be a bearer token: shorter than
// 16 characters or not visible ASCII.
func checkToken(t string) error {
	if len(t) < 16 || len(t) > 512 {
		return fmt.Errorf("%s: between 16 and 512 characters", TokenEnv)
	}
	for _, c := range t {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%s: visible ASCII characters only", TokenEnv)
		}
	}
	return nil
}

// openLog opens the log file for appending, readable by root only.
func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
