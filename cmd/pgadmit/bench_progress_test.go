package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// A workload that runs longer than --progress says how far it has got on stderr, every interval:
// its name, elapsed and total time, ops so far and ops/s over the last interval. Stdout (the table,
// which compare-seed reads through --json) is the same as without --progress, but for the
// numbers; a workload shorter than the interval prints nothing more; a negative interval is a
// usage error.
func TestBenchPrintsItsProgress(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	dir := t.TempDir()
	run := func(json string, args ...string) (string, string) {
		t.Helper()
		args = append([]string{"--database-url", url, "bench", "--workers", "2", "--only", "W1", "--statements", "0",
			"--json", filepath.Join(dir, json)}, args...)
		out, errOut, code := cli(t, nil, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		return out, errOut
	}
	quiet, quietErr := run("quiet.json", "--duration", "100ms")
	if quietErr != "" {
		t.Errorf("bench of 100ms with the default --progress (10s) printed on stderr:\n%s", quietErr)
	}
	// 3 s, not the 700ms this test used: a reporter stalled by load past the workload's end
	// prints nothing (its time is up), and with three ticks in all a 0.5 s stall could leave
	// no line.
	out, errOut := run("progress.json", "--duration", "3s", "--progress", "200ms")
	t.Logf("stderr:\n%s", errOut)
	line := regexp.MustCompile(`^pgadmit bench: W1 window, many keys: (\d+ms|\d+(\.\d+)?s) of 3s, \d+ ops so far, \d+ ops/s over the last 200ms$`)
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if len(lines) < 1 || len(lines) > 14 {
		// Fourteen ticks fall within 3s; a slow machine drops some (the ticker skips them).
		t.Errorf("bench --duration 3s --progress 200ms: %d lines on stderr, want 1 to 14:\n%s", len(lines), errOut)
	}
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("progress line does not match %s:\n%s", line, l)
			continue
		}
		// None once the time is up, while the workers end their last operations.
		if elapsed, err := time.ParseDuration(m[1]); err != nil || elapsed >= 3*time.Second {
			t.Errorf("progress line past the workload's 3s (%v):\n%s", err, l)
		}
	}
	numbers := regexp.MustCompile(`[0-9a-f]{8}|\d+(\.\d+)?(ms|s)?`)
	spaces := regexp.MustCompile(` +`) // numbers of other widths pad the table's columns otherwise
	norm := func(s string) string { return spaces.ReplaceAllString(numbers.ReplaceAllString(s, "N"), " ") }
	if got, want := norm(out), norm(quiet); got != want {
		t.Errorf("stdout with --progress differs from stdout without:\n%s\nwant:\n%s", got, want)
	}
	for _, f := range []string{"quiet.json", "progress.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		var rep benchReport
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err != nil || len(rep.Results) != 1 || !rep.OK {
			t.Errorf("%s: %v, %+v", f, err, rep)
		}
	}
	_, errOut, code := cli(t, nil, "--database-url", url, "bench", "--progress", "-1s")
	if code != exitUsage || !strings.Contains(errOut, "--progress must be 0 (never) or at least 100ms, got -1s") {
		t.Errorf("bench --progress -1s: exit %d, %q; want a usage error", code, errOut)
	}
}
