package httpadmit_test

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/readme"
)

// The README shows the middleware's example as code to paste: it must stay
// the body of Example, line for line (one tab less), which runs in the
// tests, so that what is pasted is what was run.
func TestReadmeShowsTheRunnableExample(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "", "limiter := ratelimit.New(pool)\ndefer limiter.Close()")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), readme.Indent(block)) {
		t.Fatalf("the README's middleware example is not the body of Example in httpadmit/example_test.go:\n%s", block)
	}
}

// The README's middleware example starts from a pool (its first line is
// limiter := ratelimit.New(pool)) and shows no imports: pasted where pool
// is, under the imports of the Example it is copied from, it must name
// nothing else that Example declared before it.
func TestReadmeExampleNeedsOnlyAPool(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "", "limiter := ratelimit.New(pool)\ndefer limiter.Close()")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	given := map[string]bool{"pool": true}
	for _, name := range readme.ImportNames(t, string(example)) {
		given[name] = true
	}
	for _, name := range readme.FreeNames(t, block) {
		if !given[name] {
			t.Errorf("the README's middleware example uses %s, which it neither declares nor imports, and which is not pool", name)
		}
	}
}

// The README says, just before the middleware's example, which packages it
// imports, so that it can be pasted into a main package as it stands: the
// list (backquoted import paths between "it imports " and the next ";")
// must name exactly the packages the block uses.
func TestReadmeExampleNamesItsImports(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "", "limiter := ratelimit.New(pool)\ndefer limiter.Close()")
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := strings.Cut(string(text), "```go\n"+block)
	_, list, ok := strings.Cut(before[max(0, len(before)-1500):], "it imports ")
	list, _, ok2 := strings.Cut(list, ";")
	if !ok || !ok2 {
		t.Fatalf("the README does not say, before the middleware's example, \"it imports ...;\"")
	}
	listed := map[string]bool{}
	for i, part := range strings.Split(list, "`") {
		if i%2 == 1 {
			listed[path.Base(part)] = true
		}
	}
	for _, name := range readme.FreeNames(t, block) {
		if name == "pool" {
			continue
		}
		if !listed[name] {
			t.Errorf("the README's middleware example uses package %s, which the list of its imports leaves out", name)
		}
		delete(listed, name)
	}
	for name := range listed {
		t.Errorf("the README lists %s among the middleware example's imports, which the example does not use", name)
	}
}
