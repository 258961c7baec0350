package readme

import (
	"go/doc"
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
	outputs := exampleOutputs(exampleFiles(t))
	for _, dir := range examplePackages {
		for name, blocks := range FuncDocBlocks(t, dir) {
			if !saysItsOutput(name) {
				continue
			}
			for _, block := range blocks {
				found++
				if !slices.Contains(outputs[dir][name], strings.TrimSpace(block)) {
					t.Errorf("%s: %s's doc shows\n%s\nwhich is not the output of an Example of it; they print:\n%s",
						dir, name, block, strings.Join(outputs[dir][name], "\n--\n"))
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

// exampleOutputs returns the outputs (trimmed) of the Examples of files that
// have one, by package directory and then by what they exemplify, as
// FuncDocBlocks names it: ExampleRecoveryResult_Describe's and
// ExampleRecoveryResult_Describe_cut's under "RecoveryResult.Describe".
func exampleOutputs(files []exampleFile) map[string]map[string][]string {
	outputs := map[string]map[string][]string{}
	for _, f := range files {
		for _, ex := range doc.Examples(f.file) {
			if ex.Output == "" {
				continue
			}
			if outputs[f.dir] == nil {
				outputs[f.dir] = map[string][]string{}
			}
			item := strings.Replace(strings.TrimSuffix(ex.Name, "_"+ex.Suffix), "_", ".", 1)
			outputs[f.dir][item] = append(outputs[f.dir][item], strings.TrimSpace(ex.Output))
		}
	}
	return outputs
}
