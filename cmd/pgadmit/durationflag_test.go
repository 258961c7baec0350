package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A duration flag given a value without a unit, or with one Go has not (d), says why and what a
// duration looks like: Go's flag package said only "parse error", which told an operator who
// wrote --older-than 7d or --every 30 nothing.
func TestBadDurationsSayWhatADurationIs(t *testing.T) {
	t.Parallel()
	db := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}
	const hint = "(write a duration such as 500ms, 30s, 15m or 168h; a day is 24h)"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prune", "--older-than", "7d"}, `invalid value "7d" for --older-than: unknown unit "d" in duration "7d" ` + hint},
		{[]string{"prune", "--task-retention=30d"}, `invalid value "30d" for --task-retention: unknown unit "d" in duration "30d" ` + hint},
		{[]string{"recover", "--every", "30"}, `invalid value "30" for --every: missing unit in duration "30" ` + hint},
		{[]string{"--connect-timeout", "5", "doctor"}, `invalid value "5" for --connect-timeout: missing unit in duration "5" ` + hint},
		{[]string{"inspect", "--connect-timeout", "soon"}, `invalid value "soon" for --connect-timeout: invalid duration "soon" ` + hint},
		{[]string{"bench", "--duration", "1sec"}, `invalid value "1sec" for --duration: unknown unit "sec" in duration "1sec" ` + hint},
		{[]string{"doctor", "--lock-timeout", "5"}, `invalid value "5" for --lock-timeout: missing unit in duration "5" ` + hint},
		// Well written, but past what a duration holds: Go says "invalid duration", and the hint
		// would show the operator the form they used.
		{[]string{"prune", "--older-than", "3000000h"}, `invalid value "3000000h" for --older-than: out of range: a duration is at most 2562047h`},
		{[]string{"recover", "--every", "99999999999h"}, `invalid value "99999999999h" for --every: out of range: a duration is at most 2562047h`},
		{[]string{"--connect-timeout=-9999999999999s", "doctor"}, `invalid value "-9999999999999s" for --connect-timeout: out of range: a duration is at least -2562047h`},
	} {
		out, errOut, code := cli(t, db, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("pgadmit %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, exitUsage, tc.want)
		}
		oneLine(t, "usage error of pgadmit "+strings.Join(tc.args, " "), errOut)
	}
	// --help still names their values durations.
	for cmd, flags := range map[string][]string{"bench": {"--think", "--duration"}, "prune": {"--connect-timeout", "--lock-timeout"}, "inspect": {"--lock-timeout"}} {
		out := cliOK(t, cmd, "--help")
		for _, f := range flags {
			if !strings.Contains(out, "\n  "+f+" duration\n") {
				t.Errorf("pgadmit %s --help does not show %s as a duration:\n%s", cmd, f, out)
			}
		}
	}
}

// --help shows a duration default as an operator writes it and as the CLI reference, docs/cli.md,
// gives it (24h, 168h, 1m), not as Go's Duration.String does (24h0m0s, 168h0m0s, 1m0s); the
// flags still read any form Go reads, 24h0m0s included.
func TestHelpWritesDurationsAsTheCLIDocDoes(t *testing.T) {
	t.Parallel()
	// A table row of a duration flag and its default: | `--older-than D` | `24h` | ...
	row := regexp.MustCompile("(?m)^\\| `(--[a-z-]+) D` \\| `([^`]+)`")
	checked := 0
	for _, section := range cliDocSections(t) {
		args := section.helpArgs
		help := cliOK(t, args...)
		for _, m := range row.FindAllStringSubmatch(section.text, -1) {
			flag, def := m[1], m[2]
			if d, err := time.ParseDuration(def); err != nil || d == 0 {
				continue // not a duration, or off: --help shows no default
			}
			_, after, ok := strings.Cut(help, "\n  "+flag+" ")
			if !ok {
				t.Errorf("pgadmit %s has no %s, which docs/cli.md documents", strings.Join(args, " "), flag)
				continue
			}
			if usage := strings.SplitN(after, "\n", 3)[1]; !strings.Contains(usage, "(default "+def+")") && !strings.Contains(usage, "(default "+def+";") {
				t.Errorf("pgadmit %s of %s: %q, want docs/cli.md's default %s", strings.Join(args, " "), flag, usage, def)
			}
			checked++
		}
	}
	if checked < 8 {
		t.Errorf("checked %d duration defaults of docs/cli.md, want every one (at least 8)", checked)
	}
	for _, c := range append(commands(), nil) {
		args := []string{"--help"}
		if c != nil {
			args = []string{c.name, "--help"}
		}
		if out := cliOK(t, args...); regexp.MustCompile(`\(default [^)]*\d(h0m|m0s)`).MatchString(out) {
			t.Errorf("pgadmit %s shows a duration as Go writes it:\n%s", strings.Join(args, " "), out)
		}
	}
	// Parsing is Go's still: the form the help used to show is read, as 1h30m and 90m are.
	_, errOut, code := cli(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?sslmode=disable"},
		"prune", "--older-than", "24h0m0s", "--task-retention", "1h30m", "--progress", "90m")
	if code != exitFailure || !strings.Contains(errOut, "cannot connect") {
		t.Errorf("prune --older-than 24h0m0s --task-retention 1h30m --progress 90m: exit %d, %q; want the flags read and a failure to connect", code, errOut)
	}
}
