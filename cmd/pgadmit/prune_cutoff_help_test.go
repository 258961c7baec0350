package main

import (
	"strings"
	"testing"
)

// A short --older-than (1s, as tests and the README's measurement use) is accepted, and releases
// the open reservations of windows that ended just before it, deleting them with their counter in
// the same run: a gateway's Commit still in flight for one reports it StatusUnknown (no error),
// and its actual amount is recorded nowhere. prune's help and docs/cli.md's prune section say so,
// and how long a cutoff must be; they said only that it must be positive.
func TestPruneHelpSaysWhatAShortCutoffDoesToRequestsInFlight(t *testing.T) {
	t.Parallel()
	help := cliOK(t, "prune", "--help")
	var doc string
	for _, s := range cliDocSections(t) {
		if len(s.helpArgs) == 2 && s.helpArgs[0] == "prune" {
			doc = s.text
		}
	}
	if doc == "" {
		t.Fatal("docs/cli.md has no prune section")
	}
	for where, text := range map[string]string{"prune --help": help, "docs/cli.md's prune section": doc} {
		text = strings.Join(strings.Fields(text), " ") // lines wrap anywhere
		for _, want := range []string{"longer than the longest request", "StatusUnknown", "actual amount is recorded nowhere"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", where, want)
			}
		}
	}
}
