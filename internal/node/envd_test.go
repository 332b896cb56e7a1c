package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestHTTPEnvd drives the real envd binary (on loopback, not in a sandbox)
// through the agent's envd client: health, /init with the init token, and
// a start command through the process service.
func TestHTTPEnvd(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("WARREN_ENVD")
	_, err := os.Stat(bin)
	testenv.Require(t, bin != "" && err == nil, "envd binary at $WARREN_ENVD (make bin/envd)")

	token := "init-token-123"
	sum := sha256.Sum256([]byte(token))
	port := freePort(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--init-token-sha256", hex.EncodeToString(sum[:]), "--no-port-forward")
	cmd.Stderr = testenv.Output(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	e := node.NewHTTPEnvd(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.WaitHealthy(ctx, addr); err != nil {
		t.Fatal(err)
	}
	init := node.EnvdInit{EnvVars: map[string]string{"FROM_INIT": "yes"}, AccessToken: "acc", Timestamp: time.Now()}
	if err := e.Init(ctx, addr, "wrong", init); err == nil {
		t.Fatal("init with a wrong token succeeded")
	}
	if err := e.Init(ctx, addr, token, init); err != nil {
		t.Fatal(err)
	}
	// Again, as after a restore.
	if err := e.Init(ctx, addr, token, init); err != nil {
		t.Fatalf("second init: %v", err)
	}

	out := filepath.Join(t.TempDir(), "out")
	user := "root"
	if os.Geteuid() != 0 {
		user = ""
	}
	p := node.EnvdProcess{Tag: "start-cmd", Cmd: "/bin/sh", Args: []string{"-c", `echo "$FROM_INIT $FROM_CMD" > ` + out},
		Envs: map[string]string{"FROM_CMD": "cmd"}, Cwd: "/", User: user}
	if err := e.Start(ctx, addr, "wrong-access", p); err == nil {
		t.Error("start with a wrong access token succeeded")
	}
	if err := e.Start(ctx, addr, "acc", p); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(out)
		if err == nil && string(b) == "yes cmd\n" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("start command output %q, %v", b, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestHTTPEnvdNoRedirects: envd runs in a tenant's sandbox; a redirect it
// answers must not make the node request another URL (the access token
// and init secret would go along).
func TestHTTPEnvdNoRedirects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(evil.Close)
	e := node.NewHTTPEnvd(nil)
	err := e.Init(context.Background(), strings.TrimPrefix(evil.URL, "http://"), "init-secret", node.EnvdInit{AccessToken: "tok"})
	if err == nil {
		t.Fatal("init through a redirect succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := e.WaitHealthy(ctx, strings.TrimPrefix(evil.URL, "http://")); err == nil {
		t.Fatal("health through a redirect succeeded")
	}
	if hits.Load() != 0 {
		t.Fatalf("the redirect target got %d requests", hits.Load())
	}
}
