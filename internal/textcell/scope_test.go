package textcell_test

import (
	"testing"

	"github.com/pgadmit/pgadmit/internal/textcell"
)

// A scope shows its type quoted when the type holds a ":", so that the first
// ":" outside quotes is where the type ends: type "a:b" with key "c" and
// type "a" with key "b:c" used to show alike, a:b:c.
func TestScopeQuotesATypeThatHoldsAColon(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ typ, key, want string }{
		{"api_key", "team-42", "api_key:team-42"},
		{"a:b", "c", `"a:b":c`},
		{"a", "b:c", "a:b:c"},
		{"a:", "b", `"a:":b`},
		{"api_key", "team a", `api_key:"team a"`},
		{"tier gold", "k", `"tier gold":k`},
		{"tier:gold", "team a", `"tier:gold":"team a"`},
		{"api_key", "\ufe0f", `api_key:"\ufe0f"`},
		{"api_key", `"k"`, `api_key:"\"k\""`},
	} {
		if got := textcell.Scope(c.typ, c.key); got != c.want {
			t.Errorf("Scope(%q, %q) = %q, want %q", c.typ, c.key, got, c.want)
		}
	}
}

// ParseScope reads back every scope Scope shows, whatever its type and key
// hold: a ":", a quote, a space, a mark, a control character, invalid UTF-8.
func TestParseScopeReadsWhatScopeShows(t *testing.T) {
	t.Parallel()
	texts := []string{"api_key", "team-42", "a:b", ":", "a:", ":b", `"`, `"a"`, `"a:b":c`, `a"b`, "team a", " ", "",
		"\ufe0f", "\u0301x", "e\u0301", "\u3164", "evil\nkey", "\x1b[31m", "\xff", `\`, `\"`, "東京:本社", "\u2764\ufe0f",
		"team\u034f", "a\ufe0f", "\u2764\ufe0f\ufe0f", "\u845b\U000e0100"}
	for _, typ := range texts {
		for _, key := range texts {
			shown := textcell.Scope(typ, key)
			gotType, gotKey, ok := textcell.ParseScope(shown)
			if !ok || gotType != typ || gotKey != key {
				t.Errorf("ParseScope(%q) = %q, %q, %t; want %q, %q, true (what Scope showed)", shown, gotType, gotKey, ok, typ, key)
			}
		}
	}
}

// An operator types a plain scope as it is, and quotes a part as inspect
// shows it; text that begins with a quote but is not one quoted string, or
// that has no ":" after its type, is no scope.
func TestParseScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in       string
		typ, key string
		ok       bool
	}{
		{"api_key:team-42", "api_key", "team-42", true},
		{"api_key:équipe:42", "api_key", "équipe:42", true},
		{"a:b:c", "a", "b:c", true},
		{`"a:b":c`, "a:b", "c", true},
		{`api_key:"team a"`, "api_key", "team a", true},
		{`"tier:gold":"team a"`, "tier:gold", "team a", true},
		{`api_key:"\ufe0f"`, "api_key", "\ufe0f", true},
		{`api_key:a"b`, "api_key", `a"b`, true},
		{":k", "", "k", true},
		{"api_key:", "api_key", "", true},
		{"api_key", "", "", false},
		{"", "", "", false},
		{`"a:b"`, "", "", false},
		{`"a:b"c`, "", "", false},
		{`"a:b`, "", "", false},
		{`api_key:"team`, "", "", false},
		{`api_key:"team"a`, "", "", false},
		{`api_key:"a" "b"`, "", "", false},
	} {
		typ, key, ok := textcell.ParseScope(c.in)
		if typ != c.typ || key != c.key || ok != c.ok {
			t.Errorf("ParseScope(%q) = %q, %q, %t; want %q, %q, %t", c.in, typ, key, ok, c.typ, c.key, c.ok)
		}
	}
}
