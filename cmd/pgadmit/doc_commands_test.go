package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/readme"
)

// docCommandValues are the values given to the words by which the docs name a flag's value
// (`pgadmit recover --every D --http ADDR`), and to <command>.
var docCommandValues = map[string]string{
	"D": "1s", "N": "1", "V": "0", "FILE": "out.json", "ADDR": ":0", "URL": "postgres://u@h/db",
	"LIST": "W1", "TYPE:KEY": "api_key:k", "<command>": "inspect",
}

// docCommandFails are the command lines of the docs that show a usage error, with what it says.
var docCommandFails = map[string]string{
	"pgadmit --help nosuch": `pgadmit: unknown command "nosuch"`,
}

// Every pgadmit command line that the docs show (a code span of README.md or of docs/*.md, but
// docs/performance.md, the log, that begins with pgadmit and a command or a flag:
// `pgadmit prune --older-than 1h`) is one a reader may paste: its command exists, and each of
// its flags, with a value the flag takes. It is parsed as pgadmit parses it, with --help after
// it, which runs nothing. A word that names a value by its kind (D, N, FILE...) is given one
// of that kind, and a pipe or a redirection is left to the shell (`pgadmit demo | head`); a line
// with other words for the reader to fill in (<run id>, up|down, ...) is left out, and so is a
// message (`pgadmit doctor: cut off by ...`). A
// flag named last without the value it takes (`pgadmit bench --think`) is one the command's
// --help lists. A line that shows a usage error (docCommandFails) fails as it says.
func TestEveryCommandLineOfTheDocsParses(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = slices.DeleteFunc(docs, func(p string) bool { return filepath.Base(p) == "performance.md" })
	checked := map[string]bool{}
	failsSeen := map[string]bool{}
	for _, path := range append([]string{"../../README.md"}, docs...) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(path, "../../")
		for _, line := range docCommandLines(string(text)) {
			args, ok := docCommandArgs(line)
			if !ok || checked[line] {
				continue
			}
			checked[line] = true
			if want, fails := docCommandFails[line]; fails {
				failsSeen[line] = true
				if _, errOut, code := cli(t, nil, append(args, "--help")...); code != exitUsage || !strings.Contains(errOut, want) {
					t.Errorf("%s: `%s`, which the docs show failing: exit %d, stderr %q; want exit %d, %q", name, line, code, errOut, exitUsage, want)
				}
				continue
			}
			if last := args[len(args)-1]; len(args) > 1 && slices.Contains(commandsList(), args[0]) && strings.HasPrefix(last, "-") {
				// A flag named last: named alone when it takes a value (its --help names it).
				help := cliOK(t, args[0], "--help")
				if _, after, ok := strings.Cut(help, "\n  "+last+" "); ok && !strings.HasPrefix(after, "\n") {
					args = args[:len(args)-1]
				}
			}
			if out, errOut, code := cli(t, nil, append(args, "--help")...); code != exitOK || !strings.HasPrefix(out, "Usage: pgadmit ") && !strings.HasPrefix(out, "pgadmit operates") {
				t.Errorf("%s shows `%s`, which pgadmit does not take: exit %d, stderr %q", name, line, code, errOut)
			}
		}
	}
	if len(checked) < 25 {
		t.Errorf("checked %d command lines of the docs, want every one (at least 25)", len(checked))
	}
	for line := range docCommandFails {
		if !failsSeen[line] {
			t.Errorf("the docs no longer show `%s`: drop it from docCommandFails", line)
		}
	}
}

var (
	docBlankLine   = regexp.MustCompile(`\n[ \t]*\n`)
	docLineBreak   = regexp.MustCompile(`[ \t]*\n[ \t]*`)
	docPlaceholder = regexp.MustCompile(`^[A-Z]+$`) // a value to fill in that docCommandValues does not know
)

// docCommandLines returns the code spans of a Markdown text (outside its fenced blocks, a span
// that a line break splits joined by a space) that begin with "pgadmit ".
func docCommandLines(markdown string) []string {
	var lines []string
	for _, paragraph := range docBlankLine.Split(readme.Prose(markdown), -1) {
		parts := strings.Split(docLineBreak.ReplaceAllString(paragraph, " "), "`")
		for i := 1; i < len(parts); i += 2 {
			if span := strings.TrimSpace(parts[i]); strings.HasPrefix(span, "pgadmit ") {
				lines = append(lines, span)
			}
		}
	}
	return lines
}

// docCommandArgs returns the arguments of a command line of the docs, pgadmit's name left out
// and the words that name a value by its kind given one (docCommandValues), and whether it is
// one to check: a command or a flag after pgadmit (or a word and a flag), no message, no word for the reader to fill in.
// What follows a pipe or a redirection is the shell's, and left out.
func docCommandArgs(line string) ([]string, bool) {
	for _, shell := range []string{" | ", " > "} { // pgadmit's part of `pgadmit demo | head`
		line, _, _ = strings.Cut(line, shell)
	}
	words := strings.Fields(line)[1:]
	if !slices.Contains(append(commandsList(), "help", "<command>"), words[0]) && !strings.HasPrefix(words[0], "-") &&
		(len(words) == 1 || !strings.HasPrefix(words[1], "-")) {
		return nil, false // prose, "pgadmit migration is applied"; not "pgadmit demos --http"
	}
	var args []string
	for _, w := range words {
		if v, ok := docCommandValues[w]; ok {
			w = v
		}
		if strings.HasSuffix(w, ":") || strings.ContainsAny(w, `<>|\[]`) || strings.Contains(w, "...") ||
			docPlaceholder.MatchString(w) {
			return nil, false
		}
		args = append(args, w)
	}
	return args, true
}

// commandsList returns the names of pgadmit's commands.
func commandsList() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}
