package textcell

// WideRanges returns the table of wide ranges, each as its first and last rune.
func WideRanges() [][2]rune {
	ranges := make([][2]rune, len(wide))
	for i, r := range wide {
		ranges[i] = [2]rune{r.first, r.last}
	}
	return ranges
}
