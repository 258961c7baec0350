package readme

import (
	"fmt"
	"go/doc/comment"
	"go/parser"
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
	var p comment.Parser
	var blocks []string
	for _, file := range files {
		if file.Doc == nil {
			continue
		}
		for _, block := range p.Parse(file.Doc.Text()).Content {
			if code, ok := block.(*comment.Code); ok {
				blocks = append(blocks, code.Text)
			}
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
