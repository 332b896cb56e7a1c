//go:build e2e

package templatese2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// iso names the host objects of this test process's servers; a restarted
// server gets the same.
var iso = e2eserve.NewIsolation("tpl", "100.67.0.0/16", "wt")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const apiKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// startServe runs warren serve on a free port with its state in dataDir.
func startServe(t testing.TB, dataDir string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, APIKey: apiKey, Isolation: iso})
}

// TestTemplateBuild builds a template with the SDK's Template.build()
// (COPY, RUN, ENV, start and ready commands) and creates a sandbox of it.
func TestTemplateBuild(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir())
	name := fmt.Sprintf("e2e-tpl-%d", os.Getpid())
	out := s.Node(t, "build.mjs", name)
	if !strings.Contains(out, "OK") {
		t.Fatalf("build flow did not finish:\n%s", out)
	}
	t.Logf("%s", out)

	// The E2B CLI lists and deletes it.
	cli := "../node_modules/@e2b/cli/dist/index.js"
	e2eserve.Require(t, e2eserve.Exists(cli), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	if out := s.Node(t, cli, "template", "list", "--format", "json"); !strings.Contains(out, name) {
		t.Fatalf("CLI template list lacks %s:\n%s", name, out)
	}
	s.Node(t, cli, "template", "delete", name, "--yes")
	if out := s.Node(t, cli, "template", "list", "--format", "json"); strings.Contains(out, name) {
		t.Fatalf("CLI template list still has %s after delete:\n%s", name, out)
	}
}

// TestSnapshot snapshots a running sandbox and creates a sandbox from it.
func TestSnapshot(t *testing.T) {
	e2eserve.Prerequisites(t)
	dataDir := t.TempDir()
	// The template collector runs every second with no grace, so that the
	// deleted snapshot's files go within the test.
	s := e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, APIKey: apiKey, Isolation: iso,
		ExtraArgs: []string{"--template-gc-interval", "1s", "--template-gc-grace", "1ms"}})
	out := s.Node(t, "snapshot.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("snapshot flow did not finish:\n%s", out)
	}
	// The deleted snapshot's saved layer and memory image are freed by the
	// collector once no sandbox uses them (the script killed them all).
	var layers, images []string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		layers, _ = filepath.Glob(filepath.Join(dataDir, "layers", "tpl-*"))
		images, _ = filepath.Glob(filepath.Join(dataDir, "templates", "builds", "*", "snapshot"))
		if len(layers)+len(images) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // the collector's own period
	}
	if len(layers) > 0 {
		t.Errorf("saved layers left after deleteSnapshot: %v", layers)
	}
	if len(images) > 0 {
		t.Errorf("memory images left after deleteSnapshot: %v", images)
	}
}
