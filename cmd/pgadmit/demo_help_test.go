package main

import (
	"strings"
	"testing"
)

// demo --help gives the defaults and ranges the README gives, the ones --http changes
// included: it used to say 20s and 150 keys, which --http runs with 10s and 20.
func TestDemoHelpSaysTheDefaultsOfHTTP(t *testing.T) {
	t.Parallel()
	out := cliOK(t, "demo", "--help")
	for flag, want := range map[string]string{
		"--duration":         "5s to 10m (the crash comes at about a third) (default 20s; 10s with --http)",
		"--instances":        "2 to 16",
		"--clients":          "1 to 64 (default 12)",
		"--keys":             "2 to 1000000 (default 150; 20 with --http)",
		"--decision-timeout": "1ms to 1m (default 500ms)",
	} {
		_, after, ok := strings.Cut(out, "\n  "+flag+" ")
		if !ok {
			t.Errorf("demo --help has no %s:\n%s", flag, out)
			continue
		}
		lines := strings.SplitN(after, "\n", 3)
		if len(lines) < 2 || !strings.Contains(lines[1], want) {
			t.Errorf("demo --help of %s: %q, want it to say %q", flag, lines, want)
		}
	}
}

// A flag whose zero value means "off" (recover --every, bench --think) shows no default, as
// a zero count does; it used to show "(default 0s)".
func TestHelpShowsNoZeroDurationDefault(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if out := cliOK(t, c.name, "--help"); strings.Contains(out, "(default 0s)") {
			t.Errorf("pgadmit %s --help shows a zero duration as a default:\n%s", c.name, out)
		}
	}
}
