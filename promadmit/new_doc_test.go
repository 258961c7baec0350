package promadmit_test

import (
	"go/ast"
	"go/parser"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// New's doc names every metric New registers, and NewCombiningCollector's
// and NewPoolCollector's every metric of their collectors: go doc is where
// a reader looks for what a scrape holds.
func TestNewNamesItsMetrics(t *testing.T) {
	t.Parallel()
	_, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, file := range files {
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				docs[fn.Name.Name] = fn.Doc.Text()
			}
		}
	}
	m, err := promadmit.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	combining, err := promadmit.NewCombiningCollector(&ratelimit.Limiter{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := promadmit.NewPoolCollector(pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres"))
	if err != nil {
		t.Fatal(err)
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for fn, c := range map[string]prometheus.Collector{"New": m, "NewCombiningCollector": combining, "NewPoolCollector": pool} {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		found := 0
		for desc := range ch {
			match := fqName.FindStringSubmatch(desc.String())
			if match == nil {
				t.Fatalf("no name in %s", desc)
			}
			found++
			if !regexp.MustCompile(`\b` + match[1] + `\b`).MatchString(docs[fn]) {
				t.Errorf("%s's doc does not name %s", fn, match[1])
			}
		}
		if found < 7 {
			t.Errorf("%s's collector has %d metrics, want at least 7", fn, found)
		}
	}
}
