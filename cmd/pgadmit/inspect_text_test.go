package main

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

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
		[]db.InspectWindowsRow{{ScopeType: "api_key", ScopeKey: odd, Metric: "req\nuests", WindowSeconds: 60, LimitValue: "10", TotalRows: 1}},
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

// Printable text without a space, non-ASCII letters included, is printed as
// it is; text with a space is quoted, so that a cell is one word of its line.
func TestInspectPrintsPlainScopeTextAsItIs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := printInspect(&out,
		[]db.InspectWindowsRow{
			{ScopeType: "api_key", ScopeKey: "équipe:42✓", Metric: "requests", WindowSeconds: 60, TotalRows: 2},
			{ScopeType: "api_key", ScopeKey: "team a", Metric: "requests", WindowSeconds: 60, TotalRows: 2},
		}, nil, nil,
	); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\napi_key:équipe:42✓  requests  1m", "\napi_key:\"team a\"    requests  1m"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not hold %q:\n%s", want, out.String())
		}
	}
}

// A scope key, metric or holder that draws nothing (a variation selector or
// a combining mark alone, a Hangul filler, no text at all) is shown quoted
// with its runes escaped: shown as it is, its cell looked empty, and a
// leading mark combined with the ":" before it.
func TestInspectQuotesTextThatDrawsNothing(t *testing.T) {
	t.Parallel()
	var windows []db.InspectWindowsRow
	for _, key := range []string{"\ufe0f", "\u0301", "\u0301team", "\u3164"} {
		windows = append(windows, db.InspectWindowsRow{ScopeType: "api_key", ScopeKey: key, Metric: "requests", WindowSeconds: 60, TotalRows: 4})
	}
	var out bytes.Buffer
	if err := printInspect(&out, windows, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := printAllotments(&out, []db.InspectAllotmentsRow{
		{Holder: "", ScopeType: "api_key", ScopeKey: "k", Metric: "\u200b", WindowSeconds: 60, Blocks: 1, TotalRows: 1},
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\napi_key:\"\\ufe0f\"      requests  1m",
		"\napi_key:\"\\u0301\"      requests  1m",
		"\napi_key:\"\\u0301team\"  requests  1m",
		"\napi_key:\"\\u3164\"      requests  1m",
		"\napi_key:k  \"\\u200b\"  1m      \"\"",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not hold %q:\n%s", want, out.String())
		}
	}
}

// A scope type that holds a ":" is shown quoted, so that the first ":" that
// is not inside quotes ends the type: type "tier:gold" with key "c" and type
// "tier" with key "gold:c" were both shown tier:gold:c. And --scope takes
// each scope as inspect shows it, quoted parts included, to name that scope
// alone.
func TestInspectScopeTakesWhatInspectShows(t *testing.T) {
	t.Parallel()
	scopes := [][2]string{{"tier:gold", "c"}, {"tier", "gold:c"}, {"api_key", "team a"}, {"tier:gold", "team a"}, {"api_key", "\ufe0f"}, {"api_key", `"k"`}}
	var windows []db.InspectWindowsRow
	for _, sc := range scopes {
		windows = append(windows, db.InspectWindowsRow{ScopeType: sc[0], ScopeKey: sc[1], Metric: "requests", WindowSeconds: 60, TotalRows: int64(len(scopes))})
	}
	var out bytes.Buffer
	if err := printInspect(&out, windows, nil, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	want := []string{`"tier:gold":c`, "tier:gold:c", `api_key:"team a"`, `"tier:gold":"team a"`, `api_key:"\ufe0f"`, `api_key:"\"k\""`}
	for i, sc := range scopes {
		cell, _, _ := strings.Cut(lines[2+i], "  ")
		if cell != want[i] {
			t.Errorf("scope %q, %q shown %q, want %q:\n%s", sc[0], sc[1], cell, want[i], out.String())
		}
		typ, key, err := parseScope(cell)
		if err != nil || typ != sc[0] || key != sc[1] {
			t.Errorf("parseScope(%q) = %q, %q, %v; want %q, %q (the scope inspect showed so)", cell, typ, key, err, sc[0], sc[1])
		}
	}
}

// The columns of every table line up on a terminal whatever the scope keys
// and holders hold: East Asian wide characters (two columns each), combining
// marks (none) or ASCII. text/tabwriter counted runes, so a column after a
// wide key began one terminal column early for each wide character.
func TestInspectLinesUpColumnsOfWideText(t *testing.T) {
	t.Parallel()
	keys := []string{"顧客-東京", "e\u0301quipe", "team-42", "한국"}
	var (
		windows    []db.InspectWindowsRow
		leases     []db.InspectLeasesRow
		admissions []db.InspectAdmissionsRow
		allotments []db.InspectAllotmentsRow
	)
	for i, key := range keys {
		n := int64(len(keys))
		used := strconv.Itoa(i)
		windows = append(windows, db.InspectWindowsRow{ScopeType: "api_key", ScopeKey: key, Metric: "requests", WindowSeconds: 60,
			UsedValue: used, ReservedValue: "0", LimitValue: "10", FreeValue: "10", TotalRows: n})
		leases = append(leases, db.InspectLeasesRow{ScopeType: "model", ScopeKey: key, LiveLeases: int64(i), LiveValue: used, LimitValue: "4", TotalRows: n})
		admissions = append(admissions, db.InspectAdmissionsRow{ScopeType: "queue", ScopeKey: key, Admitted: int64(i), LimitValue: "5", TotalRows: n})
		allotments = append(allotments, db.InspectAllotmentsRow{Holder: "gw-" + key, ScopeType: "api_key", ScopeKey: key, Metric: "tokens", WindowSeconds: 60,
			Blocks: 1, Granted: "100", Consumed: used, TotalRows: n})
	}
	var out bytes.Buffer
	if err := printInspect(&out, windows, leases, admissions); err != nil {
		t.Fatal(err)
	}
	if err := printAllotments(&out, allotments); err != nil {
		t.Fatal(err)
	}
	// Each table is its header line and a line per key; every line of a table
	// has its cells begin at the header's columns.
	lines := strings.Split(out.String(), "\n")
	tables := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "SCOPE ") {
			continue
		}
		tables++
		want := cellColumns(line)
		for _, row := range lines[i+1 : i+1+len(keys)] {
			if got := cellColumns(row); !slices.Equal(got, want) {
				t.Errorf("cells of %q begin at columns %v, its header's at %v:\n%s", row, got, want, out.String())
			}
		}
	}
	if tables != 4 {
		t.Errorf("%d tables, want 4:\n%s", tables, out.String())
	}
}

// cellColumns returns the terminal columns at which the cells of a line of
// inspect begin: after two spaces or more (a header's cell may hold one, as
// "RESET IN"). It counts columns by hand, not by textcell.Width: two for a CJK
// ideograph or Hangul syllable, none for a nonspacing mark, one for another
// rune.
func cellColumns(line string) []int {
	starts := []int{0}
	col, spaces := 0, 0
	for _, r := range line {
		if r != ' ' && spaces >= 2 {
			starts = append(starts, col)
		}
		if r == ' ' {
			spaces++
		} else {
			spaces = 0
		}
		switch {
		case unicode.Is(unicode.Mn, r):
		case r >= 0x3000 && r <= 0x9fff || r >= 0xac00 && r <= 0xd7a3:
			col += 2
		default:
			col++
		}
	}
	return starts
}
