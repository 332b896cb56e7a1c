package envdproto

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// sdkGates are the envd versions the e2b JS SDK (e2e/package.json's
// version) compares a sandbox's envdVersion with, and what it keeps from a
// sandbox below each; Warren's envd does all of them (docs/api.md, "E2B
// SDK surface", has where).
var sdkGates = map[string]string{
	"0.1.0": "create: an older envd is killed at once (TemplateError)",
	"0.1.4": "files.watchDir recursive",
	"0.1.5": "getMetrics",
	"0.2.4": "disk metrics",
	"0.3.0": "commands stdin: false",
	"0.4.0": "the caller's user (older: always user)",
	"0.5.2": "commands.closeStdin",
	"0.5.7": "octet-stream and gzip uploads",
	"0.6.2": "file metadata (X-Metadata-*)",
	"0.6.3": "watchDir includeEntry",
	"0.6.4": "watchDir allowNetworkMounts",
}

// TestSDKEnvdGates: every envd version gate in the SDK's code is one this
// package knows, and Version is at least the highest, so every SDK feature
// is switched on; a new SDK with a new gate fails here until its behaviour
// is implemented (or refused) and listed.
func TestSDKEnvdGates(t *testing.T) {
	t.Parallel()
	const sdk = "../../e2e/node_modules/e2b/dist/index.mjs"
	data, err := os.ReadFile(sdk)
	testenv.Require(t, err == nil, "e2e/node_modules/e2b missing; run npm ci in e2e/")
	src := string(data)
	consts := map[string]string{}
	for _, m := range regexp.MustCompile(`const ([A-Z_0-9]+) = "(\d+\.\d+\.\d+)"`).FindAllStringSubmatch(src, -1) {
		consts[m[1]] = m[2]
	}
	var gates []string
	for _, m := range regexp.MustCompile(`compareVersions\(([^,()]+),\s*("(\d+\.\d+\.\d+)"|[A-Z_0-9]+)\)`).FindAllStringSubmatch(src, -1) {
		if !strings.Contains(strings.ToLower(m[1]), "envd") {
			continue // the Node.js version
		}
		v := m[3]
		if v == "" {
			v = consts[m[2]]
		}
		if v == "" {
			t.Fatalf("gate %s: constant %s not found", m[0], m[2])
		}
		gates = append(gates, v)
	}
	slices.Sort(gates)
	gates = slices.Compact(gates)
	if len(gates) == 0 {
		t.Fatal("no envd version gate found in the SDK: the pattern no longer matches its code")
	}
	for _, g := range gates {
		if _, ok := sdkGates[g]; !ok {
			t.Errorf("the SDK gates something on envd %s, which sdkGates does not list: implement it (or refuse it), list it here and in docs/api.md", g)
		}
		if less(Version, g) {
			t.Errorf("Version %s is below the SDK's gate %s (%s): the SDK switches that off", Version, g, sdkGates[g])
		}
	}
	for g := range sdkGates {
		if !slices.Contains(gates, g) {
			t.Errorf("sdkGates lists %s, which the SDK no longer gates on", g)
		}
	}
}

// less reports whether semantic version a is below b (x.y.z, digits only).
func less(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range 3 {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return false
}
