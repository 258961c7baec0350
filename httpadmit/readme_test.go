package httpadmit_test

import (
	"os"
	"strings"
	"testing"
)

// The README shows the middleware's example as code to paste: it must stay
// the body of Example, line for line (one tab less), which runs in the
// tests, so that what is pasted is what was run.
func TestReadmeShowsTheRunnableExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const start = "```go\nlimiter := ratelimit.New(pool)\n\n// What a request must fit"
	at := strings.Index(string(readme), start)
	if at < 0 {
		t.Fatalf("README.md has no Go block starting %q", start)
	}
	block := string(readme[at+len("```go\n"):])
	block = block[:strings.Index(block, "```")]
	var indented strings.Builder
	for _, line := range strings.SplitAfter(block, "\n") {
		if strings.TrimSpace(line) != "" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	if !strings.Contains(string(example), indented.String()) {
		t.Fatalf("the README's middleware example is not the body of Example in httpadmit/example_test.go:\n%s", block)
	}
}
