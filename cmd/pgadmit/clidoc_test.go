package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// cliDocSection is one part of docs/cli.md, the CLI reference: the global flags (before the first
// command's heading), or a command's section; helpArgs shows its --help.
type cliDocSection struct {
	helpArgs []string // ["--help"] for the global flags, [command, "--help"] for a command
	text     string
}

// cliDoc returns docs/cli.md, the CLI reference, which the README's "CLI reference" links to.
func cliDoc(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(text), "# CLI reference\n") {
		t.Fatal("docs/cli.md does not start with its title, # CLI reference")
	}
	return string(text)
}

// cliDocSections splits docs/cli.md at its "## `pgadmit COMMAND" headings, the global flags first.
func cliDocSections(t *testing.T) []cliDocSection {
	t.Helper()
	ref := cliDoc(t)
	heading := regexp.MustCompile("(?m)^## `pgadmit ([a-z]+)")
	names := heading.FindAllStringSubmatch(ref, -1)
	var sections []cliDocSection
	for i, text := range heading.Split(ref, -1) {
		args := []string{"--help"}
		if i > 0 {
			args = []string{names[i-1][1], "--help"}
		}
		sections = append(sections, cliDocSection{helpArgs: args, text: text})
	}
	return sections
}
