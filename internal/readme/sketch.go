package readme

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// DocBlock returns the code block of the package comment of the package in
// dir that starts with first, as go doc shows it (without the comment's tab);
// it fails t when there is none.
func DocBlock(t testing.TB, dir, first string) string {
	t.Helper()
	for _, code := range DocBlocks(t, dir) {
		if strings.HasPrefix(code, first) {
			return code
		}
	}
	t.Fatalf("the package comment in %s has no code block starting %q", dir, first)
	return ""
}

// DocBlocks returns every code block of the package comment of the package
// in dir, as go doc shows them.
func DocBlocks(t testing.TB, dir string) []string {
	t.Helper()
	_, files, err := gosrc.ParseDir(dir, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, file := range files {
		if file.Doc != nil {
			blocks = append(blocks, codeBlocks(file.Doc.Text())...)
		}
	}
	return blocks
}

// FuncDocBlocks returns the code blocks of the doc comments of the functions
// and methods of the package in dir, as go doc shows them, by name: "New",
// or "RecoveryResult.Describe" for a method (of the type or its pointer).
// Those without one are left out.
func FuncDocBlocks(t testing.TB, dir string) map[string][]string {
	t.Helper()
	_, files, err := gosrc.ParseDir(dir, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{}
	for _, file := range files {
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Doc == nil {
				continue
			}
			if code := codeBlocks(fn.Doc.Text()); len(code) > 0 {
				blocks[funcName(fn)] = code
			}
		}
	}
	return blocks
}

// funcName is fn's name as go doc gives it: a method's is its receiver's
// type, without * or type parameters, a dot, and its own.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	switch generic := recv.(type) {
	case *ast.IndexExpr:
		recv = generic.X
	case *ast.IndexListExpr:
		recv = generic.X
	}
	return types.ExprString(recv) + "." + fn.Name.Name
}

// codeBlocks returns the code blocks of doc, a doc comment's text.
func codeBlocks(doc string) []string {
	var p comment.Parser
	var blocks []string
	for _, block := range p.Parse(doc).Content {
		if code, ok := block.(*comment.Code); ok {
			blocks = append(blocks, code.Text)
		}
	}
	return blocks
}

// Vet compiles and vets src, a main package of one file, with the go
// command run in the calling test's directory, so that its imports resolve
// in this module (pgadmit's own packages and go.mod's requirements), and
// fails t with what the go command reports.
func Vet(t testing.TB, src string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "vet", file).CombinedOutput(); err != nil {
		t.Errorf("go vet: %v\n%s\nof:\n%s", err, out, numbered(src))
	}
}

// numbered returns src with line numbers, as the go command's messages
// name them.
func numbered(src string) string {
	var b strings.Builder
	for i, line := range strings.SplitAfter(src, "\n") {
		if line != "" {
			fmt.Fprintf(&b, "%3d  %s", i+1, line)
		}
	}
	return b.String()
}
