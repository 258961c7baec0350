package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The commands' help texts are prose, so the defaults they state are written out; this test
// holds them to the values the code uses, so that changing a default without its text fails.
func TestHelpStatesTheDefaultsTheCodeUses(t *testing.T) {
	defaults := []struct {
		name string
		text *regexp.Regexp // its first group is the duration the help states
		want time.Duration
		what string // what it is, in the error
	}{
		{"lock-timeout", regexp.MustCompile(`--lock-timeout\s+\((\S+) by default`), defaultLockTimeout, "--lock-timeout by default"},
		{"lost grace", regexp.MustCompile(`more\s+than\s+(\S+)\s+ago\s+are\s+returned`), ratelimit.DefaultLostAllotmentGrace, "the lost-holder grace"},
		{"end wait", regexp.MustCompile(`waits\s+(\S+)\s+at\s+most\s+for\s+its\s+statement's\s+cancel`), endWait,
			"how long a run cut off waits at most for its statement and lease"},
		{"lease TTL", regexp.MustCompile(`until\s+it\s+expires\s+\((\S+)\s+at\s+most`), ratelimit.DefaultMaintenanceLeaseTTL,
			"how long after its last renewal a run's lease expires"},
	}
	seen := map[string]int{}
	for _, c := range commands() {
		for _, d := range defaults {
			for _, m := range d.text.FindAllStringSubmatch(c.help, -1) {
				seen[d.name]++
				if want := durationtext.Operator(d.want); m[1] != want {
					t.Errorf("%s --help: %s is %s, it says %s", c.name, d.what, want, m[1])
				}
			}
		}
	}
	// Each text is found where it is written today: a rewording that the patterns miss fails
	// here rather than passing with nothing checked.
	if seen["lock-timeout"] != 4 || seen["lost grace"] != 1 || seen["end wait"] != 2 || seen["lease TTL"] != 1 {
		t.Errorf("defaults found in the help texts: %v, want lock-timeout 4, lost grace 1, end wait 2 and lease TTL 1", seen)
	}
}

// Every flag that takes a value names it in --help as the README's CLI reference does (--workers
// N, --every interval, --json file), never by the Go type the flag package falls back to: demo's
// --clients, --instances and --keys, recover's --batch-size and --max-requeues and prune's
// --batch-size showed "int", where bench's like flags and the README say N.
func TestHelpNamesEveryFlagValue(t *testing.T) {
	t.Parallel()
	goType := regexp.MustCompile(`(?m)^  (--[a-z-]+) (int|int64|uint|uint64|float|string|value)$`)
	for _, c := range commands() {
		out := cliOK(t, c.name, "--help")
		for _, m := range goType.FindAllStringSubmatch(out, -1) {
			t.Errorf("pgadmit %s --help: %s takes a value named by its Go type, %q", c.name, m[1], m[2])
		}
	}
}
