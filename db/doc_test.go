package db_test

import (
	"go/parser"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// go doc shows package db with a doc of its own, and the comments of
// queries/*.sql as they were written: gofmt turns two single quotes (the
// empty string, in SQL) of a generated doc comment into a closing quote
// mark, which read "one row whose kind is ” (and ...".
func TestDocComments(t *testing.T) {
	t.Parallel()
	fset, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	documented := false
	for _, file := range files {
		if file.Doc != nil && strings.HasPrefix(file.Doc.Text(), "Package db ") {
			documented = true
		}
		for _, group := range file.Comments {
			for _, c := range group.List {
				if strings.ContainsAny(c.Text, "“”") {
					t.Errorf("%s: %s: write the empty string as empty in queries/*.sql, not as '' (a quote mark in go doc)", fset.Position(c.Pos()), c.Text)
				}
			}
		}
	}
	if !documented {
		t.Error("package db has no package doc")
	}
}
