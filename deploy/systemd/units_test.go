// Package systemd tests the systemd units for plain machines in this
// directory: systemd's own checker accepts them, their command lines carry
// the fixed flags of each role, every variable they use is set in their
// environment file template, and those command lines start the real roles.
package systemd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

func require(t *testing.T, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing under CI: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

// systemd-analyze verify in a root of its own that has the host's system
// units and a /usr/local/bin/warren: it reports unknown keys, bad values
// and commands that are not there.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	require(t, err == nil, "systemd-analyze is missing (Debian package systemd)")
	system := "/usr/lib/systemd/system"
	_, err = os.Stat(filepath.Join(system, "multi-user.target"))
	require(t, err == nil, "no systemd units in "+system)

	root := t.TempDir()
	for _, dir := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-r", system, filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", system, err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/warren"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	units := []string{"warren-api.service", "warren-node.service"}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc/systemd/system", u), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no", "--root=" + root}, units...)...).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestUnitsCommandLines(t *testing.T) {
	for _, tc := range []struct {
		unit, env string
		want      []string
	}{
		{"warren-api.service", "api.env", []string{"/usr/local/bin/warren", "api", "--listen", "${WARREN_LISTEN}", "$WARREN_API_ARGS"}},
		{"warren-node.service", "node.env", []string{"/usr/local/bin/warren", "node",
			"--rpc-listen", "${WARREN_RPC_LISTEN}", "--proxy-listen", "${WARREN_PROXY_LISTEN}",
			"--node-id", "${WARREN_NODE_ID}", "--advertise", "${WARREN_ADVERTISE}",
			"--api-url", "${WARREN_API_URL}", "--data-dir", "/var/lib/warren",
			"--tls-cert", "${WARREN_TLS_CERT}", "--tls-key", "${WARREN_TLS_KEY}", "--node-ca", "${WARREN_NODE_CA}", "$WARREN_NODE_ARGS"}},
	} {
		unit := read(t, tc.unit)
		exec := execStart(unit)
		if !slices.Equal(exec, tc.want) {
			t.Errorf("%s ExecStart %q, want %q", tc.unit, exec, tc.want)
		}
		if !strings.Contains(unit, "EnvironmentFile=/etc/warren/"+tc.env+"\n") {
			t.Errorf("%s does not read /etc/warren/%s", tc.unit, tc.env)
		}
		set := envKeys(read(t, tc.env))
		for _, m := range regexp.MustCompile(`\$\{?([A-Z_]+)\}?`).FindAllStringSubmatch(strings.Join(exec, " "), -1) {
			if !set[m[1]] {
				t.Errorf("%s uses $%s, which %s does not set", tc.unit, m[1], tc.env)
			}
		}
	}
	// The secrets travel in the environment the roles read (or files it
	// names), not in flags; a node gets its own token's file alone.
	api := envKeys(read(t, "api.env"))
	for _, k := range []string{"WARREN_DATABASE_URL", "WARREN_ADMIN_TOKEN", "WARREN_NODE_CREDENTIAL_KEY", "WARREN_NODE_CA"} {
		if !api[k] {
			t.Errorf("api.env does not set %s", k)
		}
	}
	if node := envKeys(read(t, "node.env")); !node["WARREN_NODE_TOKEN_FILE"] || node["WARREN_NODE_TOKEN"] || node["WARREN_NODE_CREDENTIAL_KEY"] ||
		node["WARREN_DATABASE_URL"] || node["WARREN_ADMIN_TOKEN"] {
		t.Errorf("node.env keys %v: want its token's file alone of the secrets", node)
	}
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// execStart is the ExecStart line's words, its continuation lines joined.
func execStart(unit string) []string {
	i := strings.Index(unit, "\nExecStart=")
	if i < 0 {
		return nil
	}
	var line strings.Builder
	for _, l := range strings.Split(unit[i+len("\nExecStart="):], "\n") {
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(l)
		break
	}
	return strings.Fields(line.String())
}

// envKeys are the variables an environment file sets.
func envKeys(env string) map[string]bool {
	keys := map[string]bool{}
	for _, l := range strings.Split(env, "\n") {
		if k, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys[strings.TrimSpace(k)] = true
		}
	}
	return keys
}

// Ports of TestUnitsRun's warren api and warren node.
const (
	runAPIPort     = 3831
	runRPCPort     = 3832
	runProxyPort   = 3833
	runMetricsPort = 3839
)

