package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A problem is one line whatever text its scope holds: a newline in a scope
// key used to split it, and a terminal escape reached the operator's
// terminal (or the log) raw.
func TestProblemStringIsOneLineWhateverTheScopeText(t *testing.T) {
	t.Parallel()
	p := ratelimit.Problem{
		Kind: ratelimit.ProblemCounterReserved, ScopeType: "api_key", ScopeKey: "evil\nkey\x1b[31mRED\t\u202e", Metric: "requests",
		Expected: 5, Actual: 6,
	}
	for _, s := range []string{p.String(), ratelimit.Report{Problems: []ratelimit.Problem{p}}.String()} {
		if strings.ContainsAny(s, "\x1b\t\u202e") {
			t.Errorf("control characters printed raw: %q", s)
		}
		if !strings.Contains(s, `evil\nkey`) {
			t.Errorf("key not shown escaped: %q", s)
		}
	}
	if s := p.String(); strings.Contains(s, "\n") {
		t.Errorf("problem spans lines: %q", s)
	}
	plain := ratelimit.Problem{Kind: ratelimit.ProblemCounterUsed, ScopeType: "api_key", ScopeKey: "équipe:42", Metric: "tokens",
		Window: time.Hour, WindowStart: time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)}
	if s := plain.String(); !strings.Contains(s, "api_key:équipe:42 tokens") {
		t.Errorf("plain scope not printed as it is: %q", s)
	}
	// The window as an operator writes it, not as Go's 1h0m0s.
	if s := plain.String(); !strings.Contains(s, "window 1h from 2026-12-05T21:00:00Z") {
		t.Errorf("window not written as an operator writes it: %q", s)
	}
	spaced := ratelimit.Problem{Kind: ratelimit.ProblemCounterUsed, ScopeType: "api_key", ScopeKey: "team a", Metric: "tokens"}
	if s := spaced.String(); !strings.Contains(s, `api_key:"team a" tokens:`) {
		t.Errorf("a key with a space not quoted, so its end cannot be told from the metric: %q", s)
	}
	colon := ratelimit.Problem{Kind: ratelimit.ProblemCounterUsed, ScopeType: "tier:gold", ScopeKey: "c", Metric: "tokens"}
	if s := colon.String(); !strings.Contains(s, `"tier:gold":c tokens:`) {
		t.Errorf("a type with a \":\" not quoted, so it reads as type tier with key gold:c: %q", s)
	}
	for key, want := range map[string]string{
		"\ufe0f":     `api_key:"\ufe0f" tokens:`,
		"\u0301team": `api_key:"\u0301team" tokens:`,
		"\u3164":     `api_key:"\u3164" tokens:`,
	} {
		invisible := ratelimit.Problem{Kind: ratelimit.ProblemCounterUsed, ScopeType: "api_key", ScopeKey: key, Metric: "tokens"}
		if s := invisible.String(); !strings.Contains(s, want) {
			t.Errorf("a key %q that draws nothing (or begins with a mark) not quoted and escaped: %q, want it to hold %s", key, s, want)
		}
	}
}
