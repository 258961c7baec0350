package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeCLISection is one part of the README's CLI reference: the global flags (before the first
// command's heading), or a command's section; helpArgs shows its --help.
type readmeCLISection struct {
	helpArgs []string // ["--help"] for the global flags, [command, "--help"] for a command
	text     string
}

// readmeCLISections splits the README's CLI reference at its "### `pgadmit COMMAND" headings, the
// global flags first.
func readmeCLISections(t *testing.T) []readmeCLISection {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(readme), "\n## CLI reference\n")
	if !ok {
		t.Fatal("README.md has no CLI reference")
	}
	heading := regexp.MustCompile("(?m)^### `pgadmit ([a-z]+)")
	names := heading.FindAllStringSubmatch(ref, -1)
	var sections []readmeCLISection
	for i, text := range heading.Split(ref, -1) {
		args := []string{"--help"}
		if i > 0 {
			args = []string{names[i-1][1], "--help"}
		}
		sections = append(sections, readmeCLISection{helpArgs: args, text: text})
	}
	return sections
}
