package httpadmit_test

import (
	"go/ast"
	"go/parser"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// Every exported error type says, in its own doc, how a caller finds it,
// as ratelimit's do: with errors.As, or errors.Is with its sentinel.
// UnavailableError left it to its Is method, which go doc shows apart.
func TestErrorTypesSayHowToMatchThem(t *testing.T) {
	t.Parallel()
	_, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for gen, spec := range gosrc.Specs(files) {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || !ts.Name.IsExported() || !strings.HasSuffix(ts.Name.Name, "Error") {
			continue
		}
		found++
		doc := gen.Doc.Text() + ts.Doc.Text()
		if !strings.Contains(doc, "errors.As") {
			t.Errorf("the doc of %s does not say to find it with errors.As:\n%s", ts.Name.Name, doc)
		}
	}
	if found < 1 {
		t.Errorf("found no exported error type, want UnavailableError")
	}
}
