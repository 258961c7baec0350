package runecut

import "testing"

func TestPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"},  // é is 2 bytes: not split
		{"aé", 3, "aé"}, // whole
		{"€x", 2, ""},   // € is 3 bytes
		{"€x", 3, "€"},  // up to the boundary
		{"abc", 0, ""},  // nothing fits
		{"abc", -1, ""}, // nor with a negative bound
		{"", 0, ""},     // empty stays empty
	} {
		if got := Prefix(c.s, c.max); got != c.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 5, "abc"},
		{"a\x00b", 5, "ab"},                 // NUL dropped
		{"a\xffb", 5, "a\uFFFDb"},           // invalid UTF-8 replaced
		{"\xff\x00\xff", 9, "\uFFFD\uFFFD"}, // replaced first, then the NUL dropped
		{"a\xff", 3, "a"},                   // U+FFFD is 3 bytes: not split
		{"\x00\x00\x00é", 2, "é"},           // cut after the NULs are gone
		{"\x00", 5, ""},                     // nothing left
	} {
		if got := Text(c.s, c.max); got != c.want {
			t.Errorf("Text(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}

func TestSuffix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abc", 5, "abc"},
		{"abc", 2, "bc"},
		{"éa", 2, "a"},                         // é is 2 bytes: not split
		{"éa", 3, "éa"},                        // whole
		{"x€", 2, ""},                          // € is 3 bytes
		{"x€", 3, "€"},                         // from the boundary
		{"abc", 0, ""},                         // nothing fits
		{"abc", -1, ""},                        // nor with a negative bound
		{"", 0, ""},                            // empty stays empty
		{"a\x80\x80\x80\x80\x80b", 5, "\x80b"}, // invalid: not walked past a rune's length
	} {
		if got := Suffix(c.s, c.max); got != c.want {
			t.Errorf("Suffix(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}
