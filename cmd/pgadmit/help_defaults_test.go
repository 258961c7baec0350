package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The commands' help texts are prose, so the defaults they state are written out; this test
// holds them to the values the code uses, so that changing a default without its text fails.
func TestHelpStatesTheDefaultsTheCodeUses(t *testing.T) {
	defaults := []struct {
		name string
		text *regexp.Regexp // its first group is the duration the help states
		want time.Duration
		what string // what it is, in the error
	}{
		{"lock-timeout", regexp.MustCompile(`--lock-timeout\s+\((\S+) by default`), defaultLockTimeout, "--lock-timeout by default"},
		{"lost grace", regexp.MustCompile(`more\s+than\s+(\S+)\s+ago\s+are\s+returned`), ratelimit.DefaultLostAllotmentGrace, "the lost-holder grace"},
		{"end wait", regexp.MustCompile(`waits\s+(\S+)\s+at\s+most\s+for\s+its\s+statement's\s+cancel`), endWait,
			"how long a run cut off waits at most for its statement and lease"},
		{"lease TTL", regexp.MustCompile(`until\s+it\s+expires\s+\((\S+)\s+at\s+most`), ratelimit.DefaultMaintenanceLeaseTTL,
			"how long after its last renewal a run's lease expires"},
	}
	seen := map[string]int{}
	for _, c := range commands() {
		for _, d := range defaults {
			for _, m := range d.text.FindAllStringSubmatch(c.help, -1) {
				seen[d.name]++
				if want := durationtext.Operator(d.want); m[1] != want {
					t.Errorf("%s --help: %s is %s, it says %s", c.name, d.what, want, m[1])
				}
			}
		}
	}
	// Each text is found where it is written today: a rewording that the patterns miss fails
	// here rather than passing with nothing checked.
	if seen["lock-timeout"] != 4 || seen["lost grace"] != 1 || seen["end wait"] != 2 || seen["lease TTL"] != 1 {
		t.Errorf("defaults found in the help texts: %v, want lock-timeout 4, lost grace 1, end wait 2 and lease TTL 1", seen)
	}
}

// Every flag that takes a value names it in --help as the CLI reference (docs/cli.md) does (--workers
// N, --every interval, --json file), never by the Go type the flag package falls back to: demo's
// --clients, --instances and --keys, recover's --batch-size and --max-requeues and prune's
// --batch-size showed "int", where bench's like flags and docs/cli.md say N.
func TestHelpNamesEveryFlagValue(t *testing.T) {
	t.Parallel()
	goType := regexp.MustCompile(`(?m)^  (--[a-z-]+) (int|int64|uint|uint64|float|string|value)$`)
	for _, c := range commands() {
		out := cliOK(t, c.name, "--help")
		for _, m := range goType.FindAllStringSubmatch(out, -1) {
			t.Errorf("pgadmit %s --help: %s takes a value named by its Go type, %q", c.name, m[1], m[2])
		}
	}
}

// The help texts' prose keeps the width of the rest (96 columns, a few 97): demo's --http
// paragraph had a line of 110. Flag usages, one line each, are left to the terminal.
func TestHelpProseKeepsItsWidth(t *testing.T) {
	t.Parallel()
	helps := map[string]string{"pgadmit": cliOK(t, "--help")}
	for _, c := range commands() {
		helps[c.name] = cliOK(t, c.name, "--help")
	}
	for name, out := range helps {
		for line := range strings.SplitSeq(out, "\n") {
			if len(line) > 97 && !strings.HasPrefix(line, "      ") {
				t.Errorf("%s --help has a line of %d columns: %q", name, len(line), line)
			}
		}
	}
}

// doctor's --progress says what doctor prints every interval, that it is still checking and what
// bounds it, as its help and docs/cli.md do: it said "how far it has got", recover's and prune's
// words, of a check that has nothing to count until it ends.
func TestDoctorHelpSaysWhatItsProgressPrints(t *testing.T) {
	t.Parallel()
	out := cliOK(t, "doctor", "--help")
	_, after, _ := strings.Cut(out, "\n  --progress interval\n")
	usage, _, _ := strings.Cut(after, "\n")
	if want := "that it is still checking, and when --pass-timeout cuts it off"; !strings.Contains(usage, want) ||
		strings.Contains(usage, "how far it has got") {
		t.Errorf("doctor --help of --progress: %q, want it to say %q", usage, want)
	}
}