// The units' command lines run: ExecStart, with the variables of the
// environment file templates filled in as an operator would and expanded
// as systemd does (${VAR} one word, $VAR split at spaces), starts the real
// warren api over Postgres and a warren node (fake driver, through
// WARREN_NODE_ARGS) that registers with it with its own token, issued
// through the API, serving TLS with a certificate of a test CA. The one
// change is the node's /var/lib/warren, a directory of the test's instead
// of the host's.
func TestUnitsRun(t *testing.T) {
	warren := os.Getenv("WARREN_WARREN")
	require(t, warren != "", "WARREN_WARREN is not set")
	out, err := exec.Command(warren, "node", "--help").CombinedOutput()
	require(t, err == nil && strings.Contains(string(out), "--advertise"), "WARREN_WARREN has no node role: "+string(out))
	dsn := storetest.PostgresSchema(t)
	adminToken, credentialKey := sandbox.RandomToken(20), sandbox.RandomToken(32)
	// The node's data dir: one of this test's own under the repository's var/.
	varDir := filepath.Join("..", "..", "var")
	if err := os.MkdirAll(varDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir, err := os.MkdirTemp(varDir, "whelm-systemd-")
	if err != nil {
		t.Fatal(err)
	}
	if dataDir, err = filepath.Abs(dataDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })

	apiEnv := fill(t, read(t, "api.env"), map[string]string{
		"WARREN_LISTEN":              fmt.Sprintf("127.0.0.1:%d", runAPIPort),
		"WARREN_DATABASE_URL":        dsn,
		"WARREN_ADMIN_TOKEN":         adminToken,
		"WARREN_NODE_CREDENTIAL_KEY": credentialKey,
		"WARREN_NODE_CA":             e2eserve.CAFile(t),
		"WARREN_API_ARGS":            fmt.Sprintf("--metrics-listen 127.0.0.1:%d", runMetricsPort),
	})
	start(t, warren, read(t, "warren-api.service"), apiEnv, "", "")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", runAPIPort), "", func(code int, _ []byte) bool { return code == http.StatusNoContent })
	tokenFile := filepath.Join(t.TempDir(), "node.token")
	token := e2eserve.Admin{URL: fmt.Sprintf("http://127.0.0.1:%d", runAPIPort), Token: adminToken}.IssueNodeToken(t, "whelm-plain-1")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := e2eserve.IssueCert(t, t.TempDir(), "127.0.0.1")

	nodeEnv := fill(t, read(t, "node.env"), map[string]string{
		"WARREN_RPC_LISTEN":      fmt.Sprintf("127.0.0.1:%d", runRPCPort),
		"WARREN_PROXY_LISTEN":    fmt.Sprintf("127.0.0.1:%d", runProxyPort),
		"WARREN_NODE_ID":         "whelm-plain-1",
		"WARREN_ADVERTISE":       "127.0.0.1",
		"WARREN_API_URL":         fmt.Sprintf("http://127.0.0.1:%d", runAPIPort),
		"WARREN_NODE_TOKEN_FILE": tokenFile,
		"WARREN_TLS_CERT":        cert,
		"WARREN_TLS_KEY":         key,
		"WARREN_NODE_CA":         e2eserve.CAFile(t),
		"WARREN_NODE_ARGS":       "--driver fake",
	})
	start(t, warren, read(t, "warren-node.service"), nodeEnv, "/var/lib/warren", dataDir)
	var nodes []struct{ ID, Status, RPCAddress string }
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/admin/nodes", runAPIPort), adminToken, func(code int, body []byte) bool {
		return code == http.StatusOK && json.Unmarshal(body, &nodes) == nil && len(nodes) == 1 && nodes[0].Status == "ready"
	})
	if nodes[0].ID != "whelm-plain-1" || nodes[0].RPCAddress != fmt.Sprintf("https://127.0.0.1:%d", runRPCPort) {
		t.Errorf("registered node %+v", nodes[0])
	}
}

// fill sets the given variables of an environment file template, each of
// which it must have, and returns the file's variables.
func fill(t *testing.T, template string, values map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, l := range strings.Split(template, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			env[k] = v
		}
	}
	for k, v := range values {
		if _, ok := env[k]; !ok {
			t.Fatalf("the template has no %s", k)
		}
		env[k] = v
	}
	return env
}

// start runs the unit's ExecStart with its variables expanded and the
// warren binary under test, and stops it by PID when the test ends.
func start(t *testing.T, warren, unit string, env map[string]string, from, to string) {
	t.Helper()
	words := execStart(unit)
	var args []string
	for _, w := range words[1:] {
		if name, ok := strings.CutPrefix(w, "$"); ok && !strings.HasPrefix(name, "{") {
			args = append(args, strings.Fields(env[name])...)
			continue
		}
		w = regexp.MustCompile(`\$\{([A-Z_]+)\}`).ReplaceAllStringFunc(w, func(m string) string { return env[m[2:len(m)-1]] })
		if from != "" && w == from {
			w = to
		}
		args = append(args, w)
	}
	cmd := exec.Command(warren, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &log}, &syncWriter{w: &log}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s:\n%s", strings.Join(args, " "), log.String())
		}
	})
}

// syncWriter lets a process's stdout and stderr share one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// waitHTTP polls url until ok accepts the answer, within two minutes (a
// bound, not a measure).
func waitHTTP(t *testing.T, url, adminToken string, ok func(int, []byte) bool) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if adminToken != "" {
			req.Header.Set("X-Admin-Token", adminToken)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil && ok(resp.StatusCode, body) {
			return
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	t.Fatalf("GET %s: %s", url, last)
}
