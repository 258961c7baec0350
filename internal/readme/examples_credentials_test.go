package readme

import (
	"go/ast"
	"go/types"
	"testing"
)

// A scope key is no secret: pgadmit stores it in plain text in its tables, pgadmit inspect and
// doctor show it, a shadow limit's log line and an ExceededError's message name it. Every
// Example (what go doc shows, and a newcomer copies; the README shows httpadmit's) and every
// sketch of a package comment therefore keys an API key's scope by a digest of the key, never by
// the Authorization header's value itself: a gateway that copied one wrote every client's
// credential to the database and its logs. Only httpadmit's were held to it, and ratelimit's
// ExampleExceededError and promadmit's ExampleNew keyed the scope by the header.
func TestExamplesKeepCredentialsOutOfScopeKeys(t *testing.T) {
	t.Parallel()
	files := exampleFiles(t)
	for _, f := range files {
		for _, key := range credentialScopeKeys(f.file) {
			t.Errorf("%s: a scope's Key is %s, the Authorization header's value: key the scope by a digest of it (or your key's id)", f.fset.Position(key.Pos()), types.ExprString(key))
		}
	}
	for _, dir := range examplePackages {
		for _, code := range DocBlocks(t, dir) {
			body := parseBody(code)
			if body == nil {
				continue // not Go (headers, a table)
			}
			for _, key := range credentialScopeKeys(body) {
				t.Errorf("the package comment in %s: a scope's Key is %s, the Authorization header's value: key the scope by a digest of it (or your key's id):\n%s", dir, types.ExprString(key), code)
			}
		}
	}
	if len(files) < 10 {
		t.Errorf("read %d Example files, want at least 10", len(files))
	}
}

// credentialScopeKeys returns the values of the Key fields in node that are
// the Authorization header's value: a call that reads it
// (r.Header.Get("Authorization"), as is or trimmed), or a variable assigned
// from one.
func credentialScopeKeys(node ast.Node) []ast.Expr {
	fromHeader := map[string]bool{}
	ast.Inspect(node, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if !ok || len(a.Lhs) != 1 || len(a.Rhs) != 1 {
			return true
		}
		if id, ok := a.Lhs[0].(*ast.Ident); ok && readsAuthorization(a.Rhs[0]) {
			fromHeader[id.Name] = true
		}
		return true
	})
	var found []ast.Expr
	ast.Inspect(node, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "Key" {
			return true
		}
		if v, ok := kv.Value.(*ast.Ident); (ok && fromHeader[v.Name]) || (!ok && readsAuthorization(kv.Value)) {
			found = append(found, kv.Value)
		}
		return true
	})
	return found
}

// readsAuthorization reports whether expr names the Authorization header.
func readsAuthorization(expr ast.Expr) bool {
	found := false
	ast.Inspect(expr, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Value == `"Authorization"` {
			found = true
		}
		return !found
	})
	return found
}
