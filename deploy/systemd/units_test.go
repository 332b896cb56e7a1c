// Package systemd tests the systemd units for plain machines in this
// directory: systemd's own checker accepts them, their command lines carry
// the fixed flags of each role, and every variable they use is set in
// their environment file template.
package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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
			"--api-url", "${WARREN_API_URL}", "--data-dir", "/var/lib/warren", "$WARREN_NODE_ARGS"}},
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
	// The secrets travel in the environment the roles read, not in flags.
	api := envKeys(read(t, "api.env"))
	for _, k := range []string{"WARREN_DATABASE_URL", "WARREN_ADMIN_TOKEN", "WARREN_NODE_TOKEN"} {
		if !api[k] {
			t.Errorf("api.env does not set %s", k)
		}
	}
	if node := envKeys(read(t, "node.env")); !node["WARREN_NODE_TOKEN"] || node["WARREN_DATABASE_URL"] || node["WARREN_ADMIN_TOKEN"] {
		t.Errorf("node.env keys %v: want the node token alone of the secrets", node)
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
