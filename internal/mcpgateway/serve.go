package mcpgateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionTimeout closes a streamable HTTP session no request used for
// this long.
const sessionTimeout = 30 * time.Minute

// Handler serves g on /mcp (streamable HTTP) and /sse (the HTTP+SSE
// transport of the 2024-11-05 protocol), every request behind token.
func Handler(g *Gateway, token string, log *slog.Logger) http.Handler {
	get := func(*http.Request) *mcp.Server { return g.Server() }
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{SessionTimeout: sessionTimeout, Logger: log}))
	mux.Handle("/sse", mcp.NewSSEHandler(get, nil))
	return requireToken(token, mux)
}

// requireToken answers 401 to a request without `Authorization: Bearer
// <token>` (compared in constant time), before anything else reads it.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","message":"missing or invalid bearer token: send Authorization: Bearer <the sandbox's getMcpToken()>"}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeOptions configure Serve.
type ServeOptions struct {
	Layout   Layout
	Servers  []*Server
	Token    string
	Listener net.Listener
	// Log must redact (newLogger); Serve's own lines name no secret.
	Log *slog.Logger
	// Ready is called once: nil when the gateway serves, else why it
	// will not.
	Ready func(error)
}

// Serve starts every server, writes the token file and serves the
// aggregate on o.Listener until ctx ends; then it stops the servers. A
// server that does not start within o.Layout.StartTimeout fails the
// start, as does any other, each named.
func Serve(ctx context.Context, o ServeOptions) error {
	var once sync.Once
	report := func(err error) {
		once.Do(func() {
			if o.Ready != nil {
				o.Ready(err)
			}
		})
	}
	red := newRedactor(append(secretsOf(o.Servers), o.Token)...)
	var gw atomic.Pointer[Gateway]
	onChange := func() {
		if g := gw.Load(); g != nil {
			g.sync()
		}
	}
	backends, err := startAll(ctx, o.Layout, o.Servers, red, o.Log, onChange)
	if err != nil {
		report(err)
		return err
	}
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	if err := writeToken(o.Layout.TokenFile, o.Token); err != nil {
		err = fmt.Errorf("token file: %w", err)
		report(err)
		return err
	}
	g := newGateway(backends, o.Log)
	gw.Store(g)
	g.sync() // what changed while the aggregate was made
	srv := &http.Server{Handler: Handler(g, o.Token, o.Log), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(o.Listener) }()
	o.Log.Info("gateway serving", "addr", o.Listener.Addr().String(), "servers", len(backends))
	report(nil)
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return err
	}
}

// startAll starts every server at once and returns their backends, by
// server name; or, when one fails, stops the others and returns every
// failure (a ServerError each).
func startAll(ctx context.Context, l Layout, servers []*Server, red *redactor, log *slog.Logger, onChange func()) ([]*backend, error) {
	timeout := l.StartTimeout
	if timeout <= 0 {
		timeout = DefaultLayout().StartTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backends := make([]*backend, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			started := time.Now()
			b, err := startBackend(sctx, l, s, red, log, onChange)
			if err != nil {
				if sctx.Err() != nil && ctx.Err() == nil {
					err = fmt.Errorf("did not start within %s: %w", timeout, err)
				}
				errs[i] = &ServerError{Server: s.Name, Err: errors.New(red.String(err.Error()))}
				return
			}
			backends[i] = b
			_, t, p, r, rt := b.snapshot()
			log.Info("server started", "server", s.Name, "tools", len(t), "prompts", len(p), "resources", len(r),
				"resource_templates", len(rt), "duration_ms", time.Since(started).Milliseconds())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range backends {
			if b != nil {
				b.Close()
			}
		}
		return nil, err
	}
	return backends, nil
}

// secretsOf gathers the servers' secrets.
func secretsOf(servers []*Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Secrets...)
	}
	return out
}

// writeToken writes token to path, readable by root only, replacing it
// whole.
func writeToken(path, token string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(token); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// serverNames lists the servers' names.
func serverNames(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Name
	}
	return slices.Clip(out)
}
