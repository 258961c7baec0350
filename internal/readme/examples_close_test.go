package readme

import (
	"go/ast"
	"strings"
	"testing"
)

// Every Example that makes a Limiter closes it, as Limiter.Close asks of a
// process before it closes its pool: an Example is what a newcomer copies.
// Four made one and closed only the pool.
func TestExamplesCloseTheirLimiters(t *testing.T) {
	t.Parallel()
	found := 0
	for _, f := range exampleFiles(t) {
		for _, decl := range f.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			made, closed := makesAndClosesALimiter(fn.Body)
			if made {
				found++
			}
			if made && !closed {
				t.Errorf("%s: %s makes a Limiter and never calls limiter.Close", f.fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d Examples that make a Limiter, want at least 10", found)
	}
}

// The code sketches of the package comments are copied as Examples are: one
// that makes a Limiter closes it too. The ratelimit package's made one and
// never closed it.
func TestSketchesCloseTheirLimiters(t *testing.T) {
	t.Parallel()
	found := 0
	for _, dir := range examplePackages {
		for _, code := range DocBlocks(t, dir) {
			body := parseBody(code)
			if body == nil {
				continue // not Go (headers, a table)
			}
			made, closed := makesAndClosesALimiter(body)
			if made {
				found++
			}
			if made && !closed {
				t.Errorf("the package comment in %s has a sketch that makes a Limiter and never calls limiter.Close:\n%s", dir, code)
			}
		}
	}
	if found == 0 {
		t.Error("no package comment's sketch makes a Limiter")
	}
}

// makesAndClosesALimiter reports whether node calls ratelimit.New, and
// limiter.Close.
func makesAndClosesALimiter(node ast.Node) (made, closed bool) {
	ast.Inspect(node, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "ratelimit" && sel.Sel.Name == "New" {
				made = true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "limiter" && sel.Sel.Name == "Close" {
				closed = true
			}
		}
		return true
	})
	return made, closed
}
