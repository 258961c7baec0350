package main

import (
	"strings"
	"testing"
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
		{[]string{"prune", "--older-than", "7d"}, `invalid value "7d" for flag -older-than: unknown unit "d" in duration "7d" ` + hint},
		{[]string{"prune", "--task-retention=30d"}, `invalid value "30d" for flag -task-retention: unknown unit "d" in duration "30d" ` + hint},
		{[]string{"recover", "--every", "30"}, `invalid value "30" for flag -every: missing unit in duration "30" ` + hint},
		{[]string{"--connect-timeout", "5", "doctor"}, `invalid value "5" for flag -connect-timeout: missing unit in duration "5" ` + hint},
		{[]string{"inspect", "--connect-timeout", "soon"}, `invalid value "soon" for flag -connect-timeout: invalid duration "soon" ` + hint},
		{[]string{"bench", "--duration", "1sec"}, `invalid value "1sec" for flag -duration: unknown unit "sec" in duration "1sec" ` + hint},
	} {
		out, errOut, code := cli(t, db, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("pgadmit %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, exitUsage, tc.want)
		}
		oneLine(t, "usage error of pgadmit "+strings.Join(tc.args, " "), errOut)
	}
	// --help still names their values durations.
	for cmd, flags := range map[string][]string{"bench": {"--think", "--duration"}, "prune": {"--connect-timeout"}} {
		out := cliOK(t, cmd, "--help")
		for _, f := range flags {
			if !strings.Contains(out, "\n  "+f+" duration\n") {
				t.Errorf("pgadmit %s --help does not show %s as a duration:\n%s", cmd, f, out)
			}
		}
	}
}
