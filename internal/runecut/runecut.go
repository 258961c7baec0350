// Package runecut cuts text to a length in bytes without splitting a
// character, for values bounded in bytes (a release reason, a label value,
// the end of a log).
package runecut

import (
	"strings"
	"unicode/utf8"
)

// Prefix returns s if it is at most max bytes long, else its longest prefix
// of at most max bytes that ends at a rune boundary. s should be valid
// UTF-8 (strings.ToValidUTF8 first); a max below 1 gives "".
func Prefix(s string, max int) string {
	if len(s) <= max {
		return s
	}
	if max < 1 {
		return ""
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Text returns s as text PostgreSQL stores (invalid UTF-8 replaced with U+FFFD, then its NUL
// bytes dropped), cut to at most max bytes as Prefix cuts it: a value written to a text column
// that the server would refuse, failing the statement that writes it.
func Text(s string, max int) string {
	return Prefix(strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", ""), max)
}

// Suffix returns s if it is at most max bytes long, else its longest suffix
// of at most max bytes that begins at a rune boundary. In invalid UTF-8 it
// skips at most utf8.UTFMax-1 bytes that begin no rune (a rune is no
// longer); a max below 1 gives "".
func Suffix(s string, max int) string {
	if len(s) <= max {
		return s
	}
	if max < 1 {
		return ""
	}
	cut := len(s) - max
	for skip := 0; skip < utf8.UTFMax-1 && cut < len(s) && !utf8.RuneStart(s[cut]); skip++ {
		cut++
	}
	return s[cut:]
}
