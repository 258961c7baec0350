package textcell_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"unicode"

	"github.com/pgadmit/pgadmit/internal/textcell"
)

func TestShow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"team-42", "team-42"},
		{"東京", "東京"},
		{"a b", `"a b"`},
		{"team a", `"team a"`},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
		{"équipe:42 ✓", `"équipe:42 ✓"`},
		{"équipe:42✓", "équipe:42✓"},
		{"東京 本社", `"東京 本社"`},
		{"evil\nkey", `"evil\nkey"`},
		{"tab\there", `"tab\there"`},
		{"\x1b[31mred", `"\x1b[31mred"`},
		{"rtl\u202e", `"rtl\u202e"`},
		{"nbsp\u00a0", `"nbsp\u00a0"`},
		{"\xff", `"\xff"`},
		{`"quoted"`, `"\"quoted\""`},
		{`mid"quote`, `mid"quote`},
		// Text that draws nothing is quoted, its invisible runes escaped: shown as
		// it is, it looked like an empty cell (or no key after "api_key:").
		{"", `""`},
		{" ", `" "`},
		{"\ufe0f", `"\ufe0f"`},             // a variation selector alone
		{"\u200b", `"\u200b"`},             // a zero-width space
		{"\u0301", `"\u0301"`},             // a combining mark alone
		{"\u20dd", `"\u20dd"`},             // an enclosing mark alone
		{"\u0301\u0302", `"\u0301\u0302"`}, // marks alone
		// A leading mark would combine with what is before the cell (the ":" of
		// api_key:), a mark after a space or an escape with that.
		{"\u0301team", `"\u0301team"`},
		{"a \u0301b", `"a \u0301b"`},
		{"\n\u0301", `"\n\u0301"`},
		// A mark after its base stays as it is, quoted or not.
		{"e\u0301quipe", "e\u0301quipe"},
		{"e\u0301quipe a", "\"e\u0301quipe a\""},
		{"\u2764\ufe0f", "\u2764\ufe0f"},   // an emoji with its presentation selector
		{"\u2764\ufe0e", "\u2764\ufe0e"},   // the same, text presentation
		{"#\ufe0f\u20e3", "#\ufe0f\u20e3"}, // a keycap
		{"\u203c\ufe0f", "\u203c\ufe0f"},   // a double exclamation mark, emoji presentation
		// A mark that draws nothing after its base (a variation selector where
		// it selects nothing, a combining grapheme joiner, a Mongolian free
		// variation selector, an ideographic variation selector) is escaped:
		// as it is, "team\u034f" looked like "team".
		{"team\u034f", `"team\u034f"`},
		{"team\ufe0f", `"team\ufe0f"`},
		{"team\ufe0e", `"team\ufe0e"`},
		{"team\ufe00", `"team\ufe00"`},
		{"\u2764\ufe0f\ufe0f", "\"\u2764\ufe0f\\ufe0f\""}, // a second selector
		{"\u1820\u180b", "\"\u1820\\u180b\""},
		{"\u845b\U000e0100", "\"\u845b\\U000e0100\""},
		{"\u17b4", `"\u17b4"`},
		// Hangul fillers and the Braille blank are letters and symbols that draw
		// nothing: quoted and escaped as a space is.
		{"\u3164", `"\u3164"`},
		{"team\u3164", `"team\u3164"`},
		{"\u115f\u1160", `"\u115f\u1160"`},
		{"\uffa0", `"\uffa0"`},
		{"\u2800", `"\u2800"`},
	} {
		if got := textcell.Show(c.in); got != c.want {
			t.Errorf("Show(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWidth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"team-42", 7},
		{"équipe", 6},       // é precomposed
		{"e\u0301quipe", 6}, // e and a combining acute accent
		{"a\u20dd", 1},      // an enclosing circle
		{"東京", 4},           // CJK ideographs
		{"顧客-東京", 9},        // wide, narrow, wide
		{"カタカナ", 8},         // katakana
		{"ｶﾀｶﾅ", 4},         // halfwidth katakana
		{"한국", 4},           // Hangul syllables
		{"ＡＢ", 4},           // fullwidth Latin
		{"✓", 1},            // a narrow symbol
		{"👍", 2},            // an emoji
		{"\U00020000", 2},   // CJK Extension B, beyond the BMP
		{`"a\n東"`, 7},       // Go-quoted, as Show returns it
		{"Ω≈ç√∫", 5},        // neutral and ambiguous count one
		{"\ufe0f", 0},       // a variation selector, with no character before it
		// A character followed by U+FE0F, emoji presentation, is drawn as an
		// emoji, two columns wide, by most terminals.
		{"\u2764\ufe0f", 2},             // a red heart
		{"\u2764", 1},                   // a heavy black heart, text presentation
		{"\u2764\ufe0e", 1},             // the same, text presentation asked for
		{"\u263a\ufe0f", 2},             // a smiling face
		{"#\ufe0f\u20e3", 2},            // a keycap: the enclosing keycap adds nothing
		{"\U0001F44D\ufe0f", 2},         // an emoji wide already stays two
		{"\u2764\ufe0f\ufe0f", 2},       // a second selector adds nothing
		{"a\u2764\ufe0fb", 4},           // narrow, emoji, narrow
		{"\u2764\ufe0f\u2764\ufe0f", 4}, // two emoji
		{"team\ufe0f", 4},               // a letter has no emoji presentation
		{"1\ufe0f", 2},                  // a digit has, as a keycap's base
		{"\uff61", 1},                   // halfwidth ideographic full stop
		{"\u115f\u1160", 3},             // a wide Hangul choseong filler, then a narrow jungseong one
	} {
		if got := textcell.Width(c.in); got != c.want {
			t.Errorf("Width(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// An emoji made of several runes (a grapheme cluster: a skin tone, a flag,
// a ZWJ sequence, a subdivision flag's tags) is one emoji, two columns, as
// terminals that draw it as one do; counted rune by rune it took up to 8.
func TestWidthOfEmojiSequences(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{"\U0001F44D\U0001F3FD", 2},                                                   // thumbs up, medium skin tone
		{"\U0001F44B\U0001F3FBx", 3},                                                  // waving hand, light skin tone, then x
		{"\u261D\U0001F3FD", 2},                                                       // a narrow pictograph made an emoji by its skin tone
		{"a\U0001F3FD", 3},                                                            // a letter and a skin tone swatch apart
		{"\U0001F3FD", 2},                                                             // a skin tone swatch alone
		{"\U0001F3FD\U0001F3FD", 4},                                                   // two swatches
		{"\U0001F1EB\U0001F1F7", 2},                                                   // a flag: two regional indicators
		{"\U0001F1EB\U0001F1F7\U0001F1E9\U0001F1EA", 4},                               // two flags
		{"\U0001F1EB\U0001F1F7\U0001F1E9", 3},                                         // a flag and a letter alone
		{"\U0001F1EB\U0001F1F7\ufe0f", 2},                                             // a selector adds nothing to a flag
		{"\U0001F469\u200d\U0001F4BB", 2},                                             // woman technologist
		{"\U0001F469\U0001F3FD\u200d\U0001F4BB", 2},                                   // the same, medium skin tone
		{"\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", 2},             // a family
		{"\u2764\ufe0f\u200d\U0001F525", 2},                                           // heart on fire
		{"\U0001F3F3\ufe0f\u200d\U0001F308", 2},                                       // rainbow flag
		{"\U0001F3F3\ufe0f\u200d\u26A7\ufe0f", 2},                                     // transgender flag: narrow pictographs
		{"\U0001F3C3\u200d\u2640\ufe0f", 2},                                           // woman running
		{"\U0001F441\ufe0f\u200d\U0001F5E8\ufe0f", 2},                                 // eye in speech bubble
		{"\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", 2}, // England's flag
		{"a\U0001F469\u200d\U0001F4BBb", 4},                                           // narrow, emoji, narrow
		{"\U0001F469\u200d\U0001F4BB\U0001F469\u200d\U0001F4BB", 4},                   // two emoji
		{"\U0001F469\u200d", 2},                                                       // a ZWJ with nothing to join
		{"\U0001F469\u200dx", 3},                                                      // nor a letter
	} {
		if got := textcell.Width(c.in); got != c.want {
			t.Errorf("Width(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// The table of wide ranges is in order and its ranges apart, as Width's
// search needs: the first and last rune of each is wide, the runes around it
// are not.
func TestWideRangesInOrder(t *testing.T) {
	t.Parallel()
	ranges := textcell.WideRanges()
	if len(ranges) < 50 {
		t.Fatalf("%d wide ranges", len(ranges))
	}
	for i, r := range ranges {
		if r[0] > r[1] || i > 0 && ranges[i-1][1]+1 >= r[0] {
			t.Errorf("range %d, %U..%U, not in order and apart from the one before", i, r[0], r[1])
		}
		for _, c := range []struct {
			r    rune
			want int
		}{{r[0] - 1, 1}, {r[0], 2}, {r[1], 2}, {r[1] + 1, 1}} {
			if unicode.In(c.r, unicode.Mn, unicode.Me) || c.r > unicode.MaxRune {
				continue
			}
			if got := textcell.Width(string(c.r)); got != c.want {
				t.Errorf("Width(%U) = %d, want %d", c.r, got, c.want)
			}
		}
	}
}

// The wide table is of Unicode 15.0.0, the version of Go's unicode package
// that isMark and Show read: when Go moves on, the two would disagree on
// the characters the new version adds, until the table is made again (see
// wide in width.go).
func TestWideTableIsOfGosUnicode(t *testing.T) {
	t.Parallel()
	if unicode.Version != "15.0.0" {
		t.Errorf("unicode.Version is %s, the wide table's 15.0.0: make the table again from golang.org/x/text/width", unicode.Version)
	}
}

// For ASCII text a Table lays out its columns as text/tabwriter (padding 2)
// does: as inspect's tables were.
func TestTableIsTabwriterForASCII(t *testing.T) {
	t.Parallel()
	rows := [][]string{
		{"SCOPE", "METRIC", "WINDOW", "USED"},
		{"api_key:team-42", "requests", "1m", "12"},
		{"model:x", "tokens", "1h", ""},
		{"", "a", "24h", "3.5"},
	}
	var want bytes.Buffer
	tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', 0)
	var table textcell.Table
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		table.Row(row...)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	n, err := table.WriteTo(&got)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("WriteTo: %d, %v; wrote %d bytes", n, err, got.Len())
	}
	if got.String() != want.String() {
		t.Errorf("Table wrote\n%s\ntabwriter\n%s", got.String(), want.String())
	}
}

// Each column of a Table begins at the same terminal column on every row,
// whatever wide characters or combining marks the cells before it hold.
func TestTableLinesUpWideAndCombiningText(t *testing.T) {
	t.Parallel()
	var table textcell.Table
	table.Row("SCOPE", "METRIC", "USED")
	table.Row("api_key:顧客-東京", "requests", "1")    // 17 columns
	table.Row("api_key:e\u0301quipe", "トークン", "2") // 14 columns; 8
	table.Row("api_key:team-42", "tokens", "3")
	var out bytes.Buffer
	if _, err := table.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	want := []int{0, 17 + 2, 17 + 2 + 8 + 2}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	for _, line := range lines {
		if got := cellColumns(line); !slices.Equal(got, want) {
			t.Errorf("cells of %q begin at columns %v, want %v:\n%s", line, got, want, out.String())
		}
	}
}

// A column after an emoji with its presentation selector (two columns on a
// terminal, one rune and a mark) begins where it does after any other cell
// of its width.
func TestTableLinesUpEmojiPresentation(t *testing.T) {
	t.Parallel()
	var table textcell.Table
	table.Row("SCOPE", "USED")
	table.Row("api_key:\u2764\ufe0f", "1") // 10 columns
	table.Row("api_key:\u2764\ufe0fteam", "2")
	table.Row("api_key:team-42", "3") // 15 columns
	var out bytes.Buffer
	if _, err := table.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	want := "SCOPE            USED\n" +
		"api_key:\u2764\ufe0f       1\n" +
		"api_key:\u2764\ufe0fteam   2\n" +
		"api_key:team-42  3\n"
	if out.String() != want {
		t.Errorf("Table wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// A column after an emoji of several runes begins where it does after any
// other cell of its width: a skin tone (shown as it is) counted two more.
func TestTableLinesUpEmojiSequences(t *testing.T) {
	t.Parallel()
	var table textcell.Table
	for _, key := range []string{"\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7", "\U0001F469\u200d\U0001F4BB", "ab"} {
		table.Row("api_key:"+textcell.Show(key), "1")
	}
	var out bytes.Buffer
	if _, err := table.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	// Show escapes the ZWJ, a format character: its cell takes 20 columns,
	// the others 10, padded with 12 spaces.
	pad := strings.Repeat(" ", 12)
	want := "api_key:\U0001F44D\U0001F3FD" + pad + "1\n" +
		"api_key:\U0001F1EB\U0001F1F7" + pad + "1\n" +
		"api_key:\"\U0001F469\\u200d\U0001F4BB\"  1\n" +
		"api_key:ab" + pad + "1\n"
	if out.String() != want {
		t.Errorf("Table wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// cellColumns returns the terminal columns at which the cells of a line
// (text without spaces, spaces between) begin. It counts columns by hand, not
// by Width: two for a CJK ideograph, kana or Hangul syllable, none for a
// nonspacing mark, one for another rune.
func cellColumns(line string) []int {
	var starts []int
	col, prev := 0, ' '
	for _, r := range line {
		if r != ' ' && prev == ' ' {
			starts = append(starts, col)
		}
		switch {
		case unicode.Is(unicode.Mn, r):
		case r >= 0x3000 && r <= 0x9fff || r >= 0xac00 && r <= 0xd7a3:
			col += 2
		default:
			col++
		}
		prev = r
	}
	return starts
}
