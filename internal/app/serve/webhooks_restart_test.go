package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/webhooks"
	"github.com/warren-sandbox/warren/pkg/client"
)

const testKey = "e2b_0123456789012345678901234567890123456789"

// buildWarren builds bin/warren into a temporary directory.
func buildWarren(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(t.TempDir(), "warren")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/warren")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return bin
}

// proc is a running `warren serve --driver fake`.
type proc struct {
	cmd  *exec.Cmd
	url  string
	logs *logTail
}

type logTail struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWarren runs the binary; extra are more flags (the receiver's
// --egress-allow).
func startWarren(t *testing.T, bin, dataDir, addr string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--driver", "fake", "--data-dir", dataDir, "--listen", addr, "--api-key", testKey, "--log-level", "debug"}, extra...)
	cmd := exec.Command(bin, args...)
	logs := &logTail{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: logs}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`export E2B_API_URL=(\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case p.url = <-urlc:
	case <-time.After(90 * time.Second):
		t.Fatalf("warren serve printed no URL:\n%s", logs.String())
	}
	return p
}

// kill9 ends the process with SIGKILL: no shutdown code runs.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

func (p *proc) do(t *testing.T, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// hookReceiver answers 503 until healthy is set, then 204; it verifies
// every signature and counts acknowledgements per event ID.
type hookReceiver struct {
	mu      sync.Mutex
	healthy bool
	tries   int
	badSig  int
	acked   map[string]int // event ID -> 2xx answers
	arrived chan struct{}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tries++
	select {
	case h.arrived <- struct{}{}:
	default:
	}
	if err := webhooks.Verify("restart-secret", r.Header.Get(webhooks.HeaderSignature), body, 10*time.Minute, time.Now()); err != nil {
		h.badSig++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if !h.healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var p events.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.acked[p.ID]++
	w.WriteHeader(http.StatusNoContent)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestWebhooksSurviveKill9 runs the real binary: events happen while the
// receiver fails, warren is killed with SIGKILL with deliveries pending,
// and the restarted warren delivers every stored event exactly once
// acknowledged.
func TestWebhooksSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs bin/warren")
	}
	t.Parallel()
	bin := buildWarren(t)
	dataDir := t.TempDir()
	rcv := &hookReceiver{acked: map[string]int{}, arrived: make(chan struct{}, 1)}
	srv := httptest.NewServer(rcv)
	defer srv.Close()

	allow := []string{"--egress-allow", strings.TrimPrefix(srv.URL, "http://")}
	p := startWarren(t, bin, dataDir, freeAddr(t), allow...)
	st, _, body := p.do(t, "POST", "/events/webhooks", fmt.Sprintf(`{"name":"all","url":%q,"signatureSecret":"restart-secret"}`, srv.URL+"/hook"))
	if st != 201 {
		t.Fatalf("register webhook: %d %s", st, body)
	}
	c := client.New(p.url, testKey)
	ctx := context.Background()
	for range 3 {
		sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
		if err != nil {
			t.Fatalf("create: %v\n%s", err, p.logs.String())
		}
		if ok, err := c.Kill(ctx, sb.SandboxID); !ok || err != nil {
			t.Fatalf("kill: %t %v", ok, err)
		}
	}
	select {
	case <-rcv.arrived: // at least one attempt failed at the receiver
	case <-time.After(60 * time.Second):
		t.Fatalf("no delivery attempt within 60 s:\n%s", p.logs.String())
	}
	p.kill9(t)

	rcv.mu.Lock()
	rcv.healthy = true
	rcv.mu.Unlock()
	p = startWarren(t, bin, dataDir, freeAddr(t), allow...)
	defer func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
	}()
	st, _, body = p.do(t, "GET", "/events/sandboxes?limit=100", "")
	if st != 200 {
		t.Fatalf("events: %d %s", st, body)
	}
	var evs []events.Payload
	if err := json.Unmarshal(body, &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs) < 6 {
		t.Fatalf("%d events stored, want at least 6 (3 created, 3 killed)", len(evs))
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		rcv.mu.Lock()
		missing := 0
		for _, e := range evs {
			if rcv.acked[e.ID] == 0 {
				missing++
			}
		}
		rcv.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events not delivered 90 s after the restart:\n%s", missing, len(evs), p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for id, n := range rcv.acked {
		if n != 1 {
			t.Errorf("event %s acknowledged %d times, want once", id, n)
		}
	}
	if rcv.badSig != 0 {
		t.Errorf("%d deliveries with a bad signature", rcv.badSig)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "warren.db")); err != nil {
		t.Fatal(err)
	}
}
