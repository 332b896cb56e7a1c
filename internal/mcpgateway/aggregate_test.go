package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const testToken = "test-token-0123456789abcdef"

// testLayout is a scratch layout; repository servers named in
// testConfig are "cloned" already (a .git directory each).
func testLayout(t *testing.T) Layout {
	t.Helper()
	root := t.TempDir()
	l := DefaultLayout()
	l.Root, l.StateDir = root, root
	l.TokenFile = filepath.Join(root, "etc", ".token")
	l.LogFile = filepath.Join(root, "gateway.log")
	l.Addr = "127.0.0.1:0"
	l.GitHubURL = "file:///nonexistent"
	l.StartTimeout = 20 * time.Second
	return l
}

// testServerConfig is the config of a repository server run by the test
// binary as test server name (main_test.go), with extra envs.
func testServerConfig(t *testing.T, l Layout, name string, envs map[string]string) (string, json.RawMessage) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(l.Root, "github", "test", name, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"MCPGW_TEST_SERVER": name}
	for k, v := range envs {
		e[k] = v
	}
	b, _ := json.Marshal(map[string]any{"runCmd": "exec " + os.Args[0], "envs": e})
	return "github/test/" + name, b
}

// serveTest starts the gateway on config (and extra servers) and
// returns a client session connected to it over streamable HTTP with the
// token, and the URL.
func serveTest(t *testing.T, l Layout, config map[string]json.RawMessage, extra []*Server, logw io.Writer) (*mcp.ClientSession, string) {
	t.Helper()
	data, _ := json.Marshal(config)
	servers, err := ParseConfig(data, l)
	if err != nil {
		t.Fatal(err)
	}
	servers = append(servers, extra...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if logw == nil {
		logw = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{Layout: l, Servers: servers, Token: testToken, Listener: ln,
			Log: newLogger(logw, newRedactor(secretsOf(servers)...)), Ready: func(err error) { ready <- err }})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if err := <-ready; err != nil {
		t.Fatalf("gateway did not start: %v", err)
	}
	url := "http://" + ln.Addr().String()
	return connect(t, url+"/mcp", testToken), url
}

func connect(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: headerTransport{base: http.DefaultTransport, headers: map[string]string{"Authorization": "Bearer " + token}}}}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tool.Name)
	}
	slices.Sort(out)
	return out
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("call %s: %+v", name, res)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// waitTools polls the gateway's tools until they are want.
func waitTools(t *testing.T, cs *mcp.ClientSession, want []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := toolNames(t, cs)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools %q, want %q", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAggregate: two stdio servers and a remote one behind one endpoint.
// A tool or prompt only one server offers keeps its name; one several
// offer gets the server's alias; calls, prompts, resources and resource
// templates reach the server that offers them; a server's list_changed
// reaches the gateway's clients, and a server that exits is withdrawn.
func TestAggregate(t *testing.T) {
	t.Parallel()
	l := testLayout(t)
	remote := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(remote, &mcp.Tool{Name: "remote_only"}, func(_ context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "remote: " + a.Text}}}, nil, nil
	})
	rs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return remote }, nil))
	t.Cleanup(rs.Close)
	remoteServer := &Server{Name: "testRemote", Alias: "testRemote", Entry: &Entry{Name: "testRemote", URL: rs.URL, launch: noSettings}}

	config := map[string]json.RawMessage{}
	for _, n := range []string{"a", "b"} {
		k, v := testServerConfig(t, l, n, nil)
		config[k] = v
	}
	cs, _ := serveTest(t, l, config, []*Server{remoteServer}, nil)

	want := []string{"a_only", "b_only",
		"github_test_a__add_tool", "github_test_a__env", "github_test_a__exit", "github_test_a__shared",
		"github_test_b__add_tool", "github_test_b__env", "github_test_b__exit", "github_test_b__shared",
		"remote_only"}
	if got := toolNames(t, cs); !slices.Equal(got, want) {
		t.Fatalf("tools %q, want %q", got, want)
	}
	for name, text := range map[string]string{
		"a_only": "a/a_only: x", "b_only": "b/b_only: x", "github_test_a__shared": "a/shared: x",
		"github_test_b__shared": "b/shared: x", "remote_only": "remote: x",
	} {
		if got := callText(t, cs, name, map[string]string{"text": "x"}); got != text {
			t.Errorf("%s answered %q, want %q", name, got, text)
		}
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "shared"}); err == nil {
		t.Error("the bare name of a tool two servers offer answered")
	}

	pr, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "github_test_b__shared", Arguments: map[string]string{"topic": "cats"}})
	if err != nil || pr.Messages[0].Content.(*mcp.TextContent).Text != "b prompt about cats" {
		t.Errorf("prompt: %+v %v", pr, err)
	}
	for uri, text := range map[string]string{"test://a/doc": "a doc", "test://b/item/7": "b item test://b/item/7"} {
		rr, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil || rr.Contents[0].Text != text {
			t.Errorf("read %s: %+v %v", uri, rr, err)
		}
	}
	if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "test://c/doc"}); err == nil {
		t.Error("a resource no server offers was read")
	}
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "use a") || !strings.Contains(in, "use b") {
		t.Errorf("instructions %q", in)
	}

	// A server adds a tool: its list_changed reaches the gateway.
	callText(t, cs, "github_test_a__add_tool", nil)
	want = append(want, "late_a")
	slices.Sort(want)
	waitTools(t, cs, want)
	if got := callText(t, cs, "late_a", map[string]string{"text": "y"}); got != "a/late_a: y" {
		t.Errorf("late_a answered %q", got)
	}

	// b exits: its tools go, and a's shared names lose their prefix.
	callText(t, cs, "github_test_b__exit", nil)
	waitTools(t, cs, []string{"a_only", "add_tool", "env", "exit", "late_a", "remote_only", "shared"})
	if got := callText(t, cs, "shared", map[string]string{"text": "z"}); got != "a/shared: z" {
		t.Errorf("shared answered %q", got)
	}
}

