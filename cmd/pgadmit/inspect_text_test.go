package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/db"
)

// A scope key or holder may hold any text but NUL: a newline, a tab, a
// terminal escape. inspect prints each row on one line whatever its text,
// and no control character reaches the terminal raw (they used to: a key
// with a newline split its row in two, a tab shifted its columns, an escape
// sequence recoloured the terminal).
func TestInspectPrintsOddScopeTextOnOneLine(t *testing.T) {
	t.Parallel()
	odd := "evil\nkey\x1b[31mRED\ttab\u202e"
	var out bytes.Buffer
	if err := printInspect(&out,
		[]db.InspectWindowsRow{{ScopeType: "api_key", ScopeKey: odd, Metric: "req\nuests", WindowSeconds: 60, LimitValue: 10, TotalRows: 1}},
		[]db.InspectLeasesRow{{ScopeType: "model", ScopeKey: odd, LiveLeases: 1, TotalRows: 1}},
		[]db.InspectAdmissionsRow{{ScopeType: "queue", ScopeKey: odd, Admitted: 1, TotalRows: 1}},
	); err != nil {
		t.Fatal(err)
	}
	if err := printAllotments(&out, []db.InspectAllotmentsRow{
		{Holder: "host\n1\x1b]0;title\a", ScopeType: "api_key", ScopeKey: odd, Metric: "tokens", WindowSeconds: 60, Blocks: 1, TotalRows: 1},
	}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\a\t\u202e") {
		t.Errorf("control characters printed raw:\n%q", text)
	}
	for _, prefix := range []string{"api_key:", "model:", "queue:"} {
		rows := 0
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, prefix) {
				rows++
				if !strings.Contains(line, `evil\nkey`) {
					t.Errorf("row %q does not show its key escaped", line)
				}
			}
		}
		want := map[string]int{"api_key:": 2, "model:": 1, "queue:": 1}[prefix]
		if rows != want {
			t.Errorf("%d lines begin with %s, want %d (one per row):\n%s", rows, prefix, want, text)
		}
	}
	if !strings.Contains(text, `host\n1`) {
		t.Errorf("holder not shown escaped:\n%s", text)
	}
}

// Printable text, non-ASCII letters included, is printed as it is.
func TestInspectPrintsPlainScopeTextAsItIs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := printInspect(&out,
		[]db.InspectWindowsRow{{ScopeType: "api_key", ScopeKey: "équipe:42 ✓", Metric: "requests", WindowSeconds: 60, TotalRows: 1}}, nil, nil,
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "api_key:équipe:42 ✓  requests") {
		t.Errorf("plain scope not printed as it is:\n%s", out.String())
	}
}
