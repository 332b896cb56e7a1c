package apirole

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite depaware.txt from go list")

const module = "github.com/warren-sandbox/warren/"

// goList runs go list -deps with format on this package, for linux/amd64
// without cgo, as the release binary is built, and returns its lines.
func goList(t *testing.T, format string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", format, ".")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

const depawareHeader = `# The packages the API role (warren api, internal/app/apirole) links
# outside the standard library: go list -deps, linux/amd64, no cgo.
# TestDepaware fails when this list is not the package's; after a change
# on purpose, regenerate it (and read the diff in review):
#   go test ./internal/app/apirole -run TestDepaware -update
`

// TestDepaware holds the API role's whole closure (third-party packages
// included) to depaware.txt, as tailscale's depaware does for its
// binaries: any package the role starts to link shows in review.
func TestDepaware(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(depawareHeader)
	pkgs := slices.DeleteFunc(goList(t, "{{if not .Standard}}{{.ImportPath}}{{end}}"), func(p string) bool { return p == "" })
	slices.Sort(pkgs)
	for _, p := range pkgs {
		b.WriteString(p + "\n")
	}
	if *update {
		if err := os.WriteFile("depaware.txt", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("depaware.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		wantSet, gotSet := lines(string(want)), lines(got)
		for _, l := range strings.Split(got, "\n") {
			if !wantSet[l] {
				t.Errorf("+ %s (newly linked)", l)
			}
		}
		for _, l := range strings.Split(string(want), "\n") {
			if !gotSet[l] {
				t.Errorf("- %s (no longer linked)", l)
			}
		}
		t.Error("depaware.txt is not the API role's closure: regenerate it with -update if the change is meant")
	}
}

func lines(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		m[l] = true
	}
	return m
}

// forbidden are what the API role never runs: Warren's node side (the
// agent, drivers, cgroups, network slots, root filesystems, envd) and
// the third-party code only it needs.
var forbidden = []string{
	module + "internal/node", module + "internal/driver", module + "internal/cgroup",
	module + "internal/netslot", module + "internal/rootfs", module + "internal/envd",
	module + "internal/egressproxy",
	"github.com/google/nftables", "github.com/mdlayher/netlink", "github.com/vishvananda/netlink",
	"github.com/google/go-containerregistry", "github.com/moby/buildkit",
}

// rpcClient is the node side the control plane may link: the RPC client
// it calls its nodes with, and the wire conversions it stands on.
var rpcClient = []string{module + "internal/node/nodeclient", module + "internal/node/noderpc"}

// buildEngine are the packages that hold the build contract today
// (builder.StartRequest, Spec, Status, RegistryAuth, the catalog rules;
// nodebuild's wire, with the node side of builds in the same package),
// and engineAllowance what the API role links only through them: the
// engine's tar package, the image library and the Dockerfile parser.
// Both go when the contract moves out of the engine; the test then fails
// until the allowance is removed.
var (
	buildEngine     = []string{module + "internal/builder", module + "internal/nodebuild"}
	engineAllowance = []string{module + "internal/node/layer", "github.com/google/go-containerregistry", "github.com/moby/buildkit"}
)

func under(pkg string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return pkg == d || strings.HasPrefix(pkg, d+"/") })
}

// TestAPIRoleLinksNoNode: the API role's closure holds no forbidden
// package but the node RPC client; what the build engine brings is
// allowed only through it (a path that reaches a forbidden package
// around the engine fails), and only the engine's known allowance.
func TestAPIRoleLinksNoNode(t *testing.T) {
	t.Parallel()
	graph := map[string][]string{}
	var root string
	for _, line := range goList(t, "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		graph[f[0]] = f[1:]
		root = f[0] // go list -deps prints the package itself last
	}
	if root != module+"internal/app/apirole" {
		t.Fatalf("go list -deps ended with %q, not the API role", root)
	}
	// reach walks the graph from root, not entering the packages cut
	// returns true for, and returns the path to each package reached.
	reach := func(cut func(string) bool) map[string][]string {
		paths := map[string][]string{root: {root}}
		queue := []string{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, d := range graph[p] {
				if _, seen := paths[d]; seen || cut(d) {
					continue
				}
				paths[d] = append(slices.Clone(paths[p]), d)
				queue = append(queue, d)
			}
		}
		return paths
	}
	bad := func(p string) bool { return under(p, forbidden) && !under(p, rpcClient) }
	direct := reach(func(p string) bool { return under(p, buildEngine) })
	for p, path := range direct {
		if bad(p) {
			t.Errorf("the API role links %s: %s", p, strings.Join(path, " → "))
		}
	}
	used := map[string]bool{}
	for p, path := range reach(func(string) bool { return false }) {
		if _, reported := direct[p]; reported || !bad(p) {
			continue
		}
		if !under(p, engineAllowance) {
			t.Errorf("the API role links %s through the build engine, beyond its allowance: %s", p, strings.Join(path, " → "))
			continue
		}
		for _, a := range engineAllowance {
			if under(p, []string{a}) {
				used[a] = true
			}
		}
	}
	for _, a := range engineAllowance {
		if !used[a] {
			t.Errorf("the build engine's allowance for %s is no longer needed: remove it from engineAllowance", a)
		}
	}
}
