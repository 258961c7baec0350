// Package textcell shows text that applications and operators choose (a scope type or key, a
// metric, a holder: any UTF-8 but NUL, as the database holds it) in pgadmit's own output: the
// CLI's inspect tables, Doctor's problems and the errors that name a scope (an *ExceededError's
// message, a duplicate limit's *ValidationError), one rule for all. Scope shows a scope by it, and
// ParseScope reads that back (inspect --scope). Width and Table line it up in columns by the
// width it takes on a terminal.
package textcell

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Show returns s as it is when it is printable text without a space (strconv.IsPrint: letters,
// marks, numbers, punctuation and symbols, non-ASCII included) that draws something, else
// Go-quoted: a newline or a tab of it must split no line or column, no terminal escape may reach
// a terminal raw, and text with a space must read as one word where words are apart by spaces (a
// cell of inspect's tables, the scope of Doctor's problem: "team a" and "team" followed by a
// column "a" looked alike). Text that begins with a quote is quoted too, so that it cannot pass
// for quoted text.
//
// Text must not look like nothing, or like something else: the empty text is shown "", and text
// that begins with a mark (a combining accent, a variation selector: alone, it looked like an
// empty cell; first, it combined with the ":" before a key) or holds a rune that draws a blank
// (a Hangul filler, the Braille blank: a space by another name) is quoted, those runes escaped
// (`"\ufe0f"`, `"\u3164"`), as is a mark with no base in the quoted text (after a space or an
// escape). A mark after its base stays as it is ("e\u0301", "\u2764\ufe0f"), but for one that
// draws nothing there (hidden: "team\u034f" looked like "team").
func Show(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.HasPrefix(s, `"`) {
		return quote(s)
	}
	if first, _ := utf8.DecodeRuneInString(s); isMark(first) {
		return quote(s)
	}
	prev := rune(0)
	for _, r := range s {
		if r == ' ' || !strconv.IsPrint(r) || isBlank(r) || hidden(prev, r) {
			return quote(s)
		}
		prev = r
	}
	return s
}

// quote Go-quotes s as strconv.Quote does, but escapes too the runes that would not show in it:
// blank runes, hidden marks, and marks with no base before them in the quoted text.
func quote(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	based := false // the rune before was written as it is, and a mark may combine with it
	prev := rune(0)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		one := s[i : i+size]
		var q string
		if isBlank(r) || isMark(r) && !based || hidden(prev, r) {
			q = strconv.QuoteToASCII(one)
		} else {
			q = strconv.Quote(one)
		}
		q = q[1 : len(q)-1]
		b = append(b, q...)
		based = q == one && r != ' '
		prev = r
		i += size
	}
	return string(append(b, '"'))
}

// hidden reports whether r, after prev, is a mark that draws nothing: a variation selector or
// another default-ignorable mark (U+034F combining grapheme joiner, a Mongolian free variation
// selector), but for U+FE0E or U+FE0F, text or emoji presentation, right after a character
// that has both (presents). Other variation sequences (a math symbol's, an ideograph's: U+FE00,
// U+E0100) draw a variant hardly told apart, if at all.
func hidden(prev, r rune) bool {
	if !isMark(r) || !unicode.In(r, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) {
		return false
	}
	return r != 0xFE0E && r != 0xFE0F || !presents(prev)
}

// presents reports whether r may be drawn as text or as an emoji, as U+FE0E or U+FE0F asks: a
// symbol, or one of the few others in emoji-variation-sequences.txt (a keycap's base, "‼").
// Letters never are.
func presents(r rune) bool {
	return unicode.IsSymbol(r) || strings.ContainsRune("#*0123456789\u203c\u2049\u3030\u303d", r)
}

// isMark reports whether r is a nonspacing or enclosing mark (unicode.Mn, Me): it draws on the
// character before it, and no column of its own.
func isMark(r rune) bool {
	return r >= 0x300 && unicode.In(r, unicode.Mn, unicode.Me)
}

// isBlank reports whether r is one of the printable runes (strconv.IsPrint) that draw nothing
// but a blank: the Hangul fillers (Default_Ignorable_Code_Point letters) and the Braille blank.
func isBlank(r rune) bool {
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800:
		return true
	}
	return false
}
