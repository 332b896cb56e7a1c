package e2eserve

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// reserved are the address ranges other tests take addresses from: the
// integration tests' pools (netslottest), warren bench's servers, and the
// links between the host and the node machines of e2e/replicas.
var reserved = map[string]netip.Prefix{
	"netslottest":         netip.MustParsePrefix("100.80.0.0/12"),
	"bench":               netip.MustParsePrefix("100.100.0.0/14"),
	"replicas node links": netip.MustParsePrefix("100.109.0.0/24"),
}

// isolationCall is one e2e package's NewIsolation("name", "cidr", "veth").
type isolationCall struct {
	pos, file  string
	name, veth string
	cidr       netip.Prefix
	listen     []string // literal Listen addresses of the same file
}

// TestIsolationsDistinct: the e2e packages run at the same time (go test
// runs packages in parallel), so each must have its own name, address range
// and veth prefix, none inside another's and none inside a range reserved
// for other tests; and no two use the same literal listen address. The
// host locks refuse a shared range at run time, as a failure of whichever
// package came second; this says which two at once.
func TestIsolationsDistinct(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var calls []isolationCall
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		var found []isolationCall
		var listens []string
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "NewIsolation" || len(n.Args) != 3 {
					return true
				}
				args := make([]string, 3)
				for i, a := range n.Args {
					lit, ok := a.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: NewIsolation with a non-literal argument; this test reads literals", fset.Position(n.Pos()))
						return true
					}
					args[i], _ = strconv.Unquote(lit.Value)
				}
				p, err := netip.ParsePrefix(args[1])
				if err != nil {
					t.Errorf("%s: %v", fset.Position(n.Pos()), err)
					return true
				}
				found = append(found, isolationCall{pos: fset.Position(n.Pos()).String(), file: f, name: args[0], cidr: p.Masked(), veth: args[2]})
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Listen" {
					if lit, ok := n.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						listens = append(listens, v)
					}
				}
			}
			return true
		})
		for i := range found {
			found[i].listen = listens
		}
		calls = append(calls, found...)
	}
	if len(calls) < 2 {
		t.Fatalf("found %d NewIsolation calls under e2e/; the parser missed them", len(calls))
	}
	listenAt := map[string]string{}
	for i, a := range calls {
		for name, r := range reserved {
			if a.cidr.Overlaps(r) {
				t.Errorf("%s: %s overlaps %s's %s", a.pos, a.cidr, name, r)
			}
		}
		for _, l := range a.listen { // a file's calls share its listen addresses
			if other, ok := listenAt[l]; ok && other != a.file {
				t.Errorf("%s and %s both listen on %s", other, a.file, l)
			}
			listenAt[l] = a.file
		}
		for _, b := range calls[i+1:] {
			if a.name == b.name {
				t.Errorf("%s and %s: the same name %q", a.pos, b.pos, a.name)
			}
			if a.cidr.Overlaps(b.cidr) {
				t.Errorf("%s and %s: ranges %s and %s overlap", a.pos, b.pos, a.cidr, b.cidr)
			}
			if strings.HasPrefix(a.veth, b.veth) || strings.HasPrefix(b.veth, a.veth) {
				t.Errorf("%s and %s: veth prefixes %q and %q collide", a.pos, b.pos, a.veth, b.veth)
			}
		}
	}
}
