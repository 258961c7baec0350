package servertime

import (
	"os"
	"strings"
	"testing"
)

func TestNameOf(t *testing.T) {
	t.Parallel()
	long := "lorem   ipsum\n\tdolor " + strings.Repeat("sit amet ", 20)
	for _, tc := range []struct{ query, want string }{
		{"-- name: AdmissionReserveOne :one\nthe statement", "AdmissionReserveOne"},
		{long, "lorem ipsum dolor sit amet sit amet sit amet sit amet..."},
		{"short", "short"},
		{"-- name: ", "-- name:"},
	} {
		if got := nameOf(tc.query); got != tc.want {
			t.Errorf("nameOf(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
	if got := shorten(strings.Repeat("é", 50), 10); len(got) > 10 || !strings.HasSuffix(got, "...") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("shorten cut a UTF-8 sequence or went over: %q", got)
	}
}

// blocks reads a testdata file of blocks, each after a line "== HEADER", into headers and
// texts; lines starting with # before the first block are comments.
func blocks(t *testing.T, path string) (headers, texts []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			headers = append(headers, strings.TrimPrefix(line, "== "))
			texts = append(texts, "")
		case len(texts) == 0:
		default:
			texts[len(texts)-1] += line + "\n"
		}
	}
	return headers, texts
}

func TestAttribute(t *testing.T) {
	t.Parallel()
	names, bodies := blocks(t, "testdata/functions.txt")
	funcs := map[string]string{}
	for i, name := range names {
		funcs[name] = bodies[i]
	}
	headers, texts := blocks(t, "testdata/statements.txt")
	var ss []Statement
	var want []string
	for i, h := range headers {
		level, fn, _ := strings.Cut(h, " ")
		ss = append(ss, Statement{TopLevel: level == "toplevel", Query: strings.TrimSpace(texts[i])})
		want = append(want, strings.TrimPrefix(fn, "-"))
	}
	if len(ss) < 5 {
		t.Fatalf("testdata/statements.txt: %d statements", len(ss))
	}
	Attribute(ss, funcs)
	for i, s := range ss {
		if s.Function != want[i] {
			t.Errorf("statement %d (%.40q): function %q, want %q", i, s.Query, s.Function, want[i])
		}
	}

	// The same text in two bodies: no guess.
	funcs["pgadmit_settle"] = funcs["pgadmit_settle_one"]
	ss = []Statement{{Query: texts[3]}}
	Attribute(ss, funcs)
	if ss[0].Function != "" {
		t.Errorf("a statement in two bodies was attributed to %q", ss[0].Function)
	}
}
