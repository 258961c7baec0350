// Package runecut cuts text to a length in bytes without splitting a
// character, for values bounded in bytes (a release reason, a label value,
// the end of a log).
package runecut

import "unicode/utf8"

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
