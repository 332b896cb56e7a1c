package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// syncBuffer is a bytes.Buffer the server's log may write from any
// goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hostError is what a node's failure looks like: a runtime's stderr with
// host paths over several lines.
const hostError = "runsc create: exit status 128: open /var/lib/wstr-secret/sandboxes/x/config.json: permission denied\n" +
	"W1201 10:00:00 gofer.go:42] mount /srv/wstr-host-only failed"

// TestInternalDetailStaysInTheLog: whatever a node's error says, a client
// is told its class and what the handler wrote for it; the host detail
// goes to the server's log only.
func TestInternalDetailStaysInTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n := fakenode.New()
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := st.CreateTeam(ctx, &store.Team{ID: "t1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := apiserver.AddKey(ctx, st, "t1", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, key)
	running, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}

	host := errors.New(hostError)
	cases := []struct {
		name    string
		set     func()
		method  string
		path    string
		body    string
		status  int
		message string
	}{
		{"create unavailable", func() { n.CreateErr = fmt.Errorf("sandbox %q: %w: %w", "x", host, errdefs.ErrUnavailable) },
			"POST", "/sandboxes", `{"templateID":"base"}`, http.StatusServiceUnavailable, "service unavailable"},
		{"create of no class", func() { n.CreateErr = fmt.Errorf("sandbox %q: %w", "x", host) },
			"POST", "/sandboxes", `{"templateID":"base"}`, http.StatusInternalServerError, "internal error"},
		{"create joined unavailable", func() { n.CreateErr = fmt.Errorf("unpack: %w", errors.Join(errdefs.ErrUnavailable, host)) },
			"POST", "/v2/sandboxes", `{"templateID":"base"}`, http.StatusServiceUnavailable, "service unavailable"},
		{"create: the node's not-found is its host's", func() {
			n.CreateErr = fmt.Errorf("layer %s: image: %w", "/var/lib/wstr-secret/layers/b1", errors.Join(errdefs.ErrNotFound, host))
		}, "POST", "/v2/sandboxes", `{"templateID":"base"}`, http.StatusInternalServerError, "internal error"},
		{"pause refused, the runtime's error joined", func() {
			n.PauseErr = func(id string) error {
				return fmt.Errorf("sandbox %q: pause failed, the sandbox keeps running: %w", id, errors.Join(host, errdefs.ErrExhausted))
			}
		}, "POST", "/sandboxes/" + running.SandboxID + "/pause", ``, http.StatusTooManyRequests,
			fmt.Sprintf("sandbox %q cannot be paused now (its node is busy or short of disk); try again later", running.SandboxID)},
		{"pause conflict", func() { n.PauseErr = func(string) error { return fmt.Errorf("%w: %w", host, errdefs.ErrConflict) } },
			"POST", "/sandboxes/" + running.SandboxID + "/pause", ``, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", running.SandboxID)},
	}
	for _, tc := range cases {
		// Not parallel: each case sets the fake node's error.
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			before := len(logs.String())
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("X-API-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, raw)
			}
			var eb client.Error
			if err := json.Unmarshal(raw, &eb); err != nil || eb.Code != tc.status || eb.Message != tc.message {
				t.Fatalf("body %s, want {code:%d, message:%q}", raw, tc.status, tc.message)
			}
			for _, leak := range []string{"wstr", "runsc", "permission denied", "gofer", "\n"} {
				if strings.Contains(eb.Message, leak) {
					t.Fatalf("client message %q carries the host error (%q)", eb.Message, leak)
				}
			}
			if logged := logs.String()[before:]; !strings.Contains(logged, "wstr-secret") {
				t.Fatalf("the host error was not logged; log:\n%s", logged)
			}
		})
	}
}

// TestNoErrorTextForAnyClass: an error of any class, whatever its text,
// reaches a client as the message its handler chose or its class's words,
// never as its text. Each class is given to the node's create, pause and
// resume and to the template resolver, with a host's detail in its text.
func TestNoErrorTextForAnyClass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n := fakenode.New()
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := st.CreateTeam(ctx, &store.Team{ID: "t1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := apiserver.AddKey(ctx, st, "t1", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, key)
	do := func(t *testing.T, method, path, body string) (int, client.Error) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var eb client.Error
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Code != resp.StatusCode {
			t.Fatalf("body %s of a %d: want {code, message}", raw, resp.StatusCode)
		}
		return resp.StatusCode, eb
	}
	host := errors.New(hostError)
	for _, class := range errdefs.Classes() {
		shapes := map[string]error{
			"wrapped": fmt.Errorf("sandbox %q: %w: %w", "x", host, class),
			"joined":  fmt.Errorf("layer %s: %w", "/var/lib/wstr-secret/layers/b1", errors.Join(class, host)),
		}
		for shape, nodeErr := range shapes {
			// Not parallel: each case sets the fake node's errors.
			t.Run(errhttp.Name(class)+"/"+shape, func(t *testing.T) {
				running, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
				if err != nil {
					t.Fatal(err)
				}
				paused, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := c.Pause(ctx, paused.SandboxID); !ok || err != nil {
					t.Fatalf("pause: %t %v", ok, err)
				}
				n.CreateErr = nodeErr
				n.PauseErr = func(string) error { return nodeErr }
				n.ResumeErr = nodeErr
				defer func() { n.CreateErr, n.PauseErr, n.ResumeErr = nil, nil, nil }()
				for _, call := range []struct{ method, path, body string }{
					{"POST", "/v2/sandboxes", `{"templateID":"base"}`},
					{"POST", "/sandboxes/" + running.SandboxID + "/pause", ``},
					{"POST", "/sandboxes/" + paused.SandboxID + "/resume", `{}`},
					{"POST", "/v2/sandboxes", `{"templateID":"fails-` + errhttp.Name(class) + `"}`},
				} {
					before := len(logs.String())
					status, eb := do(t, call.method, call.path, call.body)
					if status != errhttp.Status(class) && status != http.StatusInternalServerError {
						t.Fatalf("%s %s: %d, want %d or 500 (%q)", call.method, call.path, status, errhttp.Status(class), eb.Message)
					}
					checkClientMessage(t, eb.Message)
					// (The lifecycle answers a node's not-found of a resume
					// with its own.)
					if logged := logs.String()[before:]; status != http.StatusNotFound && !strings.Contains(logged, "wstr-secret") {
						t.Fatalf("%s %s: the error was not logged; log:\n%s", call.method, call.path, logged)
					}
				}
			})
		}
	}
}
