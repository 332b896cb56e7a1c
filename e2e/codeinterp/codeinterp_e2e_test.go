//go:build e2e

package codeinterpe2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// iso names the host objects of this test process's servers.
var iso = e2eserve.NewIsolation("cinterp", "100.79.0.0/16", "wi")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const (
	apiKey     = "e2b_00112233445566778899aabbccddeeff00112233"
	adminToken = "codeinterp-e2e-admin-0123456789abcdef"
)

// startServe runs warren serve with the code interpreter template's tar.
func startServe(t *testing.T) *e2eserve.Server {
	t.Helper()
	e2eserve.Prerequisites(t)
	tar := os.Getenv("WARREN_TEST_CODE_INTERPRETER_TAR")
	e2eserve.Require(t, e2eserve.Exists(tar), fmt.Sprintf("$WARREN_TEST_CODE_INTERPRETER_TAR (%q) does not exist; run make code-interpreter-rootfs", tar))
	e2eserve.Require(t, e2eserve.Exists("../node_modules/@e2b/code-interpreter/package.json"), "e2e/node_modules/@e2b/code-interpreter missing; run npm ci in e2e/")
	dataDir := t.TempDir()
	// A warm pool of 1 per default template, as `warren serve` keeps by
	// default (auto: 2 on the 2-core test host): creates claim members
	// restored from the snapshot while one is ready, restore otherwise.
	s := e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, APIKey: apiKey, Isolation: iso, AdminToken: adminToken,
		ExtraArgs: []string{"--code-interpreter-rootfs", tar, "--pool-size", "1"}})
	// The snapshot on ready is taken before the server serves: sandboxes
	// restore it (base's build has none).
	if snaps, _ := filepath.Glob(filepath.Join(dataDir, "templates", "builds", "*", "snapshot")); len(snaps) != 1 {
		t.Fatalf("snapshots on ready %q, want the code interpreter's one", snaps)
	}
	return s
}

// TestCodeInterpreter runs each case of run.mjs (a sandbox of
// code-interpreter-v1 each) against one server with its default warm
// pool, then "bench", which prints the time from create to the first
// runCode('1+1') (docs/BENCHMARKS.md; $CODE_INTERPRETER_BENCH_N
// sandboxes, 5 by default) and asserts only the results. The first case
// waits for a ready member, so at least it claims one.
func TestCodeInterpreter(t *testing.T) {
	s := startServe(t)
	url := s.Env["E2B_API_URL"]
	e2eserve.WaitPoolReady(t, url, adminToken, "code-interpreter-v1", 1, 3*time.Minute)
	defer func() {
		hits := e2eserve.Pool(t, url, adminToken, "code-interpreter-v1").Hits
		t.Logf("code interpreter pool hits: %d", hits)
		if hits < 1 {
			t.Error("no create claimed a member of the code interpreter's pool")
		}
	}()
	// Cases in Go, on the same server: the attack suite of the
	// interpreter's port (attack_e2e_test.go).
	t.Run("auth", func(t *testing.T) { testInterpreterAuth(t, s) })
	for _, c := range []string{"result", "stdout", "state", "error", "png", "dataframe", "envs", "contexts", "bash", "javascript", "interrupt", "pause", "random", "bench"} {
		t.Run(c, func(t *testing.T) {
			out := s.Node(t, "run.mjs", c)
			if c == "bench" {
				t.Log(strings.TrimSpace(out))
			}
			if !strings.Contains(out, "OK "+c) {
				t.Fatalf("case %s did not finish:\n%s", c, out)
			}
		})
	}
}
