// Package runecut cuts text to a length in bytes without splitting a
// character, for values bounded in bytes (a release reason, a label value).
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
