package ratelimit_test

import (
	"go/ast"
	"go/parser"
	"regexp"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// Every exported struct type of the package says what each exported field
// holds: the field's comment, or that of the group it follows on the next
// line, names it (as ScopeType, ScopeKey and Metric share one). Scope.Type,
// Lease.ID and others had none; then Task.Kind, Attempt's fields and
// LockOrderError.Op, and Problem.TaskID sat under a comment on Window.
func TestExportedTypesDocumentTheirFields(t *testing.T) {
	t.Parallel()
	fset, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, spec := range gosrc.Specs(files) {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || !ts.Name.IsExported() {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		found++
		group, lastLine := "", 0 // the comment of the previous field's group; where that field ended
		for _, field := range st.Fields.List {
			line := fset.Position(field.Pos()).Line
			switch {
			case field.Doc != nil:
				group = field.Doc.Text()
			case line != lastLine+1:
				group = ""
			}
			text := group + field.Comment.Text()
			lastLine = fset.Position(field.End()).Line
			for _, name := range field.Names {
				if name.IsExported() && !regexp.MustCompile(`\b`+name.Name+`\b`).MatchString(text) {
					t.Errorf("%s.%s has no comment saying what it holds", ts.Name.Name, name.Name)
				}
			}
		}
	}
	if found < 7 { // Scope, Limit, Grant, Reservation, Lease, Settlement, ReservationOutcome at least
		t.Errorf("found %d struct types", found)
	}
}
