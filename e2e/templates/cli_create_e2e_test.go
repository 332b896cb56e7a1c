//go:build e2e

package templatese2e

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// cliPath is the E2B CLI's entry point, relative to this package.
const cliPath = "../node_modules/@e2b/cli/dist/index.js"

// runCLI runs the E2B CLI with the server's exports and returns its
// combined output and exit code (-1 when it did not run to an exit).
func runCLI(t *testing.T, s *e2eserve.Server, args ...string) (string, int) {
	t.Helper()
	// No update check against npm: tests talk to loopback only.
	return s.Run(t, []string{"NO_UPDATE_NOTIFIER=1", "NO_COLOR=1"}, "node", append([]string{cliPath}, args...)...)
}

// TestCLITemplateCreate builds cli/e2b.Dockerfile (FROM e2bdev/base, ENV,
// ARG, WORKDIR, COPY of a directory and of a file with --chown, RUN,
// EXPOSE) with `e2b template create`, a start and a ready command and
// resources, checks a sandbox of it with the SDK, rebuilds it unchanged
// (cache hits in the printed logs), with --no-cache and with the force that
// flag is meant to send (no cache hits), builds a Dockerfile whose RUN
// fails, and checks that `template build` is only a deprecation notice.
func TestCLITemplateCreate(t *testing.T) {
	e2eserve.Prerequisites(t)
	e2eserve.Require(t, e2eserve.Exists(cliPath), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	s := startServe(t, t.TempDir())
	name := fmt.Sprintf("e2e-cli-%d", os.Getpid())
	create := func(t *testing.T, extra ...string) (string, int) {
		t.Helper()
		args := append([]string{"template", "create", name, "-p", "cli",
			"-c", "/opt/app/start.sh", "--ready-cmd", "test -s /tmp/started",
			"--cpu-count", "1", "--memory-mb", "512", "--min-free-disk-mb", "8192"}, extra...)
		return runCLI(t, s, args...)
	}
	cachedStep := regexp.MustCompile(`(?m)CACHED \[\d+\] RUN chmod`)

	t.Run("create", func(t *testing.T) {
		out, code := create(t)
		t.Logf("e2b template create:\n%s", out)
		if code != 0 {
			t.Fatalf("e2b template create exited %d", code)
		}
		for _, want := range []string{
			"e2b.Dockerfile that will be used to build the sandbox template",
			"Uploaded 'app'", "Uploaded 'note.txt'",
			"Building sandbox template " + name + " finished",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if cachedStep.MatchString(out) {
			t.Errorf("first build reports the RUN step as cached")
		}
		if out := s.Node(t, "cli_check.mjs", name); !strings.Contains(out, "OK") {
			t.Fatalf("sandbox check did not finish:\n%s", out)
		}
		// The resources the CLI asked for are the template's.
		out, code = runCLI(t, s, "template", "list", "--format", "json")
		var list []struct {
			Aliases    []string `json:"aliases"`
			CPUCount   int      `json:"cpuCount"`
			MemoryMB   int      `json:"memoryMB"`
			DiskSizeMB int      `json:"diskSizeMB"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &list); code != 0 || err != nil {
			t.Fatalf("e2b template list: exit %d, %v:\n%s", code, err, out)
		}
		found := false
		for _, tp := range list {
			if slices.Contains(tp.Aliases, name) {
				found = true
				if tp.CPUCount != 1 || tp.MemoryMB != 512 || tp.DiskSizeMB != 8192 {
					t.Errorf("template %s: %d vCPUs, %d MiB, disk %d MiB; want 1, 512, 8192", name, tp.CPUCount, tp.MemoryMB, tp.DiskSizeMB)
				}
			}
		}
		if !found {
			t.Errorf("e2b template list lacks %s:\n%s", name, out)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("unchanged", func(t *testing.T) {
		out, code := create(t)
		if code != 0 {
			t.Fatalf("second e2b template create exited %d:\n%s", code, out)
		}
		if !cachedStep.MatchString(out) || !strings.Contains(out, "Skipping upload of 'app', already cached") {
			t.Errorf("second build of an unchanged Dockerfile shows no cache hits:\n%s", out)
		}
	})

	t.Run("no-cache", func(t *testing.T) {
		anyCached := regexp.MustCompile(`(?m)CACHED \[`)
		out, code := create(t, "--no-cache")
		if code != 0 {
			t.Fatalf("e2b template create --no-cache exited %d:\n%s", code, out)
		}
		if anyCached.MatchString(out) {
			// CLI 2.19.0 reads opts.noCache, but commander names the
			// negated flag opts.cache: the request carries force:false,
			// the same as without the flag (docs/api.md).
			t.Logf("the CLI did not send force for --no-cache; its build used the cache")
		}
		// The request --no-cache is meant to send, through the SDK the CLI
		// wraps: Warren rebuilds every step.
		out = s.Node(t, "cli_skipcache.mjs", name)
		if !strings.Contains(out, "OK") || anyCached.MatchString(out) {
			t.Errorf("a build with force took steps from the cache:\n%s", out)
		}
		if out := s.Node(t, "cli_check.mjs", name); !strings.Contains(out, "OK") {
			t.Fatalf("sandbox check after the forced build did not finish:\n%s", out)
		}
	})

	t.Run("failing-run", func(t *testing.T) {
		out, code := runCLI(t, s, "template", "create", name+"-fail", "-p", "cli", "-d", "fail.Dockerfile")
		t.Logf("e2b template create of a failing RUN:\n%s", out)
		if code == 0 {
			t.Fatalf("e2b template create of a failing RUN exited 0")
		}
		for _, want := range []string{"step-output-before-failure", "to-stderr", "exit code 7", "Template build failed"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("build-deprecated", func(t *testing.T) {
		// In CLI 2.x `template build` only prints a deprecation notice.
		out, code := runCLI(t, s, "template", "build", name, "-p", "cli")
		if code == 0 || !strings.Contains(out, "DEPRECATION") {
			t.Errorf("e2b template build: exit %d:\n%s", code, out)
		}
		if out, _ := runCLI(t, s, "template", "build", "--help"); !strings.Contains(out, "template create") {
			t.Errorf("e2b template build --help does not name template create:\n%s", out)
		}
	})

	if out, code := runCLI(t, s, "template", "delete", name, "--yes"); code != 0 {
		t.Errorf("e2b template delete: exit %d:\n%s", code, out)
	}
}
