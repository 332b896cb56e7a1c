package mcpgateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// startDaemon runs Start with the test binary as the serving process
// (main_test.go) and stops that process when the test ends.
func startDaemon(t *testing.T, l Layout, config map[string]json.RawMessage, token string) (*Started, error) {
	t.Helper()
	t.Setenv("MCPGW_TEST_SERVE", "1")
	t.Setenv("MCPGW_TEST_LAYOUT", testLayoutEnv(l))
	data, _ := json.Marshal(config)
	st, err := Start(context.Background(), StartOptions{Config: data, Token: token, Layout: l, Exe: os.Args[0]})
	if err == nil {
		t.Cleanup(func() {
			_ = syscall.Kill(st.PID, syscall.SIGTERM)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(st.PID, &ws, 0, nil)
		})
	}
	return st, err
}

// TestStart: the start command returns once the serving process, in a
// session of its own, serves every server behind the token; the token
// file is root's alone; a second start finds the port taken; the log
// holds no secret.
func TestStart(t *testing.T) {
	const secret = "sk-daemon-secret-31415"
	l := testLayout(t)
	k, v := testServerConfig(t, l, "a", map[string]string{"TEST_VALUE": secret})
	st, err := startDaemon(t, l, map[string]json.RawMessage{k: v}, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if sid, err := unix.Getsid(st.PID); err != nil || sid != st.PID {
		t.Errorf("serving process %d in session %d (%v), want its own", st.PID, sid, err)
	}
	if len(st.Servers) != 1 || st.Servers[0] != k {
		t.Errorf("servers %q", st.Servers)
	}
	cs := connect(t, "http://"+st.Addr+"/mcp", testToken)
	if got := callText(t, cs, "env", nil); got != secret {
		t.Fatalf("env answered %q", got)
	}
	resp, err := http.Post("http://"+st.Addr+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}
	fi, err := os.Stat(l.TokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v %v", fi, err)
	}
	if b, _ := os.ReadFile(l.TokenFile); string(b) != testToken {
		t.Fatalf("token file %q", b)
	}
	if fi, err := os.Stat(l.LogFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log file %v %v", fi, err)
	}

	l2 := l
	l2.Addr = st.Addr
	_, err = startDaemon(t, l2, map[string]json.RawMessage{k: v}, testToken)
	if err == nil || !strings.Contains(err.Error(), "is a gateway running already?") {
		t.Fatalf("second start on the same port: %v", err)
	}
	logs, _ := os.ReadFile(l.LogFile)
	if strings.Contains(string(logs), secret) || strings.Contains(string(logs), testToken) || !strings.Contains(string(logs), "server started") {
		t.Fatalf("log:\n%s", logs)
	}
}

// TestStartRefused: a config that cannot be satisfied, or a token that
// cannot be one, fails the start naming why; a server that fails is
// reported by the serving process, which then exits, leaving no token.
func TestStartRefused(t *testing.T) {
	l := testLayout(t)
	if _, err := startDaemon(t, l, map[string]json.RawMessage{"invalid_server": json.RawMessage(`{}`)}, testToken); err == nil ||
		!strings.Contains(err.Error(), `server "invalid_server": not in this gateway's catalog`) {
		t.Fatalf("unknown server: %v", err)
	}
	if _, err := os.Stat(l.LogFile); err == nil {
		t.Error("a refused config started something")
	}
	if _, err := startDaemon(t, l, map[string]json.RawMessage{}, "short"); err == nil || !strings.Contains(err.Error(), TokenEnv) {
		t.Fatalf("short token: %v", err)
	}
	k, v := testServerConfig(t, l, "fail", map[string]string{"TEST_VALUE": "sk-refused-secret-27182"})
	_, err := startDaemon(t, l, map[string]json.RawMessage{k: v}, "")
	if err == nil || !strings.Contains(err.Error(), `server "github/test/fail": the MCP handshake failed`) || strings.Contains(err.Error(), "sk-refused") {
		t.Fatalf("failing server: %v", err)
	}
	if _, err := os.Stat(l.TokenFile); err == nil {
		t.Error("token file written")
	}
}
