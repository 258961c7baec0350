package ratelimit_test

import (
	"go/ast"
	"go/parser"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// The types a caller builds limits from and gets grants and settlements
// back in say what each exported field holds: every field has a comment,
// or follows, on the next line, one of a group that has (as ScopeType,
// ScopeKey and Metric share one). Scope.Type, Lease.ID and others had none.
func TestGrantTypesDocumentTheirFields(t *testing.T) {
	t.Parallel()
	types := map[string]bool{"Scope": true, "Limit": true, "Grant": true, "Reservation": true,
		"Lease": true, "Settlement": true, "ReservationOutcome": true}
	fset, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || !types[spec.Name.Name] {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok {
				return true
			}
			found++
			grouped, lastLine := false, 0 // the previous field's group has a comment; where it ended
			for _, field := range st.Fields.List {
				line := fset.Position(field.Pos()).Line
				grouped = field.Doc != nil || (grouped && line == lastLine+1)
				lastLine = fset.Position(field.End()).Line
				for _, name := range field.Names {
					if name.IsExported() && !grouped {
						t.Errorf("%s.%s has no comment saying what it holds", spec.Name.Name, name.Name)
					}
				}
			}
			return false
		})
	}
	if found != len(types) {
		t.Errorf("found %d of the %d types", found, len(types))
	}
}
