package httpadmit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// A scope key is no secret: pgadmit stores it in plain text in its tables, pgadmit inspect and
// doctor show it, a shadow limit's log line and an ExceededError's message name it. The Example
// (which the README shows as code to paste) and the package doc's first lines therefore key an
// API key's scope by a digest of the key, never by the Authorization header's value itself: a
// gateway that copied them wrote every client's credential to the database and its logs.
func TestExamplesKeepCredentialsOutOfScopeKeys(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"example_test.go", "doc.go"} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if file == "doc.go" {
			// The package doc's first code block, made a function body to parse.
			var code strings.Builder
			for line := range strings.Lines(f.Doc.Text()) {
				if strings.HasPrefix(line, "\t") {
					code.WriteString(line)
				} else if code.Len() > 0 {
					break
				}
			}
			if f, err = parser.ParseFile(fset, file, "package p\nfunc _() {\n"+code.String()+"}\n", 0); err != nil {
				t.Fatalf("%s: the package doc's code does not parse: %v", file, err)
			}
		}
		for _, name := range credentialScopeKeys(f) {
			t.Errorf("%s: a scope's Key is %s, the Authorization header's value: key the scope by a digest of it (or your key's id)", file, name)
		}
	}
}

// credentialScopeKeys returns the names of the variables assigned from an Authorization header
// (r.Header.Get("Authorization"), as is or trimmed) that f then uses as a scope's Key.
func credentialScopeKeys(f *ast.File) []string {
	fromHeader := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if !ok || len(a.Lhs) != 1 || len(a.Rhs) != 1 {
			return true
		}
		id, ok := a.Lhs[0].(*ast.Ident)
		if !ok {
			return true
		}
		ast.Inspect(a.Rhs[0], func(m ast.Node) bool {
			if lit, ok := m.(*ast.BasicLit); ok && lit.Value == `"Authorization"` {
				fromHeader[id.Name] = true
			}
			return true
		})
		return true
	})
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Key" {
			if v, ok := kv.Value.(*ast.Ident); ok && fromHeader[v.Name] {
				found = append(found, v.Name)
			}
		}
		return true
	})
	return found
}