// TestAuth: every path answers 401 without the token or with another,
// before anything else; with it, the streamable and the SSE transports
// both serve.
func TestAuth(t *testing.T) {
	t.Parallel()
	l := testLayout(t)
	k, v := testServerConfig(t, l, "a", nil)
	_, url := serveTest(t, l, map[string]json.RawMessage{k: v}, nil, nil)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tc := range []struct{ name, path, auth string }{
		{"no token", "/mcp", ""},
		{"wrong token", "/mcp", "Bearer " + testToken + "x"},
		{"prefix of the token", "/mcp", "Bearer " + testToken[:10]},
		{"basic", "/mcp", "Basic " + testToken},
		{"sse without token", "/sse", ""},
		{"other path", "/", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url+tc.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(string(b), "unauthorized") {
				t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
			}
		})
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "sse-client", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.SSEClientTransport{Endpoint: url + "/sse",
		HTTPClient: &http.Client{Transport: headerTransport{base: http.DefaultTransport, headers: map[string]string{"Authorization": "Bearer " + testToken}}}}, nil)
	if err != nil {
		t.Fatalf("SSE: %v", err)
	}
	defer cs.Close()
	if got := callText(t, cs, "a_only", map[string]string{"text": "sse"}); got != "a/a_only: sse" {
		t.Fatalf("over SSE: %q", got)
	}
}

// TestStartFailures: a server that exits, one that never answers, and
// one whose repository cannot be cloned each fail the start, named, with
// what the server wrote (secrets redacted); the others are stopped.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	const secret = "sk-live-secret-4242"
	l := testLayout(t)
	l.StartTimeout = 3 * time.Second
	config := map[string]json.RawMessage{}
	for _, n := range []string{"a", "fail", "mute"} {
		k, v := testServerConfig(t, l, n, map[string]string{"TEST_VALUE": secret})
		config[k] = v
	}
	config["github/nobody/missing"] = json.RawMessage(`{"runCmd":"true","envs":{"TOKEN":"` + secret + `"}}`)
	data, _ := json.Marshal(config)
	servers, err := ParseConfig(data, l)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs bytes.Buffer
	var ready error
	err = Serve(context.Background(), ServeOptions{Layout: l, Servers: servers, Token: testToken, Listener: ln,
		Log: newLogger(&logs, newRedactor(append(secretsOf(servers), testToken)...)), Ready: func(err error) { ready = err }})
	if err == nil || ready == nil || err.Error() != ready.Error() {
		t.Fatalf("Serve: %v, ready %v", err, ready)
	}
	msg := err.Error()
	for _, want := range []string{
		`server "github/test/fail": the MCP handshake failed`, "boom: the key [redacted] was refused", "exit status 3",
		`server "github/test/mute": did not start within 3s: the MCP handshake failed`,
		`server "github/nobody/missing": git clone file:///nonexistent/nobody/missing`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, `"github/test/a"`) {
		t.Errorf("the server that started is named:\n%s", msg)
	}
	if strings.Contains(msg, secret) || strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), testToken) {
		t.Errorf("a secret reached the error or the log:\n%s\n%s", msg, logs.String())
	}
	if _, err := os.Stat(l.TokenFile); err == nil {
		t.Error("a failed start wrote the token file")
	}
}

// TestServerEnvs: a repository server gets its envs and runs in its
// repository's root after installCmd; its output in the log has the envs'
// values redacted; the token file is the token, readable by root only.
func TestServerEnvs(t *testing.T) {
	t.Parallel()
	const secret = "ghp_envs-secret-value-777"
	l := testLayout(t)
	k, v := testServerConfig(t, l, "a", map[string]string{"TEST_VALUE": secret})
	var c map[string]any
	_ = json.Unmarshal(v, &c)
	c["installCmd"] = "echo installing with $TEST_VALUE >&2; touch installed-here"
	c["runCmd"] = "test -f installed-here && echo using $TEST_VALUE >&2 && " + c["runCmd"].(string)
	v, _ = json.Marshal(c)
	var logs lockedBuffer
	cs, _ := serveTest(t, l, map[string]json.RawMessage{k: v}, nil, &logs)
	if got := callText(t, cs, "env", nil); got != secret {
		t.Fatalf("env answered %q", got)
	}
	if !strings.Contains(logs.String(), "using [redacted]") || strings.Contains(logs.String(), secret) {
		t.Fatalf("log:\n%s", logs.String())
	}
	if out, err := os.ReadFile(filepath.Join(l.Root, "github", "test", "a", "installed-here")); err != nil {
		t.Fatalf("installCmd did not run in the repository's root: %v %s", err, out)
	}
	if fi, err := os.Stat(l.TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(l.TokenFile); string(b) != testToken {
		t.Fatalf("token file holds %q", b)
	}
}

// lockedBuffer is a log the gateway's goroutines write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestChildEnvHasNoToken: the gateway's children do not inherit its
// token.
func TestChildEnvHasNoToken(t *testing.T) {
	t.Setenv(TokenEnv, testToken)
	for _, kv := range baseEnv() {
		if strings.Contains(kv, testToken) {
			t.Fatalf("child environment has %q", kv)
		}
	}
}
