package servertime

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/runecut"
)

// nameLength bounds a name taken from a statement's text.
const nameLength = 56

// nameOf returns a statement's name: the sqlc name of a pgadmit statement, whose text starts
// with "-- name: Name :kind", else the start of its text on one line.
func nameOf(query string) string {
	if rest, ok := strings.CutPrefix(query, "-- name: "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	return shorten(oneLine(query), nameLength)
}

// oneLine collapses every run of white space in s to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// shorten cuts s to at most n bytes (n >= 3), never inside a character, ending it with "..."
// when cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return runecut.Prefix(s, n-3) + "..."
}

// Functions returns the source of pgadmit's PL/pgSQL functions by name, for Attribute.
func Functions(ctx context.Context, conn db.DBTX) (map[string]string, error) {
	rows, err := db.New().BenchFunctionSources(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("read pgadmit's functions: %w", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Name] = r.Source
	}
	return out, nil
}

// callRE finds a call of a pgadmit function in a statement's text.
var callRE = regexp.MustCompile(`\b(pgadmit_[a-z0-9_]+)\s*\(`)

// placeholderRE finds what pg_stat_statements put in place of a constant.
var placeholderRE = regexp.MustCompile(`\$\d+`)

// Attribute sets each statement's Function from funcs (name to source, from Functions): for
// a top-level statement, the first of them it calls; for a nested one, the one whose body
// holds its text. pg_stat_statements does not record where a nested statement ran, so the
// text decides: PL/pgSQL passes the statements of a body on as written, except that constants
// become $n and an INTO clause is cut out. Pieces of the text between those are looked up in
// each body; the function holding the most of them, if one does, is the one. A statement
// that matches no function, or two equally, keeps Function "".
func Attribute(ss []Statement, funcs map[string]string) {
	bodies := make(map[string]string, len(funcs))
	for name, src := range funcs {
		bodies[name] = oneLine(src)
	}
	for i := range ss {
		s := &ss[i]
		if s.TopLevel {
			for _, m := range callRE.FindAllStringSubmatch(s.Query, -1) {
				if _, ok := bodies[m[1]]; ok {
					s.Function = m[1]
					break
				}
			}
			continue
		}
		s.Function = bestMatch(probes(s.Query), bodies)
	}
}

// probes returns pieces of a nested statement's text to look up in function bodies: the start
// and the end of each stretch between placeholders long enough to be telling.
func probes(query string) []string {
	const shortest, longest = 24, 48
	var out []string
	for _, seg := range placeholderRE.Split(oneLine(query), -1) {
		seg = strings.TrimSpace(seg)
		if len(seg) < shortest {
			continue
		}
		n := min(len(seg), longest)
		out = append(out, seg[:n], seg[len(seg)-n:])
	}
	return out
}

// bestMatch returns the name of the body that holds the most probes, "" when none holds any
// or two hold as many.
func bestMatch(probes []string, bodies map[string]string) string {
	best, bestN, tie := "", 0, false
	for name, body := range bodies {
		n := 0
		for _, p := range probes {
			if strings.Contains(body, p) {
				n++
			}
		}
		switch {
		case n > bestN:
			best, bestN, tie = name, n, false
		case n == bestN && n > 0:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}
