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
// escape). A mark after its base stays as it is ("e\u0301", "\u2764\ufe0f").
func Show(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.HasPrefix(s, `"`) {
		return quote(s)
	}
	if first, _ := utf8.DecodeRuneInString(s); isMark(first) {
		return quote(s)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r == ' ' || !strconv.IsPrint(r) || isBlank(r) }) >= 0 {
		return quote(s)
	}
	return s
}

// quote Go-quotes s as strconv.Quote does, but escapes too the runes that would not show in it:
// blank runes, and marks with no base before them in the quoted text.
func quote(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	based := false // the rune before was written as it is, and a mark may combine with it
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		one := s[i : i+size]
		var q string
		if isBlank(r) || isMark(r) && !based {
			q = strconv.QuoteToASCII(one)
		} else {
			q = strconv.Quote(one)
		}
		q = q[1 : len(q)-1]
		b = append(b, q...)
		based = q == one && r != ' '
		i += size
	}
	return string(append(b, '"'))
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
