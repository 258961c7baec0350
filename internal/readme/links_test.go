package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// Every relative link of the README and of docs/*.md names a file or directory of the repository,
// and its #anchor a heading of the Markdown file it names, as GitHub makes a heading's anchor:
// a reader who follows one lands where it says. Links out of the repository (https:) are not
// followed.
func TestDocLinksAndAnchorsResolve(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string][]string{} // by Markdown file, as read
	anchorsOf := func(path string) []string {
		if _, ok := anchors[path]; !ok {
			anchors[path] = headingAnchors(readText(t, path))
		}
		return anchors[path]
	}
	checked, withAnchor := 0, 0
	for _, from := range append([]string{"../../README.md"}, docs...) {
		name := strings.TrimPrefix(from, "../../")
		for _, link := range relativeLinks(readText(t, from)) {
			checked++
			target, anchor, _ := strings.Cut(link, "#")
			path := from // "#anchor": a heading of the same file
			if target != "" {
				path = filepath.Join(filepath.Dir(from), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist: %v", name, link, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			withAnchor++
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s links to %s: an anchor in a file that is not Markdown", name, link)
				continue
			}
			if !slices.Contains(anchorsOf(path), anchor) {
				t.Errorf("%s links to %s: %s has no heading whose anchor is #%s", name, link, strings.TrimPrefix(path, "../../"), anchor)
			}
		}
	}
	if checked < 50 || withAnchor < 15 {
		t.Errorf("checked %d relative links, %d with an anchor; want every one (at least 50, and 15 with an anchor)", checked, withAnchor)
	}
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	urlScheme  = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.*?)[ \t]*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`) // a link, its text as $1
)

// relativeLinks returns the targets of the inline links of a Markdown text, [text](target), that
// name no scheme (https:, mailto:), outside its fenced code blocks.
func relativeLinks(markdown string) []string {
	var links []string
	for _, m := range inlineLink.FindAllStringSubmatch(Prose(markdown), -1) {
		if !urlScheme.MatchString(m[1]) {
			links = append(links, m[1])
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown text: the heading's
// text (a link's text, without its target) in lower case, without its punctuation (backticks
// included), its spaces hyphens; the second of a name gets -1, the third -2.
func headingAnchors(markdown string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(Prose(markdown), -1) {
		var a strings.Builder
		for _, r := range strings.ToLower(linkText.ReplaceAllString(m[1], "$1")) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || r == '-' || r == '_':
				a.WriteRune(r)
			case r == ' ':
				a.WriteByte('-')
			}
		}
		anchor := a.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor += "-" + strconv.Itoa(n)
		} else {
			seen[anchor] = 1
		}
		anchors = append(anchors, anchor)
	}
	return anchors
}
