package readme

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's Development table is the Makefile's list of targets, as
// `make help` prints it: the same targets, each once and each of them
// phony, and what a row says of its target is what the Makefile has: every
// path, command and name a row quotes is in its target's help text or
// recipe, the row that says what `make` alone does is the default goal's,
// and the sqlc and staticcheck versions it names are tools/go.mod's. The paragraph after it
// names the checks .ci/run makes, and those it does not.
func TestReadmeDevelopmentTableIsTheMakefiles(t *testing.T) {
	t.Parallel()
	for _, problem := range developmentProblems(readText(t, "../../README.md"), readText(t, "../../Makefile"), readText(t, "../../.ci/run"), readText(t, "../../tools/go.mod")) {
		t.Error(problem)
	}
}

// Each way the table and the Makefile can part is told: a target the
// README lacks, one it has twice or no longer in the Makefile, a phony
// target without help (make help leaves it out), a quoted name the
// target no longer has, a moved default goal, another sqlc or staticcheck, a check CI
// stopped running or started on.
func TestDevelopmentProblemsFindsEachDrift(t *testing.T) {
	t.Parallel()
	makefile := ".DEFAULT_GOAL := help\n.PHONY: help vet build fuzz\n\n" +
		"help: ## list the targets\n\t@awk '...' $(MAKEFILE_LIST)\n\n" +
		"vet: ## go vet must find nothing\n\t$(GO) vet ./...\n\t@gofmt -l .\n\n" +
		"build: ## build bin/pgadmit\n\t$(GO) build -o bin/pgadmit ./cmd/pgadmit\n\n" +
		"fuzz: ## fuzz Reserve's input\n\t$(GO) test -fuzz . ./ratelimit/\n"
	readme := "## Development\n\n| target | what it does |\n| --- | --- |\n" +
		"| `make vet` | `go vet`, `gofmt` |\n" +
		"| `make build` | build the CLI into `bin/pgadmit` |\n" +
		"| `make fuzz` | fuzz `Reserve`'s input |\n" +
		"| `make help` | list the targets (also what `make` alone does) |\n\n" +
		"CI runs it: the checks above (`vet`, a short `fuzz`; not `build`).\n"
	ci := "make --no-print-directory vet\nDATABASE_URL=x make --no-print-directory fuzz FUZZTIME=15s\n"
	tools := "require github.com/sqlc-dev/sqlc v1.31.1 // indirect\n\thonnef.co/go/tools v0.8.2 // indirect\n"
	if problems := developmentProblems(readme, makefile, ci, tools); len(problems) > 0 {
		t.Fatalf("a README and Makefile that agree: %q", problems)
	}
	for _, c := range []struct {
		name                  string
		readme, makefile, ci  string
		tools                 string
		wantProblemContaining string
	}{
		{"a target the README lacks", strings.Replace(readme, "| `make build` | build the CLI into `bin/pgadmit` |\n", "", 1), makefile, ci, tools,
			"README.md's Development table lists [vet fuzz help]; the Makefile's targets, as make help lists them, are [help vet build fuzz]"},
		{"a row twice", strings.Replace(readme, "| `make help` |", "| `make vet` | `go vet` |\n| `make help` |", 1), makefile, ci, tools,
			"README.md's Development table lists [vet build fuzz vet help]"},
		{"a target the Makefile no longer has", readme, strings.Replace(strings.Replace(makefile, " build", "", 1),
			"build: ## build bin/pgadmit\n\t$(GO) build -o bin/pgadmit ./cmd/pgadmit\n\n", "", 1), ci, tools,
			"README.md's Development table lists [vet build fuzz help]; the Makefile's targets, as make help lists them, are [help vet fuzz]"},
		{"a phony target without help", readme, strings.Replace(makefile, "fuzz: ## fuzz Reserve's input", "fuzz:", 1), ci, tools,
			"the Makefile's .PHONY targets [help vet build fuzz] are not the targets make help lists [help vet build]"},
		{"a name the recipe lost", readme, strings.Replace(makefile, "\t@gofmt -l .\n", "", 1), ci, tools,
			"README.md's row of make vet quotes `gofmt`, which neither its help"},
		{"another default goal", readme, strings.Replace(makefile, ".DEFAULT_GOAL := help", ".DEFAULT_GOAL := build", 1), ci, tools,
			"README.md's row of make help says it is what `make` alone does; the Makefile's .DEFAULT_GOAL is build"},
		{"another sqlc", strings.Replace(readme, "fuzz `Reserve`'s input", "fuzz `Reserve`'s input (sqlc v1.30.0)", 1), makefile, ci, tools,
			"README.md's Development table names sqlc v1.30.0; tools/go.mod requires github.com/sqlc-dev/sqlc v1.31.1"},
		{"another staticcheck", strings.Replace(readme, "fuzz `Reserve`'s input", "fuzz `Reserve`'s input ([staticcheck](https://staticcheck.dev) (v0.8.1))", 1), makefile, ci, tools,
			"README.md's Development table names staticcheck v0.8.1; tools/go.mod requires honnef.co/go/tools v0.8.2"},
		{"a check CI no longer runs", readme, makefile, "make --no-print-directory vet\n", tools,
			"README.md says CI runs make [vet fuzz] and not [build]; .ci/run makes [vet]"},
		{"a target CI runs that the README says it does not", readme, makefile, ci + "make build\n", tools,
			"README.md says CI runs make [vet fuzz] and not [build]; .ci/run makes [vet fuzz build]"},
	} {
		problems := developmentProblems(c.readme, c.makefile, c.ci, c.tools)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.wantProblemContaining) }) {
			t.Errorf("%s: problems %q; want one containing %q", c.name, problems, c.wantProblemContaining)
		}
	}
}

