// Package textcell shows text that applications and operators choose (a scope type or key, a
// metric, a holder: any UTF-8 but NUL, as the database holds it) in pgadmit's own output: the
// CLI's inspect tables and Doctor's problems, one rule for all. Width and Table line it up in
// columns by the width it takes on a terminal.
package textcell

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Show returns s as it is when it is printable text without a space (strconv.IsPrint: letters,
// marks, numbers, punctuation and symbols, non-ASCII included), else Go-quoted: a newline or a
// tab of it must split no line or column, no terminal escape may reach a terminal raw, and text
// with a space must read as one word where words are apart by spaces (a cell of inspect's
// tables, the scope of Doctor's problem: "team a" and "team" followed by a column "a" looked
// alike). Text that begins with a quote is quoted too, so that it cannot pass for quoted text.
func Show(s string) string {
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool { return r == ' ' || !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
