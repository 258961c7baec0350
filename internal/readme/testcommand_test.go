package readme

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The test suite runs by one command, written in three places: the README
// ("The test command is ..."), the Makefile's test target and .ci/run's
// TEST_CMD. Each of them says it again (the README in the quickstart's
// `make test` line and the DATABASE_URL line, the Makefile in the target's
// help), so every mention must be the same command. Day 54 changed two of
// the three, and `make test` ran without -timeout 20m (its help said it had
// it) until that was seen.
func TestOneTestCommandInTheReadmeTheMakefileAndCI(t *testing.T) {
	t.Parallel()
	readme, makefile, ci := readText(t, "../../README.md"), readText(t, "../../Makefile"), readText(t, "../../.ci/run")

	want, mentions, problems := testCommands(readme, makefile, ci)
	for _, problem := range problems {
		t.Error(problem)
	}
	if want == "" {
		return
	}
	if !strings.Contains(want, "-timeout ") {
		t.Errorf("the README's test command %q sets no -timeout: the ratelimit package alone takes close to go test's default of 10m", want)
	}
	for _, m := range mentions {
		if m.command != want {
			t.Errorf("%s runs %q, not the README's test command %q", m.where, m.command, want)
		}
	}
}

// The day-54 Makefile, whose recipe had lost -timeout 20m while its help
// kept it, is told from the README's command; so is a .ci/run that differs.
func TestTestCommandsFindsEachMention(t *testing.T) {
	t.Parallel()
	readme := "make test # the test suite: go test -race -count=1 -timeout 20m ./...\n" +
		"The test command is `go test -race -count=1 -timeout 20m ./...` (...)\n" +
		"DATABASE_URL='postgres://...' go test -race -count=1 -timeout 20m ./...\n"
	makefile := "test: ## the test suite, as README says: go test -race -count=1 -timeout 20m ./...\n" +
		"\t$(GO) test -race -count=1 ./...\n\nquery-coverage: ## ...\n"
	ci := "TEST_CMD=(go test -race -count=1 -timeout 30m ./...) # the README's test command\n"
	want, mentions, problems := testCommands(readme, makefile, ci)
	if len(problems) > 0 {
		t.Fatalf("problems: %q", problems)
	}
	if want != "go test -race -count=1 -timeout 20m ./..." {
		t.Errorf("the README's command = %q", want)
	}
	var differ []string
	for _, m := range mentions {
		if m.command != want {
			differ = append(differ, m.where+": "+m.command)
		}
	}
	wantDiffer := []string{
		"the Makefile's test recipe: go test -race -count=1 ./...",
		".ci/run's TEST_CMD: go test -race -count=1 -timeout 30m ./...",
	}
	if !slices.Equal(differ, wantDiffer) || len(mentions) != 6 {
		t.Errorf("%d mentions, differing: %q; want 6, differing: %q", len(mentions), differ, wantDiffer)
	}
}

// A mention is one place that names the test command.
type mention struct{ where, command string }

var (
	readmeCommand = regexp.MustCompile("The test command is `([^`]+)`")
	// Every `go test` command line of the README that runs the whole module.
	readmeGoTest = regexp.MustCompile("go test [^`\n]*\\./\\.\\.\\.")
	makeTestRule = regexp.MustCompile(`(?m)^test:[^\n]*## [^\n]*?(go test [^\n]*)\n((?:\t[^\n]*\n)+)`)
	ciTestCmd    = regexp.MustCompile(`(?m)^TEST_CMD=\(([^)]*)\)`)
)

// testCommands returns the README's test command, every other place in the
// three files that names the command to run the test suite, and what it
// could not find.
func testCommands(readme, makefile, ci string) (string, []mention, []string) {
	var problems []string
	var want string
	if m := readmeCommand.FindStringSubmatch(readme); m != nil {
		want = m[1]
	} else {
		problems = append(problems, "README.md does not say \"The test command is `...`\"")
	}
	var mentions []mention
	all := readmeGoTest.FindAllString(readme, -1)
	// The sentence itself, the quickstart's `make test` line and the
	// DATABASE_URL line: fewer means one was reworded past this test.
	if len(all) < 3 {
		problems = append(problems, "README.md names the whole-module go test command fewer than 3 times: "+strings.Join(all, "; "))
	}
	for _, c := range all {
		mentions = append(mentions, mention{"README.md", c})
	}
	if m := makeTestRule.FindStringSubmatch(makefile); m != nil {
		mentions = append(mentions, mention{"the Makefile's test target's help", strings.TrimSpace(m[1])})
		recipe := strings.TrimSpace(m[2])
		if strings.Contains(recipe, "\n") {
			problems = append(problems, "the Makefile's test target has more than one recipe line:\n"+recipe)
		}
		mentions = append(mentions, mention{"the Makefile's test recipe", strings.Replace(recipe, "$(GO) ", "go ", 1)})
	} else {
		problems = append(problems, "the Makefile has no `test: ## ... go test ...` target with a recipe")
	}
	if m := ciTestCmd.FindStringSubmatch(ci); m != nil {
		mentions = append(mentions, mention{".ci/run's TEST_CMD", m[1]})
	} else {
		problems = append(problems, ".ci/run sets no TEST_CMD=(...)")
	}
	return want, mentions, problems
}
