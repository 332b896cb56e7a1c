//go:build e2e

package compate2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// iso names the host objects of this test process's servers.
var iso = e2eserve.NewIsolation("compat", "100.69.0.0/16", "wk")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const apiKey = "e2b_00112233445566778899aabbccddeeff00112244"

func startServe(t testing.TB, extra ...string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, Isolation: iso, ExtraArgs: extra})
}

// TestDomainMode runs the SDK in E2B's own topology: HTTPS with a
// throw-away CA (NODE_EXTRA_CA_CERTS), --domain e2b.localhost:<port>, no
// E2B_API_URL or E2B_SANDBOX_URL, sandboxes reached at
// https://<port>-<id>.<domain> (domain.mjs: create, commands, files with
// files.list's order, a port of the sandbox's own, signed upload and
// download URLs, pause and connect, a kill while a command runs giving the
// SDK's TimeoutError). The proxy's answer for a sandbox that is gone is
// E2B's 502 body, over HTTP/2.
func TestDomainMode(t *testing.T) {
	e2eserve.DomainPrerequisites(t)
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, Isolation: iso, Domain: true})
	if out := s.Node(t, "domain.mjs"); !strings.Contains(out, "OK") {
		t.Fatalf("domain mode did not finish:\n%s", out)
	}
	const gone = "abcdefghij0123456789"
	resp, err := s.HTTPClient().Get("https://49983-" + gone + "." + s.Domain + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"sandboxId":"` + gone + `","message":"The sandbox was not found","code":502}`; resp.StatusCode != 502 || string(body) != want || resp.ProtoMajor != 2 {
		t.Fatalf("health of a sandbox that is gone: %s %d %s, want HTTP/2 502 %s", resp.Proto, resp.StatusCode, body, want)
	}
	if _, _, err := s.Client().List(context.Background(), client.ListOptions{}); err != nil {
		t.Fatalf("API at https://api.%s: %v", s.Domain, err)
	}
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

// TestWarrenSandboxCLI drives `warren sandbox create|list|exec|connect|
// logs|kill` against a running server, with the environment warren serve
// prints (as `warren template` takes it).
func TestWarrenSandboxCLI(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t)
	bin := os.Getenv("WARREN_WARREN")
	warren := func(stdin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = s.Environ()
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("warren %v: %v\n%s", args, err, out)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := warren("", "sandbox", "create", "--timeout", "2m", "--metadata", "who=cli")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.Contains(id, " ") {
		t.Fatalf("create: %d %s", code, out)
	}
	if out, code := warren("", "sandbox", "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Fatalf("list: %d %s", code, out)
	}
	if out, code := warren("", "sandbox", "exec", id, "--", "echo hi; whoami; echo err >&2; exit 3"); code != 3 || out != "hi\nuser\nerr\n" {
		t.Fatalf("exec: %d %q", code, out)
	}
	if out, code := warren("echo connected-$((40+2))\nexit 5\n", "sandbox", "connect", id); code != 5 || !strings.Contains(out, "connected-42") {
		t.Fatalf("connect: %d %q", code, out)
	}
	if out, code := warren("", "sandbox", "logs", id); code != 0 || !strings.Contains(out, "sandbox created") || !strings.Contains(out, "init applied") {
		t.Fatalf("logs: %d %s", code, out)
	}
	if out, code := warren("", "sandbox", "kill", id); code != 0 || !strings.Contains(out, "killed "+id) {
		t.Fatalf("kill: %d %s", code, out)
	}
	if out, code := warren("", "sandbox", "kill", id); code == 0 {
		t.Fatalf("second kill succeeded: %s", out)
	}
	if out, _ := warren("", "sandbox", "list"); strings.Contains(out, id) {
		t.Fatalf("killed sandbox still listed: %s", out)
	}
}
