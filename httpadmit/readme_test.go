package httpadmit_test

import (
	"os"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/readme"
)

// The README shows the middleware's example as code to paste: it must stay
// the body of Example, line for line (one tab less), which runs in the
// tests, so that what is pasted is what was run.
func TestReadmeShowsTheRunnableExample(t *testing.T) {
	t.Parallel()
	block := readme.Block(t, "../README.md", "", "limiter := ratelimit.New(pool)\n\n// What a request must fit")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), readme.Indent(block)) {
		t.Fatalf("the README's middleware example is not the body of Example in httpadmit/example_test.go:\n%s", block)
	}
}
