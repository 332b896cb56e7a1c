package apiserver_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoErrorTextInMessages reads the package's handlers: a message meant
// for a client (errdefs.Publicf's and Wrapf's formats and arguments,
// errdefs.WithMessage's message, invalid's, an errhttp.HTTPError's Msg, a
// client.Error's Message) must not be made of an error's text: no
// x.Error(), no error variable (err, cause, ...) among its arguments.
// Where an error's text is the client's own (a decoder's complaint about
// the client's input), the line says so in a comment "errtext: <why>".
func TestNoErrorTextInMessages(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		allowed := map[int]bool{}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.Contains(c.Text, "errtext:") {
					allowed[fset.Position(c.Pos()).Line] = true
				}
			}
		}
		check := func(what string, args []ast.Expr) {
			checked++
			for _, a := range args {
				if bad := errorText(a); bad != "" && !allowed[fset.Position(a.Pos()).Line] {
					t.Errorf("%s: %s's client message is made of an error's text (%s)", fset.Position(a.Pos()), what, bad)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				switch name := callName(n.Fun); {
				case name == "errdefs.Publicf" && len(n.Args) > 1, name == "errdefs.Wrapf" && len(n.Args) > 1,
					name == "errhttp.Errorf" && len(n.Args) > 1, name == "errdefs.WithMessage" && len(n.Args) > 1:
					check(name, n.Args[1:])
				case name == "invalid":
					check(name, n.Args)
				}
			case *ast.CompositeLit:
				if name := callName(n.Type); name == "errhttp.HTTPError" || name == "client.Error" {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "Msg" || k.Name == "Message") {
								check(name, []ast.Expr{kv.Value})
							}
						}
					}
				}
			}
			return true
		})
	}
	if checked < 50 {
		t.Fatalf("only %d client messages found: the check reads the wrong files", checked)
	}
}

// callName is "pkg.Name" or "Name" for a called or composite type.
func callName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			return x.Name + "." + e.Sel.Name
		}
	case *ast.StarExpr:
		return callName(e.X)
	}
	return ""
}

// errorText names what in e is an error's text: a call of an Error
// method, or a variable that by its name holds an error.
func errorText(e ast.Expr) string {
	bad := ""
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" && len(n.Args) == 0 {
				bad = "an Error() call"
			}
		case *ast.Ident:
			if l := strings.ToLower(n.Name); l == "err" || l == "cause" || strings.HasSuffix(l, "err") || strings.HasSuffix(n.Name, "Error") {
				bad = "the error " + n.Name
			}
		}
		return bad == ""
	})
	return bad
}
