package nodeapi_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/warren-sandbox/warren/"

// pkgInfo is one package of a go list -deps closure.
type pkgInfo struct {
	path     string
	standard bool
}

// deps lists the packages pkgs link (go list -deps, no tests), for
// linux/amd64 without cgo, as the release binary is built.
func deps(t *testing.T, pkgs ...string) []pkgInfo {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, stderr)
	}
	var list []pkgInfo
	for line := range strings.Lines(string(out)) {
		path, std, _ := strings.Cut(strings.TrimSpace(line), " ")
		list = append(list, pkgInfo{path: path, standard: std == "true"})
	}
	return list
}

// under tells whether pkg is dir or a package below it.
func under(pkg, dir string) bool {
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

// contracts are the packages every side of Warren shares: the error
// classes and their HTTP mapping, the domain types (with the name-based
// egress rules of a network policy), the node contract.
//
// The rule: the whole closure (go list -deps) of each holds only the
// standard library and these packages. Nothing third-party, not even the
// generated wire code of api/ (and the protobuf and Connect runtimes it
// brings): a wire is the business of its client and server
// (internal/node/nodeclient, internal/node/noderpc, errdefs/errconnect),
// which stand on the contract, not the other way round.
var contracts = []string{
	"internal/errdefs",
	"internal/errdefs/errhttp",
	"internal/egressrules",
	"internal/sandbox",
	"internal/nodeapi",
}

// TestContractsLinkOnlyTheStandardLibrary holds the contracts to the rule
// above: a contract that imported an implementation (as nodeapi once did
// netslot, for its Policy, and with it nftables and netlink) fails here.
func TestContractsLinkOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	for _, c := range contracts {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			for _, d := range deps(t, "./../../"+c) {
				if d.standard || slices.Contains(contracts, strings.TrimPrefix(d.path, module)) {
					continue
				}
				t.Errorf("contract %s links %s: a contract imports only the standard library and the other contracts", c, d.path)
			}
		})
	}
}

// forbidden are what the control plane (which runs apart from the nodes,
// on machines of its own, talking to them over the node RPC) never runs:
// Warren's node side (the agent, drivers, cgroups, network slots, root
// filesystems, envd) and the third-party code only it needs.
var forbidden = []string{
	module + "internal/node", module + "internal/driver", module + "internal/cgroup",
	module + "internal/netslot", module + "internal/rootfs", module + "internal/envd",
	"github.com/google/nftables", "github.com/mdlayher/netlink", "github.com/vishvananda/netlink",
	"github.com/google/go-containerregistry", "github.com/moby/buildkit",
}

// TestControlPlaneLinksNoNode holds the control plane's packages to the
// node contract over their whole closure, third-party packages included,
// in the spirit of tailscale's depaware (the API role's full list is
// internal/app/apirole/depaware.txt).
func TestControlPlaneLinksNoNode(t *testing.T) {
	t.Parallel()
	// The RPC client is what the control plane calls its nodes with: it
	// may link itself and the wire conversions.
	rpc := []string{module + "internal/node/nodeclient", module + "internal/node/noderpc"}
	// The API server still imports the build engine (internal/builder)
	// for the build contract (Spec, StartRequest, Status, RegistryAuth),
	// and with it the engine's tar package, image library and Dockerfile
	// parser; the allowance goes when that contract moves out of the
	// engine into a package of its own.
	engine := []string{module + "internal/node/layer", "github.com/google/go-containerregistry", "github.com/moby/buildkit"}
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
					if under(d.path, a) {
						continue next
					}
				}
				for _, f := range forbidden {
					if under(d.path, f) {
						t.Errorf("%s links %s (forbidden: %s/...)", pkg, d.path, f)
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
		if d.path == module+"internal/driver/fake" {
			linked = true
		}
		if !strings.HasPrefix(d.path, module) {
			continue
		}
		last := d.path[strings.LastIndex(d.path, "/")+1:]
		if strings.HasSuffix(last, "test") || last == "fakenode" || last == "testenv" {
			t.Errorf("cmd/warren links the test double %s", d.path)
		}
	}
	if !linked {
		// The list is of the binary: it must hold what app wires in.
		t.Error("cmd/warren does not link internal/driver/fake; is the package list right?")
	}
}
