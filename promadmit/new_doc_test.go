package promadmit_test

import (
	"go/ast"
	"go/parser"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/promadmit"
)

// New's doc names every metric New registers, as NewCombiningCollector's
// names its own: go doc is where a reader looks for what a scrape holds.
func TestNewNamesItsMetrics(t *testing.T) {
	t.Parallel()
	_, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := ""
	for _, file := range files {
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "New" {
				doc = fn.Doc.Text()
			}
		}
	}
	m, err := promadmit.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 64)
	m.Describe(ch)
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	found := 0
	for desc := range ch {
		match := fqName.FindStringSubmatch(desc.String())
		if match == nil {
			t.Fatalf("no name in %s", desc)
		}
		found++
		if !strings.Contains(doc, match[1]+" ") {
			t.Errorf("New's doc does not name %s", match[1])
		}
	}
	if found < 7 {
		t.Errorf("New registers %d metrics, want at least 7", found)
	}
}
