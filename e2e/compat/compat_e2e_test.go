//go:build e2e

package compate2e

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// iso names the host objects of this test process's servers.
var iso = e2eserve.NewIsolation("compat", "100.93.0.0/16", "wk")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) {
	code := m.Run()
	iso.Cleanup()
	os.Exit(code)
}

const apiKey = "e2b_00112233445566778899aabbccddeeff00112244"

func startServe(t testing.TB, extra ...string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, Isolation: iso, ExtraArgs: extra})
}

// TestAutoResumeHTTP: a request to a server in a paused sandbox that
// allows auto-resume wakes it and is answered (held until the port
// answers, never reset); isRunning() of a paused sandbox is false.
func TestAutoResumeHTTP(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t)
	if out := s.Node(t, "autoresume.mjs"); !strings.Contains(out, "OK") {
		t.Fatalf("autoresume did not finish:\n%s", out)
	}
}

// TestFileWrites: files.write, makeDir, rename and remove work anywhere
// for the default user and leave what they create owned by the user;
// reads keep the user's permissions (through symbolic links too).
func TestFileWrites(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t)
	if out := s.Node(t, "files.mjs"); !strings.Contains(out, "OK") {
		t.Fatalf("files did not finish:\n%s", out)
	}
}

// TestCLISandboxLogs: `e2b sandbox logs ID` prints the sandbox's log lines
// (each line of the logs route is a JSON object the CLI parses), envd's
// own lines among them.
func TestCLISandboxLogs(t *testing.T) {
	e2eserve.Prerequisites(t)
	cli := "../node_modules/@e2b/cli/dist/index.js"
	e2eserve.Require(t, e2eserve.Exists(cli), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	s := startServe(t)
	c := client.New(s.Env["E2B_API_URL"], apiKey)
	sb, err := c.Create(context.Background(), client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	out := s.Node(t, cli, "sandbox", "logs", sb.SandboxID)
	if !strings.Contains(out, "sandbox created") || !strings.Contains(out, "INFO") || !strings.Contains(out, "init applied") {
		t.Fatalf("sandbox logs:\n%s", out)
	}
}
