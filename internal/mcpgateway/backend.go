package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Version is the gateway's version, in the implementation it announces.
const Version = "1.0.0"

// backendProtocol is the protocol version the gateway asks its servers
// for: the newest one the reference servers speak (the SDK's newer draft
// would cost a failed server/discover first).
const backendProtocol = "2025-11-25"

// backend is one started server: the gateway's client session with it and
// the lists it offers, kept current through its list_changed
// notifications.
//
//	starting --start ok--> up --session ends (exit, crash, Close)--> down
//	starting --start error--> (discarded)
type backend struct {
	srv     *Server
	log     *slog.Logger
	session *mcp.ClientSession
	cmd     *exec.Cmd // stdio servers
	stderr  *lineTail
	changed chan struct{} // a list changed: refresh

	mu        sync.Mutex
	up        bool
	closing   bool
	tools     []*mcp.Tool
	prompts   []*mcp.Prompt
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
}

// startBackend installs (when needed), starts and lists srv. onChange is
// called, from the backend's own goroutine, each time its lists changed
// or it went down.
func startBackend(ctx context.Context, l Layout, srv *Server, red *redactor, log *slog.Logger, onChange func()) (*backend, error) {
	b := &backend{srv: srv, log: log.With("server", srv.Name), changed: make(chan struct{}, 1)}
	b.stderr = &lineTail{redact: red, log: func(line string) { b.log.Info("server output", "line", line) }}
	t, err := b.transport(ctx, l, red)
	if err != nil {
		return nil, err
	}
	notify := func(context.Context) {
		select {
		case b.changed <- struct{}{}:
		default:
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "warren-mcp-gateway", Version: Version}, &mcp.ClientOptions{
		Logger: b.log,
		// No roots: a server keeps the directories its settings name
		// (the filesystem server would otherwise ask for roots).
		Capabilities:               &mcp.ClientCapabilities{},
		ToolListChangedHandler:     func(ctx context.Context, _ *mcp.ToolListChangedRequest) { notify(ctx) },
		PromptListChangedHandler:   func(ctx context.Context, _ *mcp.PromptListChangedRequest) { notify(ctx) },
		ResourceListChangedHandler: func(ctx context.Context, _ *mcp.ResourceListChangedRequest) { notify(ctx) },
	})
	b.session, err = client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: backendProtocol})
	if err != nil {
		b.kill()
		return nil, b.failure("the MCP handshake failed", err)
	}
	if err := b.refresh(ctx); err != nil {
		b.Close()
		return nil, b.failure("listing what it offers failed", err)
	}
	b.mu.Lock()
	b.up = true
	b.mu.Unlock()
	go b.watch(onChange)
	return b, nil
}

// transport prepares srv and returns how to reach it.
func (b *backend) transport(ctx context.Context, l Layout, red *redactor) (mcp.Transport, error) {
	srv := b.srv
	var argv []string
	dir := "/"
	switch {
	case srv.Entry != nil && srv.Entry.Remote():
		rt := http.DefaultTransport
		if len(srv.Headers) > 0 {
			rt = headerTransport{base: rt, headers: srv.Headers}
		}
		return &mcp.StreamableClientTransport{Endpoint: srv.Entry.URL, HTTPClient: &http.Client{Transport: rt}, MaxRetries: 1}, nil
	case srv.Entry != nil:
		if !installed(l, srv.Entry) {
			b.log.Info("installing the server (not pulled at build time)")
			if err := install(ctx, l, srv.Entry, false, logWriter{b.log}); err != nil {
				return nil, err
			}
		}
		argv = append([]string{l.serverBin(srv.Entry)}, srv.Args...)
	default:
		var err error
		if dir, err = prepareGitHub(ctx, l, srv, red.String); err != nil {
			return nil, err
		}
		argv = []string{l.Shell, "-c", srv.GitHub.RunCmd}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(baseEnv(), srv.Env...)
	cmd.Stderr = b.stderr
	// Its own process group, so that a stop reaches what it started; and
	// gone with the gateway.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	b.cmd = cmd
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
}

// failure is a start error with what the server wrote to stderr last.
func (b *backend) failure(what string, err error) error {
	msg := fmt.Sprintf("%s: %v", what, err)
	if b.cmd != nil && b.cmd.ProcessState != nil {
		msg += " (" + b.cmd.ProcessState.String() + ")"
	}
	if tail := b.stderr.Tail(); tail != "" {
		msg += "; its output ends: " + tail
	}
	return errors.New(msg)
}

// refresh lists what the server offers, for each capability it has.
func (b *backend) refresh(ctx context.Context) error {
	caps := b.session.InitializeResult().Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}
	var tools []*mcp.Tool
	var prompts []*mcp.Prompt
	var resources []*mcp.Resource
	var templates []*mcp.ResourceTemplate
	if caps.Tools != nil {
		for t, err := range b.session.Tools(ctx, nil) {
			if err != nil {
				return fmt.Errorf("tools/list: %w", err)
			}
			tools = append(tools, t)
		}
	}
	if caps.Prompts != nil {
		for p, err := range b.session.Prompts(ctx, nil) {
			if err != nil {
				return fmt.Errorf("prompts/list: %w", err)
			}
			prompts = append(prompts, p)
		}
	}
	if caps.Resources != nil {
		for r, err := range b.session.Resources(ctx, nil) {
			if err != nil {
				return fmt.Errorf("resources/list: %w", err)
			}
			resources = append(resources, r)
		}
		for t, err := range b.session.ResourceTemplates(ctx, nil) {
			if err != nil {
				return fmt.Errorf("resources/templates/list: %w", err)
			}
			templates = append(templates, t)
		}
	}
	b.mu.Lock()
	b.tools, b.prompts, b.resources, b.templates = tools, prompts, resources, templates
	b.mu.Unlock()
	return nil
}

// watch refreshes the lists after each list_changed notification, and
// marks the backend down when its session ends, calling onChange after
// each.
func (b *backend) watch(onChange func()) {
	done := make(chan struct{})
	go func() {
		err := b.session.Wait()
		b.mu.Lock()
		b.up = false
		closing := b.closing
		b.mu.Unlock()
		if closing {
			b.log.Info("server stopped")
		} else {
			b.log.Warn("server is down: its tools, prompts and resources are withdrawn", "error", err, "output", b.stderr.Tail())
		}
		close(done)
	}()
	for {
		select {
		case <-done:
			onChange()
			return
		case <-b.changed:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := b.refresh(ctx)
			cancel()
			if err != nil {
				b.log.Warn("listing after a change failed", "error", err)
				continue
			}
			onChange()
		}
	}
}

// snapshot returns the lists, or nothing when the backend is down.
func (b *backend) snapshot() (bool, []*mcp.Tool, []*mcp.Prompt, []*mcp.Resource, []*mcp.ResourceTemplate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.up {
		return false, nil, nil, nil, nil
	}
	return true, b.tools, b.prompts, b.resources, b.templates
}

// Close ends the session (a stdio server's stdin is closed, then it is
// signalled) and kills what is left of its process group.
func (b *backend) Close() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	if b.session != nil {
		_ = b.session.Close()
	}
	b.kill()
}

func (b *backend) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// headerTransport adds a remote server's headers to each request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// logWriter logs each write of an install's progress.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
