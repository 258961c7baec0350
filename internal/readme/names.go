package readme

import (
	"go/parser"
	"go/token"
	"go/types"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FreeNames returns the names that code, the body of a function, uses
// without declaring them, predeclared ones (nil, len, ...) aside: the
// variables and packages it needs from around it, sorted, each once.
func FreeNames(t testing.TB, code string) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "block.go", "package p\n\nfunc _() {\n"+code+"}\n", parser.AllErrors)
	if err != nil {
		t.Fatalf("parsing a README block as a function body: %v", err)
	}
	var names []string
	for _, ident := range file.Unresolved {
		if types.Universe.Lookup(ident.Name) == nil {
			names = append(names, ident.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// ImportNames returns the names under which the imports that src starts
// with (a Go file, or import declarations and whatever follows them) bring
// their packages in.
func ImportNames(t testing.TB, src string) []string {
	t.Helper()
	if !strings.HasPrefix(src, "package ") {
		src = "package p\n\n" + src
	}
	file, err := parser.ParseFile(token.NewFileSet(), "imports.go", src, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("parsing imports: %v", err)
	}
	var names []string
	for _, spec := range file.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		name := path.Base(p)
		if isMajorVersion(name) { // github.com/jackc/pgx/v5 is package pgx
			name = path.Base(path.Dir(p))
		}
		if spec.Name != nil {
			name = spec.Name.Name
		}
		names = append(names, name)
	}
	return names
}

// isMajorVersion reports whether elem, an import path's last element, is a
// module's major version suffix (v2, v5, ...), which names no package.
func isMajorVersion(elem string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(elem, "v"))
	return strings.HasPrefix(elem, "v") && err == nil && n >= 2
}
