package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// examplePackages are the public packages whose Examples and package comments' sketches a
// newcomer copies.
var examplePackages = []string{"../../ratelimit", "../../httpadmit", "../../promadmit", "../../schema"}

// exampleFile is an example*_test.go file of examplePackages, parsed with
// its comments (an Example's output is one), and the package's directory.
type exampleFile struct {
	dir  string
	fset *token.FileSet
	file *ast.File
}

// exampleFiles parses every example*_test.go file of examplePackages.
func exampleFiles(t *testing.T) []exampleFile {
	t.Helper()
	var files []exampleFile
	for _, dir := range examplePackages {
		names, err := filepath.Glob(filepath.Join(dir, "example*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, exampleFile{dir, fset, file})
		}
	}
	return files
}
