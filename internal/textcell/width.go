package textcell

import (
	"sort"
	"unicode"
)

// Width returns how many columns of a terminal s takes: two for each East Asian Wide or
// Fullwidth character (CJK ideographs, kana, Hangul syllables, fullwidth forms, most emoji: the
// wide table below, of Unicode 15.0), none for a nonspacing or enclosing mark (unicode.Mn, Me:
// an accent that combines with the character before it, a variation selector), one for any
// other. A character of one column that may be an emoji (presents: a symbol, a keycap's base)
// followed by U+FE0F (variation selector 16, emoji presentation: "\u2764\ufe0f", a red heart;
// "#\ufe0f\u20e3", a keycap) counts two, as most terminals draw it: an emoji, as wide as one of
// the table (a few draw it one column, or two only for the sequences Unicode lists in
// emoji-variation-sequences.txt); so do two regional indicators (a flag) and a pictograph
// (unicode.So) followed by a skin tone ("\u261d\U0001f3fd").
//
// What extends an emoji adds nothing, as terminals that draw the whole as one emoji do (those
// that draw its pieces apart take more): a mark, a skin tone ("\U0001f44d\U0001f3fd"), the tags
// of a subdivision flag, and a pictograph joined by U+200D ZWJ ("\U0001f469\u200d\U0001f4bb").
// That is a grapheme cluster (UAX #29) made of emoji, with unicode.So for Extended_Pictographic,
// which the standard library has no table of.
//
// It is meant for what Show returns (printable text, or Go-quoted text, printable too: Show
// escapes a ZWJ and tags, format characters); a control or format character counts one.
// Terminals differ on a few scripts (Indic spacing marks, Hangul jamo): it is the width they
// agree on for CJK text and combining accents.
func Width(s string) int {
	n := 0
	base, last := 0, rune(0) // the columns of the last rune that is no mark, and that rune
	emoji := false           // the runes from last on are one emoji, its two columns counted
	join := false            // that emoji ends with a ZWJ: a pictograph after it joins it
	for _, r := range s {
		if emoji {
			if isMark(r) || isModifier(r) || isTag(r) || r == zwj || join && unicode.Is(unicode.So, r) {
				join = r == zwj
				continue
			}
			emoji, join = false, false
		}
		switch {
		case r < 0x300: // Latin and the IPA: neither wide nor a mark
			n++
			base, last = 1, r
		case base == 1 && (r == 0xFE0F && presents(last) || isModifier(r) && unicode.Is(unicode.So, last) || isRegional(r) && isRegional(last)):
			n++ // last drawn as an emoji
			base, emoji = 2, true
		case isMark(r):
		case isWide(r):
			n += 2
			base, last, emoji = 2, r, unicode.Is(unicode.So, r)
		default:
			n++
			base, last = 1, r
		}
	}
	return n
}

// zwj is U+200D ZERO WIDTH JOINER, which joins emoji into one (a ZWJ sequence).
const zwj = 0x200D

// isModifier reports whether r is an emoji modifier, a skin tone (U+1F3FB..U+1F3FF).
func isModifier(r rune) bool { return r >= 0x1F3FB && r <= 0x1F3FF }

// isRegional reports whether r is a regional indicator, half a flag (U+1F1E6..U+1F1FF).
func isRegional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

// isTag reports whether r is a tag (U+E0020..U+E007F), which a subdivision flag's emoji takes.
func isTag(r rune) bool { return r >= 0xE0020 && r <= 0xE007F }

func isWide(r rune) bool {
	i := sort.Search(len(wide), func(i int) bool { return wide[i].last >= r })
	return i < len(wide) && wide[i].first <= r
}