var (
	// A target make help lists: its awk program's pattern, and the help after "## ".
	makeHelpTarget = regexp.MustCompile(`^([a-z][a-z-]*):.*## (.*)$`)
	makePhony      = regexp.MustCompile(`(?m)^\.PHONY:(.*)$`)
	makeDefault    = regexp.MustCompile(`(?m)^\.DEFAULT_GOAL\s*:=\s*(\S+)`)
	// A row of the Development table: `make TARGET [ARGS]` | what it does.
	developmentRow = regexp.MustCompile("^\\| `make ([a-z][a-z-]*)((?: [^`]*)?)` \\| (.*) \\|$")
	codeSpan       = regexp.MustCompile("`([^`]+)`")
	// The pinned tools the table names with a version (sqlc (v1.31.1, [staticcheck](...)
	// (v0.8.2, ...) and the module tools/go.mod requires each from.
	pinnedTools = []struct {
		name, module string
		named        *regexp.Regexp
	}{
		{"sqlc", "github.com/sqlc-dev/sqlc", regexp.MustCompile(`sqlc \(?(v\d+\.\d+\.\d+)`)},
		{"staticcheck", "honnef.co/go/tools", regexp.MustCompile(`staticcheck(?:\]\([^)]*\))? \(?(v\d+\.\d+\.\d+)`)},
	}
	ciChecks = regexp.MustCompile(`the checks above \(([^)]*); not ([^)]*)\)`)
	ciMake   = regexp.MustCompile(`\bmake (?:--[a-z-]+ )*([a-z][a-z-]*)`)
)

// makeTarget is a target that make help lists, with its help text and
// recipe (its lines without their tab, $(GO) as go and $$ as $, as the
// shell runs them).
type makeTarget struct{ name, help, recipe string }

// makeTargets returns the Makefile's targets that make help lists, in its
// order.
func makeTargets(makefile string) []makeTarget {
	var targets []makeTarget
	lines := strings.Split(makefile, "\n")
	for i, line := range lines {
		m := makeHelpTarget.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var recipe []string
		for _, l := range lines[i+1:] {
			if !strings.HasPrefix(l, "\t") {
				break
			}
			recipe = append(recipe, strings.NewReplacer("$(GO)", "go", "$$", "$").Replace(l[1:]))
		}
		targets = append(targets, makeTarget{m[1], m[2], strings.Join(recipe, "\n")})
	}
	return targets
}

