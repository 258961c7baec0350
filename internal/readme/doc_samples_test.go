package readme

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The doc of a String, Describe or Error method that shows what it says (a
// code block: the line as it reads) shows the output of one of its Examples,
// word for word: a change of wording then fails the Example, or this test
// until the doc follows. RecoveryResult.Describe's and PruneResult.Describe's
// samples were checked by nothing (the same lines in a test were no check
// of the doc).
func TestDocSamplesAreExampleOutputs(t *testing.T) {
	t.Parallel()
	found := 0
	for _, dir := range examplePackages {
		outputs := exampleOutputs(t, dir)
		for name, blocks := range FuncDocBlocks(t, dir) {
			if !saysItsOutput(name) {
				continue
			}
			for _, block := range blocks {
				found++
				if !slices.Contains(outputs[name], strings.TrimSpace(block)) {
					t.Errorf("%s: %s's doc shows\n%s\nwhich is not the output of an Example of it; they print:\n%s",
						dir, name, block, strings.Join(outputs[name], "\n--\n"))
				}
			}
		}
	}
	if found < 2 {
		t.Errorf("found %d samples in the docs of String, Describe and Error methods, want at least 2", found)
	}
}

// saysItsOutput reports whether the function named name (FuncDocBlocks) is a
// method whose result is a text for people: a sample in its doc is that
// text.
func saysItsOutput(name string) bool {
	_, method, ok := strings.Cut(name, ".")
	return ok && (method == "String" || method == "Describe" || method == "Error")
}

// exampleOutputs returns the outputs (trimmed) of the Examples with one in
// the test files of the package in dir, by what they exemplify, as
// FuncDocBlocks names it: ExampleRecoveryResult_Describe's and
// ExampleRecoveryResult_Describe_cut's under "RecoveryResult.Describe".
func exampleOutputs(t *testing.T, dir string) map[string][]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	outputs := map[string][]string{}
	for _, ex := range doc.Examples(files...) {
		if ex.Output == "" {
			continue
		}
		item := strings.Replace(strings.TrimSuffix(ex.Name, "_"+ex.Suffix), "_", ".", 1)
		outputs[item] = append(outputs[item], strings.TrimSpace(ex.Output))
	}
	return outputs
}
