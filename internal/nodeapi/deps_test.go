package nodeapi_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/warren-sandbox/warren/"

// deps lists the packages pkgs link (go list -deps, no tests) for the
// platform of the test.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps"}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, stderr)
	}
	return strings.Fields(string(out))
}

// under tells whether pkg is dir or a package below it.
func under(pkg, dir string) bool {
	return pkg == module+dir || strings.HasPrefix(pkg, module+dir+"/")
}

// TestControlPlaneLinksNoNode holds the control plane (which is to run
// apart from the nodes, on machines of its own, talking to them over the
// node RPC) to the node contract: it links none
// of the agent, the runtime drivers, cgroups or envd, in the spirit of
// tailscale's depaware.
func TestControlPlaneLinksNoNode(t *testing.T) {
	t.Parallel()
	forbidden := []string{"internal/node", "internal/driver", "internal/cgroup", "internal/envd"}
	// The RPC client is what a control plane apart from its nodes will
	// call them with: it may link itself and the wire conversions only.
	rpc := []string{"internal/node/nodeclient", "internal/node/noderpc"}
	// The API server still imports the build engine (internal/builder)
	// for the build contract (Spec, StartRequest, Status, RegistryAuth),
	// and with it the engine's tar package; the allowance goes when that
	// contract moves out of the engine into a package of its own. Nothing
	// else of the node is allowed there.
	engine := []string{"internal/node/layer"}
	for pkg, allowed := range map[string][]string{
		"internal/lifecycle": nil, "internal/apiserver": engine, "internal/proxy": nil,
		"internal/nodeapi": nil, "internal/node/nodeclient": rpc,
		"internal/placement": rpc, "internal/nodereg": nil,
	} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
		next:
			for _, d := range deps(t, "./../../"+pkg) {
				for _, a := range allowed {
					if d == module+a {
						continue next
					}
				}
				for _, f := range forbidden {
					if under(d, f) {
						t.Errorf("%s links %s (forbidden: %s/...)", pkg, d, f)
					}
				}
			}
		})
	}
}

// TestBinaryLinksNoTestDoubles holds the warren binary to its production
// packages: no test-only package (nodetest, fakenode, drivertest,
// testenv, any *test package of the module). The fake driver and memhost are linked on
// purpose: together they are the named fake driver mode (driver: fake).
func TestBinaryLinksNoTestDoubles(t *testing.T) {
	t.Parallel()
	var linked bool
	for _, d := range deps(t, "./../../cmd/warren") {
		if d == module+"internal/driver/fake" {
			linked = true
		}
		if !strings.HasPrefix(d, module) {
			continue
		}
		last := d[strings.LastIndex(d, "/")+1:]
		if strings.HasSuffix(last, "test") || last == "fakenode" || last == "testenv" {
			t.Errorf("cmd/warren links the test double %s", d)
		}
	}
	if !linked {
		// The list is of the binary: it must hold what app wires in.
		t.Error("cmd/warren does not link internal/driver/fake; is the package list right?")
	}
}
