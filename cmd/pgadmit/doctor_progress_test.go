package main

import (
	"context"
	"regexp"
	"testing"
)

// A doctor that runs long (here behind a table lock another session holds; elsewhere a scan of a
// large database) says on stderr, every --progress, that it is still checking, as recover and
// prune say how far they have got; the report still goes to stdout alone. A quick doctor prints
// nothing there, and a negative interval, or one under 100ms (but 0), is a usage error: a line
// every nanosecond would print continuously.
func TestDoctorPrintsItsProgress(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	if out, errOut, code := cli(t, nil, "--database-url", url, "doctor"); code != exitOK || errOut != "" {
		t.Errorf("a quick doctor: exit %d, stdout %q, stderr %q; want exit 0 and nothing on stderr", code, out, errOut)
	}
	release := lockCounters(t, pool)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"--database-url", url, "doctor", "--progress", "100ms"}, stdout, stderr, func(string) string { return "" })
	}()
	const line = `pgadmit doctor: so far \(\d+s\): still checking the books \(one statement over one snapshot: it reports when it ends\)\n`
	awaitLog(t, stderr, `^`+line)
	release()
	if code := <-exited; code != exitOK || stdout.String() != "doctor: the books balance\n" {
		t.Errorf("doctor --progress 100ms once the table was free: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if !regexp.MustCompile(`^(` + line + `)+$`).MatchString(stderr.String()) {
		t.Errorf("doctor --progress 100ms behind a table lock: stderr %q", stderr.String())
	}
	for _, every := range []string{"-1s", "1ns", "1ms", "99ms"} {
		out, errOut, code := cli(t, nil, "--database-url", url, "doctor", "--progress", every)
		want := "pgadmit doctor: --progress must be 0 (never) or at least 100ms, got " + every + " (see pgadmit doctor --help)\n"
		if code != exitUsage || out != "" || errOut != want {
			t.Errorf("doctor --progress %s: exit %d, stdout %q, stderr %q; want exit %d, only %q", every, code, out, errOut, exitUsage, want)
		}
	}
}
