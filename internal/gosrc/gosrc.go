// Package gosrc parses a package's Go source for tests that check what it
// declares (its exported errors, its documented fields).
package gosrc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"iter"
	"path/filepath"
	"strings"
)

// ParseDir parses the non-test Go files of the package in dir, in mode
// (parser.SkipObjectResolution is added), and returns them with their
// file set.
func ParseDir(dir string, mode parser.Mode) (*token.FileSet, []*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, mode|parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, file)
	}
	return fset, files, nil
}

// Specs yields each spec of the general declarations (const, var, type,
// import) of files, with the declaration it is in: its Tok says which kind,
// its Doc holds the comment of a declaration of one spec.
func Specs(files []*ast.File) iter.Seq2[*ast.GenDecl, ast.Spec] {
	return func(yield func(*ast.GenDecl, ast.Spec) bool) {
		for _, file := range files {
			for _, decl := range file.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range gen.Specs {
					if !yield(gen, spec) {
						return
					}
				}
			}
		}
	}
}

// ErrorTypeDocs returns the doc comment of each exported type of the package
// in dir whose name ends in Error, by name.
func ErrorTypeDocs(dir string) (map[string]string, error) {
	_, files, err := ParseDir(dir, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	for gen, spec := range Specs(files) {
		if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.IsExported() && strings.HasSuffix(ts.Name.Name, "Error") {
			docs[ts.Name.Name] = gen.Doc.Text() + ts.Doc.Text()
		}
	}
	return docs, nil
}