// developmentProblems returns where the README's Development section and
// the Makefile, .ci/run and tools/go.mod part.
func developmentProblems(readme, makefile, ci, toolsMod string) []string {
	var problems []string
	_, section, ok := strings.Cut(readme, "\n## Development\n")
	if !ok && strings.HasPrefix(readme, "## Development\n") {
		section, ok = strings.TrimPrefix(readme, "## Development\n"), true
	}
	if !ok {
		return []string{"README.md has no ## Development section"}
	}
	section, _, _ = strings.Cut(section, "\n## ")

	targets := makeTargets(makefile)
	var listed []string
	byName := map[string]makeTarget{}
	for _, target := range targets {
		listed = append(listed, target.name)
		byName[target.name] = target
	}
	if m := makePhony.FindStringSubmatch(makefile); m == nil {
		problems = append(problems, "the Makefile has no .PHONY line")
	} else if phony := strings.Fields(m[1]); !sameSet(phony, listed) {
		problems = append(problems, fmt.Sprintf("the Makefile's .PHONY targets %v are not the targets make help lists %v", phony, listed))
	}
	defaultGoal := ""
	if m := makeDefault.FindStringSubmatch(makefile); m != nil {
		defaultGoal = m[1]
	}

	var rows []string
	for _, line := range strings.Split(section, "\n") {
		m := developmentRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, args, does := m[1], m[2], m[3]
		rows = append(rows, name)
		target, ok := byName[name]
		if !ok {
			continue // told below, with the lists
		}
		where := "README.md's row of make " + name
		if args != "" && !strings.Contains(target.help, "make "+name+args) {
			problems = append(problems, fmt.Sprintf("%s shows `make %s%s`, which its help %q does not", where, name, args, target.help))
		}
		if alone := strings.Contains(does, "`make` alone"); alone != (name == defaultGoal) {
			if alone {
				problems = append(problems, fmt.Sprintf("%s says it is what `make` alone does; the Makefile's .DEFAULT_GOAL is %s", where, defaultGoal))
			} else {
				problems = append(problems, fmt.Sprintf("%s does not say that it is what `make` alone does (the Makefile's .DEFAULT_GOAL)", where))
			}
		}
		for _, span := range codeSpan.FindAllStringSubmatch(does, -1) {
			if span[1] == "make" {
				continue
			}
			if !strings.Contains(target.help, span[1]) && !strings.Contains(target.recipe, span[1]) {
				problems = append(problems, fmt.Sprintf("%s quotes `%s`, which neither its help %q nor its recipe has", where, span[1], target.help))
			}
		}
	}
	if !sameSet(rows, listed) || len(rows) != len(listed) {
		problems = append(problems, fmt.Sprintf("README.md's Development table lists %v; the Makefile's targets, as make help lists them, are %v", rows, listed))
	}

	for _, tool := range pinnedTools {
		m := tool.named.FindStringSubmatch(section)
		if m == nil {
			continue
		}
		required := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(tool.module) + ` (v\S+)`)
		if t := required.FindStringSubmatch(toolsMod); t == nil || t[1] != m[1] {
			pinned := "no " + tool.module
			if t != nil {
				pinned = tool.module + " " + t[1]
			}
			problems = append(problems, fmt.Sprintf("README.md's Development table names %s %s; tools/go.mod requires %s", tool.name, m[1], pinned))
		}
	}

	m := ciChecks.FindStringSubmatch(section)
	if m == nil {
		return append(problems, "README.md's Development section does not say \"the checks above (`...`; not `...`)\" that CI runs")
	}
	var runs, runsNot, made []string
	for _, span := range codeSpan.FindAllStringSubmatch(m[1], -1) {
		runs = append(runs, span[1])
	}
	for _, span := range codeSpan.FindAllStringSubmatch(m[2], -1) {
		runsNot = append(runsNot, span[1])
	}
	for _, line := range strings.Split(ci, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, mk := range ciMake.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(made, mk[1]) {
				made = append(made, mk[1])
			}
		}
	}
	if !sameSet(runs, made) || slices.ContainsFunc(runsNot, func(s string) bool { return slices.Contains(made, s) }) {
		problems = append(problems, fmt.Sprintf("README.md says CI runs make %v and not %v; .ci/run makes %v", runs, runsNot, made))
	}
	return problems
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
