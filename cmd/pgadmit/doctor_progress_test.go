package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// A doctor that runs long (here behind a table lock another session holds; elsewhere a scan of a
// large database) says on stderr, every --progress, that it is still checking, and what bounds
// it, as recover and prune say how far they have got and what bounds them: with --pass-timeout,
// when it is cut off, counted from the run's start (its line said nothing of the bound); without,
// that --pass-timeout would bound it. The report still goes to stdout alone. A quick doctor prints
// nothing there, and a negative interval, or one under 100ms (but 0), is a usage error: a line
// every nanosecond would print continuously.
func TestDoctorPrintsItsProgress(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	if out, errOut, code := cli(t, nil, "--database-url", url, "doctor"); code != exitOK || errOut != "" {
		t.Errorf("a quick doctor: exit %d, stdout %q, stderr %q; want exit 0 and nothing on stderr", code, out, errOut)
	}
	const checking = `pgadmit doctor: so far \(\d+s\): still checking the books \(one statement over one snapshot: it reports when it ends; `
	for _, c := range []struct {
		args  []string
		bound string // the end of its line
	}{
		{nil, `--pass-timeout bounds the run, Ctrl-C stops it\)\n`},
		{[]string{"--pass-timeout", "1m"}, `it is cut off at --pass-timeout \(1m\), ([1-9]\d*s|1m) from now\)\n`},
	} {
		release := lockCounters(t, pool)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
		go func() {
			exited <- run(ctx, append([]string{"--database-url", url, "doctor", "--progress", "100ms"}, c.args...), stdout, stderr,
				func(string) string { return "" })
		}()
		line := checking + c.bound
		// (?m): the books' line may follow lines about the connection's check (below).
		awaitLog(t, stderr, `(?m)^`+line)
		release()
		if code := <-exited; code != exitOK || stdout.String() != "doctor: the books balance\n" {
			t.Errorf("doctor --progress 100ms %v once the table was free: exit %d, stdout %q, stderr %q", c.args, code, stdout.String(), stderr.String())
		}
		// Its check of the connection, before the books', may outlast an interval on a busy machine.
		connection := `pgadmit doctor: so far \(\d+s\): still checking the connection \(whether a pooler in between keeps its server session: ` +
			`it reports when it ends; ` + c.bound
		if !regexp.MustCompile(`^(` + connection + `)*(` + line + `)+$`).MatchString(stderr.String()) {
			t.Errorf("doctor --progress 100ms %v behind a table lock: stderr %q", c.args, stderr.String())
		}
		// What is left of the bound: at most what it was, less the time the run has taken, as the
		// same line says it (the one rounded to the nearest second, the other up: together at most
		// the bound and a second and a half).
		for _, m := range regexp.MustCompile(`so far \((\d+)s\)[^\n]*, (\d+)s from now`).FindAllStringSubmatch(stderr.String(), -1) {
			elapsed, _ := strconv.Atoi(m[1])
			if left, _ := strconv.Atoi(m[2]); elapsed+left > 61 {
				t.Errorf("doctor --pass-timeout 1m said %ss of its bound was left, %ss into its run", m[2], m[1])
			}
		}
	}
	for _, every := range []string{"-1s", "1ns", "1ms", "99ms"} {
		out, errOut, code := cli(t, nil, "--database-url", url, "doctor", "--progress", every)
		want := "pgadmit doctor: --progress must be 0 (never) or at least 100ms, got " + every + " (see pgadmit doctor --help)\n"
		if code != exitUsage || out != "" || errOut != want {
			t.Errorf("doctor --progress %s: exit %d, stdout %q, stderr %q; want exit %d, only %q", every, code, out, errOut, exitUsage, want)
		}
	}
}

// passBound's time left rounds up to the second, so that the last lines before --pass-timeout
// cuts a run off say 1s, not "0s from now" (rounded to the nearest second, the last half
// second said 0s), and no line says less is left than is: recover's, prune's and doctor's alike.
func TestPassBoundRoundsTheTimeLeftUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		left time.Duration // the deadline, from the call's start
		want string
	}{
		{300 * time.Millisecond, "it is cut off at --pass-timeout (2s), 1s from now"},
		{1400 * time.Millisecond, "it is cut off at --pass-timeout (2s), 2s from now"},
		{-time.Millisecond, "it is cut off at --pass-timeout (2s), 1s from now"}, // passed, pctx's end not yet seen
	} {
		pctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(c.left))
		got := passBound(pctx, 2*time.Second)
		cancel()
		if got != c.want {
			t.Errorf("passBound %s before the deadline = %q, want %q", c.left, got, c.want)
		}
	}
}
