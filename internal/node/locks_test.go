package node_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// lockFaults returns where, in the Go source of file name, a lock is not
// released by a defer in the function that took it: every X.Lock() or
// X.RLock() statement must be followed at once by defer X.Unlock() (or
// defer X.RUnlock()), and every Unlock or RUnlock call must be such a
// defer. So no lock is released on some paths only, in a closure, or by a
// goroutine other than the one that took it.
func lockFaults(t *testing.T, name string, src any) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var faults []string
	fault := func(n ast.Node, format string, args ...any) {
		faults = append(faults, fset.Position(n.Pos()).String()+": "+fmt.Sprintf(format, args...))
	}
	// The Unlock calls that are the defer right after their Lock.
	paired := map[*ast.CallExpr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		var list []ast.Stmt
		switch b := n.(type) {
		case *ast.BlockStmt:
			list = b.List
		case *ast.CaseClause:
			list = b.Body
		case *ast.CommClause:
			list = b.Body
		default:
			return true
		}
		for i, st := range list {
			recv, method, ok := lockCall(st)
			if !ok || (method != "Lock" && method != "RLock") {
				continue
			}
			want := "Unlock"
			if method == "RLock" {
				want = "RUnlock"
			}
			var next *ast.DeferStmt
			if i+1 < len(list) {
				next, _ = list[i+1].(*ast.DeferStmt)
			}
			if next == nil {
				fault(st, "%s.%s() not followed by defer %s.%s()", recv, method, recv, want)
				continue
			}
			r, m, ok := callOf(next.Call)
			if !ok || r != recv || m != want {
				fault(st, "%s.%s() not followed by defer %s.%s()", recv, method, recv, want)
				continue
			}
			paired[next.Call] = true
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if r, m, ok := callOf(c); ok && (m == "Unlock" || m == "RUnlock") && !paired[c] {
			fault(c, "%s.%s() is not the defer after its lock", r, m)
		}
		return true
	})
	return faults
}

// lockCall reports whether st is a statement X.M() with M a lock method.
func lockCall(st ast.Stmt) (recv, method string, ok bool) {
	es, isExpr := st.(*ast.ExprStmt)
	if !isExpr {
		return "", "", false
	}
	c, isCall := es.X.(*ast.CallExpr)
	if !isCall {
		return "", "", false
	}
	return callOf(c)
}

// callOf returns X and M of a call X.M() without arguments, M one of
// Lock, RLock, Unlock, RUnlock.
func callOf(c *ast.CallExpr) (recv, method string, ok bool) {
	sel, isSel := c.Fun.(*ast.SelectorExpr)
	if !isSel || len(c.Args) != 0 {
		return "", "", false
	}
	switch sel.Sel.Name {
	case "Lock", "RLock", "Unlock", "RUnlock":
	default:
		return "", "", false
	}
	return exprText(sel.X), sel.Sel.Name, true
}

// exprText renders a receiver expression (a.mu, h.op, s[i].op) as text.
func exprText(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprText(x.X) + "." + x.Sel.Name
	case *ast.IndexExpr:
		return exprText(x.X) + "[" + exprText(x.Index) + "]"
	case *ast.StarExpr:
		return "*" + exprText(x.X)
	case *ast.ParenExpr:
		return "(" + exprText(x.X) + ")"
	case *ast.CallExpr:
		return exprText(x.Fun) + "()"
	}
	return "?"
}

// TestLocksReleasedByDefer holds internal/node and its packages to their
// lock rule (node.go): every lock is released by a defer right after it is
// taken, in the function that took it.
func TestLocksReleasedByDefer(t *testing.T) {
	t.Parallel()
	t.Run("checker", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name   string
			src    string
			faults int
		}{
			{"deferred", "package p\nfunc f() { a.mu.Lock(); defer a.mu.Unlock() }", 0},
			{"read lock", "package p\nfunc f() { a.mu.RLock(); defer a.mu.RUnlock() }", 0},
			{"in a loop", "package p\nfunc f() { for _, c := range cs { c.op.Lock(); defer c.op.Unlock() } }", 0},
			{"in a literal", "package p\nfunc f() { go func() { mu.Lock(); defer mu.Unlock() }() }", 0},
			{"not deferred", "package p\nfunc f() { a.mu.Lock(); x(); a.mu.Unlock() }", 2},
			{"on one path", "package p\nfunc f() { a.mu.Lock(); defer a.mu.Unlock(); if x { a.mu.Unlock() } }", 1},
			{"defer later", "package p\nfunc f() { a.mu.Lock(); x(); defer a.mu.Unlock() }", 2},
			{"other lock", "package p\nfunc f() { a.mu.Lock(); defer b.mu.Unlock() }", 2},
			{"wrong kind", "package p\nfunc f() { a.mu.RLock(); defer a.mu.Unlock() }", 2},
			{"in a closure", "package p\nfunc f() { s.op.Lock(); fail := func() { s.op.Unlock() }; fail() }", 2},
			{"deferred closure", "package p\nfunc f() { s.op.Lock(); defer func() { s.op.Unlock() }() }", 2},
			{"handed to a goroutine", "package p\nfunc f() { s.op.Lock(); go func() { defer s.op.Unlock() }() }", 2},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				if got := lockFaults(t, "x.go", tt.src); len(got) != tt.faults {
					t.Errorf("%d faults %v, want %d", len(got), got, tt.faults)
				}
			})
		}
	})
	t.Run("tree", func(t *testing.T) {
		t.Parallel()
		files := 0
		err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			files++
			for _, f := range lockFaults(t, path, nil) {
				t.Error(f)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if files < 20 {
			t.Fatalf("checked %d files, want the package's", files)
		}
	})
}
