package envd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// notForClients are envd's errors of a class that never reach a client
// (its configuration, its start): their text may carry the class's words.
var notForClients = map[string]bool{
	"config.go": true, "cabundle.go": true, "clock_other.go": true, "tasks_other.go": true,
}

// TestErrorsCarryNoClassWords reads envd's sources: an error of a class
// is made with errdefs.Classf (or Publicf), never fmt.Errorf("...: %w",
// errdefs.ErrX), because envd's clients are told an error's whole text
// (errdefs.MessageOrText on its Connect and HTTP wires) and nothing cuts
// the class's words ("not found", "invalid argument") off it.
func TestErrorsCarryNoClassWords(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fun, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := fun.X.(*ast.Ident); !ok || x.Name != "fmt" || fun.Sel.Name != "Errorf" {
				if ok && x.Name == "errdefs" && (fun.Sel.Name == "Classf" || fun.Sel.Name == "Publicf") {
					seen++
				}
				return true
			}
			for _, a := range call.Args[1:] {
				sel, ok := a.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "errdefs" && strings.HasPrefix(sel.Sel.Name, "Err") {
					format := ""
					if lit, ok := call.Args[0].(*ast.BasicLit); ok {
						format = lit.Value
					}
					if notForClients[filepath.Base(path)] || (path == filepath.Join("auth", "auth.go") && strings.Contains(format, "init token")) {
						continue
					}
					t.Errorf("%s: fmt.Errorf wraps errdefs.%s: the text would carry its words; use errdefs.Classf", fset.Position(call.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 40 {
		t.Fatalf("only %d errors of a class found: the test reads the wrong files", seen)
	}
}
