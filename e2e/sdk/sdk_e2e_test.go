//go:build e2e

package sdke2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// iso names the host objects of this test process's servers; a restarted
// server gets the same.
var iso = e2eserve.NewIsolation("sdk", "100.66.0.0/16", "we")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const apiKey = "e2b_00112233445566778899aabbccddeeff00112233"

// startServe runs warren serve on listen (a free port when empty) with its
// state in dataDir.
func startServe(t testing.TB, dataDir, listen string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, Listen: listen, APIKey: apiKey, Isolation: iso})
}

// health asks the sandbox's envd for /health through the server's proxy.
func health(t testing.TB, s *e2eserve.Server, id string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.Env["E2B_SANDBOX_URL"]+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestSDKFlow(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir(), "")
	out := s.Node(t, "flow.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("flow did not finish:\n%s", out)
	}
}

func TestCLI(t *testing.T) {
	e2eserve.Prerequisites(t)
	cli := "../node_modules/@e2b/cli/dist/index.js"
	e2eserve.Require(t, e2eserve.Exists(cli), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	s := startServe(t, t.TempDir(), "")
	ctx := context.Background()
	c := client.New(s.Env["E2B_API_URL"], apiKey)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	out := s.Node(t, cli, "sandbox", "list")
	if !strings.Contains(out, sb.SandboxID) {
		t.Fatalf("sandbox list lacks %s:\n%s", sb.SandboxID, out)
	}
	s.Node(t, cli, "sandbox", "kill", sb.SandboxID)
	if _, err := c.Get(ctx, sb.SandboxID); !client.IsNotFound(err) {
		t.Fatalf("after CLI kill: %v", err)
	}
}

// TestRestart kills warren serve with SIGKILL while sandboxes run; after a
// restart they are listed, reachable, and their deadlines still fire.
func TestRestart(t *testing.T) {
	e2eserve.Prerequisites(t)
	dir := t.TempDir()
	s := startServe(t, dir, "")
	ctx := context.Background()
	c := client.New(s.Env["E2B_API_URL"], apiKey)
	short, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: ptr(45)})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: ptr(600)})
	if err != nil {
		t.Fatal(err)
	}
	listen := strings.TrimPrefix(s.Env["E2B_API_URL"], "http://")
	s.Cmd.Process.Kill()
	s.Cmd.Wait()

	s = startServe(t, dir, listen)
	list, _, err := c.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sb := range list {
		got[sb.SandboxID] = true
	}
	if !got[short.SandboxID] || !got[long.SandboxID] {
		t.Fatalf("after restart the list is %v", list)
	}
	for _, id := range []string{short.SandboxID, long.SandboxID} {
		if code := health(t, s, id); code != http.StatusNoContent {
			t.Fatalf("sandbox %s after restart: health %d", id, code)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for health(t, s, short.SandboxID) != http.StatusBadGateway {
		if time.Now().After(deadline) {
			t.Fatal("the short sandbox's deadline did not fire after the restart")
		}
		time.Sleep(time.Second)
	}
	if code := health(t, s, long.SandboxID); code != http.StatusNoContent {
		t.Fatalf("long sandbox: health %d", code)
	}
	c.Kill(ctx, long.SandboxID)
}

func ptr[T any](v T) *T { return &v }

// BenchmarkCreateFirstCommand measures Sandbox.create → first
// commands.run through the SDK on loopback (runsc driver). It reports p50
// and p99 over b.N sandboxes.
func BenchmarkCreateFirstCommand(b *testing.B) {
	e2eserve.Prerequisites(b)
	s := startServe(b, b.TempDir(), "")
	out := s.Node(b, "bench.mjs", strconv.Itoa(b.N))
	var res struct{ MS []float64 }
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &res); err != nil || len(res.MS) == 0 {
		b.Fatalf("bench output %q: %v", out, err)
	}
	sort.Float64s(res.MS)
	b.ReportMetric(res.MS[len(res.MS)/2], "p50-ms")
	b.ReportMetric(res.MS[(len(res.MS)*99)/100], "p99-ms")
}

// TestSDKForkBomb: a fork bomb started through the SDK is ended by its
// handle's kill and commands.kill(0) resets the default user (bomb.mjs).
func TestSDKForkBomb(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir(), "")
	out := s.Node(t, "bomb.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("bomb.mjs did not finish:\n%s", out)
	}
}

// BenchmarkSDKForkBomb measures, through the SDK against warren serve,
// commands.list, commands.kill and root's commands.run during a fork bomb
// and the recovery after the bomb's handle.kill() (bomb-bench.mjs: b.N
// sandboxes, 10 rounds each). It reports p50, p95 and p99 in
// milliseconds and the calls that failed.
//
//	go test -tags e2e -run '^$' -bench SDKForkBomb -benchtime 5x -timeout 60m ./e2e/sdk/
func BenchmarkSDKForkBomb(b *testing.B) {
	e2eserve.Prerequisites(b)
	s := startServe(b, b.TempDir(), "")
	out := s.Node(b, "bomb-bench.mjs", strconv.Itoa(b.N))
	var res struct {
		List, Kill, Root, Recover []float64
		Failed                    int
	}
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &res); err != nil || len(res.Recover) == 0 {
		b.Fatalf("bench output %q: %v", out, err)
	}
	for _, m := range []struct {
		name string
		ms   []float64
	}{{"list", res.List}, {"kill", res.Kill}, {"root", res.Root}, {"recover", res.Recover}} {
		sort.Float64s(m.ms)
		for _, p := range []int{50, 95, 99} {
			i := max(0, int(math.Ceil(float64(p)/100*float64(len(m.ms))))-1)
			b.ReportMetric(m.ms[i], fmt.Sprintf("%s-p%d-ms", m.name, p))
		}
	}
	b.ReportMetric(float64(res.Failed), "failed-calls")
}
