package ratelimit_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/readme"
)

// The README's first Go block is code to paste: its imports, then what
// main's body would hold. The body must stay the body of Example_quickstart,
// line for line (one tab less), which runs in the tests, so that what is
// pasted is what was run; and the imports must be exactly the packages the
// body names, so that pasted under them it compiles.
func TestReadmeShowsTheRunnableQuickstart(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "## Use it from Go\n\n", "import (\n")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	imports, body, ok := strings.Cut(block, "\n)\n\n")
	if !ok {
		t.Fatalf("the README's quickstart does not start with an import block followed by a blank line:\n%s", block)
	}
	imports += "\n)\n"
	if !strings.Contains(string(example), readme.Indent(body)) {
		t.Fatalf("the README's quickstart is not the body of Example_quickstart in ratelimit/example_test.go:\n%s", body)
	}

	for _, problem := range pasteProblems(imports, body) {
		t.Errorf("the README's quickstart, pasted as a main function under its imports: %s", problem)
	}
}

// pasteProblems parses imports and body as a program whose main holds body,
// and says what would keep it from compiling that the body's being an
// Example's body does not already rule out: a name the body uses that it
// neither declares nor imports, and an import it does not use.
func pasteProblems(imports, body string) []string {
	src := "package main\n\n" + imports + "\nfunc main() {\n" + body + "}\n"
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "main.go", src, parser.AllErrors)
	if err != nil {
		return []string{err.Error()}
	}
	imported := map[string]string{} // name -> path
	for _, spec := range file.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return []string{err.Error()}
		}
		name := path.Base(p)
		if spec.Name != nil {
			name = spec.Name.Name
		}
		imported[name] = p
	}
	var problems []string
	used := map[string]bool{}
	for _, ident := range file.Unresolved {
		switch {
		case imported[ident.Name] != "":
			used[ident.Name] = true
		case types.Universe.Lookup(ident.Name) == nil:
			problems = append(problems, fmt.Sprintf("%s: %s is neither declared nor imported", fset.Position(ident.Pos()), ident.Name))
		}
	}
	for name, p := range imported {
		if !used[name] {
			problems = append(problems, fmt.Sprintf("%q is imported and not used", p))
		}
	}
	sort.Strings(problems)
	return problems
}

// The README's Tasks section shows the task flow: a run of lines of
// ExampleLimiter_CreateTask, from the gateway creating a task to its
// output, line for line (one tab less), so that what is shown is what was
// run. It reuses the quickstart's ctx and limiter, so it is not checked as
// a program of its own.
func TestReadmeShowsTheRunnableTaskFlow(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "", "// The gateway: one unfinished task at a time for this key.\n")
	example, err := os.ReadFile("example_task_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), readme.Indent(block)) {
		t.Fatalf("the README's task flow is not a run of lines of ExampleLimiter_CreateTask in ratelimit/example_task_test.go:\n%s", block)
	}
}

// The README says what its task flow needs from around it: ctx and limiter
// as the quickstart has them, the quickstart's imports and encoding/json.
// The block must name nothing else (a variable the example declared before
// it, say), so that pasted where those are it compiles.
func TestReadmeTaskFlowNeedsOnlyWhatTheReadmeSays(t *testing.T) {
	t.Parallel()
	quickstart := readme.Block(t, "../README.md", "## Use it from Go\n\n", "import (\n")
	flow := readme.Block(t, "../README.md", "", "// The gateway: one unfinished task at a time for this key.\n")
	given := map[string]bool{"ctx": true, "limiter": true, "json": true}
	for _, name := range readme.ImportNames(t, quickstart) {
		given[name] = true
	}
	for _, name := range readme.FreeNames(t, flow) {
		if !given[name] {
			t.Errorf("the README's task flow uses %s, which it neither declares nor says it needs (ctx, limiter, the quickstart's imports and encoding/json)", name)
		}
	}
}