// wide holds the ranges of characters whose East_Asian_Width is W (Wide) or F (Fullwidth) in
// EastAsianWidth.txt of Unicode 15.0.0 (the version of Go's unicode package), unassigned code
// points that the file gives W included (the ideographic planes), adjacent ranges merged; in
// order and apart. It was made from golang.org/x/text/width (not a dependency: a program run
// apart), as the runes r whose LookupRune(r).Kind() is EastAsianWide or EastAsianFullwidth; make
// it again so when Go's unicode.Version changes.
var wide = []struct{ first, last rune }{
	{0x1100, 0x115F}, {0x231A, 0x231B}, {0x2329, 0x232A}, {0x23E9, 0x23EC},
	{0x23F0, 0x23F0}, {0x23F3, 0x23F3}, {0x25FD, 0x25FE}, {0x2614, 0x2615},
	{0x2648, 0x2653}, {0x267F, 0x267F}, {0x2693, 0x2693}, {0x26A1, 0x26A1},
	{0x26AA, 0x26AB}, {0x26BD, 0x26BE}, {0x26C4, 0x26C5}, {0x26CE, 0x26CE},
	{0x26D4, 0x26D4}, {0x26EA, 0x26EA}, {0x26F2, 0x26F3}, {0x26F5, 0x26F5},
	{0x26FA, 0x26FA}, {0x26FD, 0x26FD}, {0x2705, 0x2705}, {0x270A, 0x270B},
	{0x2728, 0x2728}, {0x274C, 0x274C}, {0x274E, 0x274E}, {0x2753, 0x2755},
	{0x2757, 0x2757}, {0x2795, 0x2797}, {0x27B0, 0x27B0}, {0x27BF, 0x27BF},
	{0x2B1B, 0x2B1C}, {0x2B50, 0x2B50}, {0x2B55, 0x2B55}, {0x2E80, 0x2E99},
	{0x2E9B, 0x2EF3}, {0x2F00, 0x2FD5}, {0x2FF0, 0x2FFB}, {0x3000, 0x303E},
	{0x3041, 0x3096}, {0x3099, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E},
	{0x3190, 0x31E3}, {0x31F0, 0x321E}, {0x3220, 0x3247}, {0x3250, 0x4DBF},
	{0x4E00, 0xA48C}, {0xA490, 0xA4C6}, {0xA960, 0xA97C}, {0xAC00, 0xD7A3},
	{0xF900, 0xFAFF}, {0xFE10, 0xFE19}, {0xFE30, 0xFE52}, {0xFE54, 0xFE66},
	{0xFE68, 0xFE6B}, {0xFF01, 0xFF60}, {0xFFE0, 0xFFE6}, {0x16FE0, 0x16FE4},
	{0x16FF0, 0x16FF1}, {0x17000, 0x187F7}, {0x18800, 0x18CD5}, {0x18D00, 0x18D08},
	{0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122},
	{0x1B132, 0x1B132}, {0x1B150, 0x1B152}, {0x1B155, 0x1B155}, {0x1B164, 0x1B167},
	{0x1B170, 0x1B2FB}, {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E},
	{0x1F191, 0x1F19A}, {0x1F200, 0x1F202}, {0x1F210, 0x1F23B}, {0x1F240, 0x1F248},
	{0x1F250, 0x1F251}, {0x1F260, 0x1F265}, {0x1F300, 0x1F320}, {0x1F32D, 0x1F335},
	{0x1F337, 0x1F37C}, {0x1F37E, 0x1F393}, {0x1F3A0, 0x1F3CA}, {0x1F3CF, 0x1F3D3},
	{0x1F3E0, 0x1F3F0}, {0x1F3F4, 0x1F3F4}, {0x1F3F8, 0x1F43E}, {0x1F440, 0x1F440},
	{0x1F442, 0x1F4FC}, {0x1F4FF, 0x1F53D}, {0x1F54B, 0x1F54E}, {0x1F550, 0x1F567},
	{0x1F57A, 0x1F57A}, {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A4}, {0x1F5FB, 0x1F64F},
	{0x1F680, 0x1F6C5}, {0x1F6CC, 0x1F6CC}, {0x1F6D0, 0x1F6D2}, {0x1F6D5, 0x1F6D7},
	{0x1F6DC, 0x1F6DF}, {0x1F6EB, 0x1F6EC}, {0x1F6F4, 0x1F6FC}, {0x1F7E0, 0x1F7EB},
	{0x1F7F0, 0x1F7F0}, {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1F9FF},
	{0x1FA70, 0x1FA7C}, {0x1FA80, 0x1FA88}, {0x1FA90, 0x1FABD}, {0x1FABF, 0x1FAC5},
	{0x1FACE, 0x1FADB}, {0x1FAE0, 0x1FAE8}, {0x1FAF0, 0x1FAF8}, {0x20000, 0x3FFFF},
}
