package envd

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envd/process"
)

// TestKeptLogs: the start command's output (the process tagged
// process.StartCmdTag) and envd's own info lines are served at GET /logs;
// other processes' output is not kept.
func TestKeptLogs(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	do(t, "POST", srv.URL+"/init", `{"accessToken":"tok"}`, nil)
	c := processconnect.NewProcessClient(http.DefaultClient, srv.URL, connect.WithProtoJSON())
	run := func(tag, script string) {
		t.Helper()
		req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, Tag: &tag})
		req.Header().Set("X-Access-Token", "tok")
		st, err := c.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for st.Receive() {
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
	}
	run(process.StartCmdTag, "echo started; echo oops >&2")
	run("other", "echo not-kept")
	if status, _, _ := do(t, "GET", srv.URL+"/logs", "", nil); status != 401 {
		t.Fatalf("logs without the token: %d", status)
	}
	status, body, _ := do(t, "GET", srv.URL+"/logs", "", map[string]string{"X-Access-Token": "tok"})
	var got struct {
		Logs []struct {
			Level, Message string
			Fields         map[string]string
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	seen := map[string]map[string]string{}
	for _, e := range got.Logs {
		seen[e.Message] = e.Fields
	}
	if f := seen["started"]; f["stream"] != "stdout" || f["logger"] != "start-cmd" {
		t.Errorf("start command stdout: %v in %s", f, body)
	}
	if f := seen["oops"]; f["stream"] != "stderr" {
		t.Errorf("start command stderr: %v in %s", f, body)
	}
	if _, ok := seen["not-kept"]; ok {
		t.Errorf("another process's output was kept: %s", body)
	}
	if f := seen["init applied"]; f["logger"] != "envd" {
		t.Errorf("envd's own line: %v in %s", f, body)
	}
	if status, body, _ := do(t, "GET", srv.URL+"/logs?limit=1", "", map[string]string{"X-Access-Token": "tok"}); status != 200 || strings.Count(body, `"message"`) != 1 {
		t.Errorf("limit: %d %s", status, body)
	}
}

// TestKeptLogsNewIdentity: a sandbox restored from another one's snapshot
// (a template's, made at build time) gets /init with another access token:
// it does not inherit the build's log. A resume (the same token) keeps it.
func TestKeptLogsNewIdentity(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	messages := func(tok string) string {
		t.Helper()
		status, body, _ := do(t, "GET", srv.URL+"/logs", "", map[string]string{"X-Access-Token": tok})
		if status != 200 {
			t.Fatalf("logs: %d %s", status, body)
		}
		return body
	}
	do(t, "POST", srv.URL+"/init", `{"accessToken":"build"}`, nil)
	c := processconnect.NewProcessClient(http.DefaultClient, srv.URL, connect.WithProtoJSON())
	tag := process.StartCmdTag
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo build-secret"}}, Tag: &tag})
	req.Header().Set("X-Access-Token", "build")
	st, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if !strings.Contains(messages("build"), "build-secret") {
		t.Fatal("the start command's output was not kept")
	}
	build := map[string]string{"X-Access-Token": "build"}            // the test server has no node init token
	do(t, "POST", srv.URL+"/init", `{"accessToken":"build"}`, build) // a resume
	if !strings.Contains(messages("build"), "build-secret") {
		t.Error("a resume (same token) dropped the log")
	}
	do(t, "POST", srv.URL+"/init", `{"accessToken":"sandbox"}`, build) // a new sandbox from the snapshot
	if body := messages("sandbox"); strings.Contains(body, "build-secret") || !strings.Contains(body, "init applied") {
		t.Errorf("log of a sandbox restored from a template snapshot: %s", body)
	}
}