// Every --pass-timeout says in --help, in the same words, what it cuts off, its floor, what the
// run cut off leaves and its default: doctor's and inspect's said "cut off the run after
// duration, at least 100ms, and exit 1", not what they left unchecked or unshown, as prune's
// says what it did.
func TestPassTimeoutHelpSaysWhatACutOffRunLeaves(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]string{
		"recover": "cut off a pass still running after duration (at least 100ms): with --every it is logged as failed and the " +
			"sweeper goes on (default 1m); a single pass, unbounded unless given, prints what it did and exits 1",
		"prune":   "cut off a run still going after duration (at least 100ms): it prints what it did and exits 1 (default: no bound)",
		"doctor":  "cut off a run still going after duration (at least 100ms): it says what it did not check and exits 1 (default: no bound)",
		"inspect": "cut off a run still going after duration (at least 100ms): it shows no table and exits 1 (default: no bound)",
	} {
		out := cliOK(t, cmd, "--help")
		_, after, _ := strings.Cut(out, "\n  --pass-timeout duration\n      ")
		if usage, _, _ := strings.Cut(after, "\n"); usage != want {
			t.Errorf("%s --help of --pass-timeout: %q, want %q", cmd, usage, want)
		}
	}
}

// Every flag that the CLI reference (docs/cli.md) gives a count, `--flag N`, names it N in --help too:
// inspect's --limit said "rows" where every other count (--batch-size, --workers, --keys) says N.
func TestHelpNamesACountNAsTheCLIDocDoes(t *testing.T) {
	t.Parallel()
	row := regexp.MustCompile("(?m)^\\| `(--[a-z-]+) N` \\|")
	checked := 0
	for _, section := range cliDocSections(t)[1:] {
		cmd := section.helpArgs[0]
		help := cliOK(t, cmd, "--help")
		for _, m := range row.FindAllStringSubmatch(section.text, -1) {
			checked++
			if !strings.Contains(help, "\n  "+m[1]+" N\n") {
				t.Errorf("pgadmit %s --help does not name the value of %s N, as docs/cli.md does", cmd, m[1])
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d counts of docs/cli.md, want every one (at least 10)", checked)
	}
}

// Flags whose limits or defaults only a usage error or the README told say them in --help, in the
// words of the usage error, and their rows in the CLI reference (docs/cli.md) say the same: recover --max-requeues (must
// be >= 0) and prune --older-than (must be positive) named no limit, and bench --only no default
// (the workloads that are not opt-in, W1 to W9). bench's long help and docs/cli.md's T1 paragraph
// name that default too.
func TestHelpSaysTheLimitsAndDefaultsTheCodeUses(t *testing.T) {
	t.Parallel()
	var dflt []string
	for _, w := range bench.Workloads() {
		if !w.OptIn() {
			dflt = append(dflt, w.Code)
		}
	}
	workloads := dflt[0] + " to " + dflt[len(dflt)-1]
	doc := cliDoc(t)
	noDB := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}
	for _, c := range []struct {
		cmd, flag, value string // the flag as --help and docs/cli.md show it, with its value's name
		bad              string // a value the code refuses ("": none)
		says             string // what its --help usage, its usage error and its docs/cli.md row say
		row              string // its docs/cli.md row's start, default included
	}{
		{"recover", "--max-requeues", "N", "-1", "must be >= 0", "| `--max-requeues N` | `5` |"},
		{"prune", "--older-than", "duration", "0s", "must be positive", "| `--older-than D` | `24h` |"},
		{"bench", "--only", "list", "", "default " + workloads, "| `--only LIST` | " + workloads + " |"},
	} {
		_, after, ok := strings.Cut(cliOK(t, c.cmd, "--help"), "\n  "+c.flag+" "+c.value+"\n")
		if usage, _, _ := strings.Cut(after, "\n"); !ok || !strings.Contains(usage, c.says) {
			t.Errorf("pgadmit %s --help of %s: %q, want it to say %q", c.cmd, c.flag, usage, c.says)
		}
		if c.bad != "" {
			want := "pgadmit " + c.cmd + ": " + c.flag + " " + c.says + ", got " + c.bad
			if _, errOut, code := cli(t, noDB, c.cmd, c.flag, c.bad); code != exitUsage || !strings.HasPrefix(errOut, want) {
				t.Errorf("pgadmit %s %s %s: exit %d, stderr %q; want exit %d, %q", c.cmd, c.flag, c.bad, code, errOut, exitUsage, want)
			}
		}
		_, after, ok = strings.Cut(doc, "\n"+c.row)
		if row, _, _ := strings.Cut(after, "\n"); !ok || !strings.Contains(c.row+row, strings.TrimPrefix(c.says, "default ")) {
			t.Errorf("docs/cli.md's row of %s %s: %q, want one starting %q that says %q", c.cmd, c.flag, c.row+row, c.row, c.says)
		}
	}
	if help, want := cliOK(t, "bench", "--help"), "a run without --only is "+workloads+"."; !strings.Contains(help, want) {
		t.Errorf("pgadmit bench --help does not say %q", want)
	}
	if want := "compare, stays " + workloads + " ("; !strings.Contains(doc, want) {
		t.Errorf("docs/cli.md's T1 paragraph does not say the default run %q", want)
	}
}
