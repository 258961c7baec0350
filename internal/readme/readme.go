// Package readme reads the Go blocks of the repository's README.md and the
// code sketches of package comments, for the tests that hold them to the
// runnable examples they are copied from or compile them as pasted, and the
// prose of its Markdown docs, for the tests of their links and commands.
package readme

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Block returns the code of the Go block in the README at path that follows
// after (text just before its opening fence, "" for any) and starts with
// first, up to its closing fence; it fails t when there is none.
func Block(t testing.TB, path, after, first string) string {
	t.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := after + "```go\n" + first
	at := strings.Index(string(readme), start)
	if at < 0 {
		t.Fatalf("%s has no Go block starting %q", path, start)
	}
	block := string(readme[at+len(after)+len("```go\n"):])
	return block[:strings.Index(block, "```")]
}

// Indent returns code one tab deeper, as the body of a function holds it:
// every line but the blank ones gets a tab.
func Indent(code string) string {
	var indented strings.Builder
	for _, line := range strings.SplitAfter(code, "\n") {
		if strings.TrimSpace(line) != "" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	return indented.String()
}

// fencedBlock matches a fenced code block (its fence may be indented, as in a list item).
var fencedBlock = regexp.MustCompile("(?ms)^ *```.*?^ *```[^\n]*$")

// Prose returns a Markdown text without its fenced code blocks: what the tests that read the
// docs' links, headings and code spans look in.
func Prose(markdown string) string {
	return fencedBlock.ReplaceAllString(markdown, "")
}
