package db_test

import (
	"go/ast"
	"go/parser"
	"os"
	"path/filepath"
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

// Each query method's doc is the comment under its "-- name:" line, and
// nothing else. sqlc gives a statement every comment line of its text, which
// runs from the previous statement's semicolon (the start of the file, for
// the first) to its own: a file's opening comment went into the doc of the
// file's first query (PruneCutoff's doc began "Retention: deletes history
// older than a cutoff"), as would a comment between two queries. A file's
// overview therefore sits after its last statement, where no statement
// takes it.
func TestQueryDocsAreTheirOwnComments(t *testing.T) {
	t.Parallel()
	want := map[string]string{} // query name -> its comment, as go doc shows it
	for _, glob := range []string{"../queries/*.sql", "../queries/dbtest/*.sql"} {
		names, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(src), "\n")
			for i := 0; i < len(lines); i++ {
				query, ok := strings.CutPrefix(lines[i], "-- name: ")
				if !ok {
					continue
				}
				query, _, _ = strings.Cut(query, " ")
				var doc []string
				for i++; i < len(lines) && strings.HasPrefix(lines[i], "--"); i++ {
					doc = append(doc, strings.TrimPrefix(strings.TrimPrefix(lines[i], "--"), " "))
				}
				want[query] = normalizeDoc(strings.Join(doc, "\n"))
			}
		}
	}
	found := 0
	for _, dir := range []string{".", "../internal/dbtest"} {
		_, files, err := gosrc.ParseDir(dir, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv == nil {
					continue
				}
				doc, ok := want[fn.Name.Name]
				if !ok {
					continue
				}
				found++
				if got := normalizeDoc(fn.Doc.Text()); got != doc {
					t.Errorf("%s/%s's doc is not the comment under its \"-- name:\" line:\n%s\nwant:\n%s", dir, fn.Name.Name, fn.Doc.Text(), doc)
				}
			}
		}
	}
	if found != len(want) || found < 100 {
		t.Errorf("found %d query methods of the %d queries", found, len(want))
	}
}

// normalizeDoc is s with every run of white space one space: gofmt
// reindents the lines of a generated doc comment (an indented list becomes a
// code block), and go/ast's CommentGroup.Text drops blank lines at either
// end.
func normalizeDoc(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
