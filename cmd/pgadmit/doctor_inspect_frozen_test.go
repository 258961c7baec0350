package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// doctor and inspect on a server that stopped answering (their statement waited for a lock when
// it froze: no lock_timeout ends that wait, the server is not there to apply it) are cut off by
// --pass-timeout, exit 1, saying what they did not check or show, as recover and prune are: they
// hung until Ctrl-C. The bound counts from the run's start, reading the schema version included.
func TestDoctorAndInspectOnAFrozenServerAreCutOffByPassTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, cmd string
		lock      func(context.Context, dbtest.DBTX) error // what its statement waits for when it freezes
		want      string                                   // its stderr
	}{
		{"doctor", "doctor", dbtest.New().OpsLockCounters,
			`the books were not checked: ratelimit: doctor: [^\n]*`},
		{"inspect", "inspect", dbtest.New().OpsLockCounters, `no table was shown: read windows: [^\n]*`},
		{"doctor while reading the schema version", "doctor", dbtest.New().OpsLockVersionTable,
			`the connection and the books were not checked: reading the schema version: context deadline exceeded`},
		{"inspect while reading the schema version", "inspect", dbtest.New().OpsLockVersionTable,
			`no table was shown: reading the schema version: context deadline exceeded`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runUntilFrozen(t, context.Background(), c.lock, c.cmd, "--lock-timeout", "0", "--pass-timeout", "2s")
			select {
			case code := <-r.exited:
				took := time.Since(r.frozen)
				t.Logf("%s returned %s after it waited; stderr %q", c.cmd, took.Round(time.Millisecond), r.stderr.String())
				want := `^pgadmit ` + c.cmd + `: cut off by --pass-timeout \(2s\): ` + c.want + `\n$`
				if code != exitFailure || r.stdout.String() != "" || !regexp.MustCompile(want).MatchString(r.stderr.String()) {
					t.Errorf("%s --pass-timeout 2s on a frozen server: exit %d, stdout %q, stderr %q; want exit 1, stderr matching %s",
						c.cmd, code, r.stdout.String(), r.stderr.String(), want)
				}
				// 2s at most since it waited, then the cancel request's wait for a server that does
				// not answer (1s) and the pool's close (1s at most: endWait in all), and room for a
				// loaded machine.
				if took > 2*time.Second+endWait+1500*time.Millisecond {
					t.Errorf("%s --pass-timeout 2s on a frozen server returned after %s", c.cmd, took.Round(time.Millisecond))
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s --pass-timeout 2s on a frozen server did not return within 30s; stderr %q", c.cmd, r.stderr.String())
			}
		})
	}
}

// Within --pass-timeout, doctor and inspect run as without it: the bound is the run's, not
// something that ends it early (a table lock another session held for a while, with
// --lock-timeout 0, is waited for until it goes).
func TestDoctorAndInspectWithinPassTimeoutRunAsUsual(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]string{"doctor": `^doctor: the books balance\n$`, "inspect": `^WINDOWS \(current\)\n  none\n`} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			release := lockCounters(t, pool)
			stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
			go func() {
				exited <- run(context.Background(), []string{"--database-url", url, cmd, "--lock-timeout", "0", "--pass-timeout", "1m"},
					stdout, stderr, func(string) string { return "" })
			}()
			pgtest.AwaitLockWaiters(t, pool, cmd)
			release()
			if code := <-exited; code != exitOK || stderr.String() != "" || !regexp.MustCompile(want).MatchString(stdout.String()) {
				t.Errorf("%s --pass-timeout 1m once the table was free: exit %d, stdout %q, stderr %q; want exit 0, stdout matching %s",
					cmd, code, stdout.String(), stderr.String(), want)
			}
		})
	}
}

// Cut off by --pass-timeout on a server that stopped answering, doctor says every --progress,
// until it ends, that it was cut off and is ending, as recover and prune do: its line went on
// saying that it was still checking the books, with what was left of a bound that had passed.
func TestDoctorCutOffOnAFrozenServerSaysItIsEnding(t *testing.T) {
	t.Parallel()
	r := runUntilFrozen(t, context.Background(), dbtest.New().OpsLockCounters, "doctor", "--lock-timeout", "0", "--pass-timeout", "2s",
		"--progress", "200ms")
	select {
	case code := <-r.exited:
		t.Logf("doctor returned %s after it waited; stderr:\n%s", time.Since(r.frozen).Round(time.Millisecond), r.stderr.String())
		bound := `it is cut off at --pass-timeout \(2s\), [1-9]\d*s from now\)\n`
		connection := `pgadmit doctor: so far \(\d+s\): still checking the connection \(whether a pooler in between keeps its server session: ` +
			`it reports when it ends; ` + bound // the check before the books', which may outlast an interval
		checking := `pgadmit doctor: so far \(\d+s\): still checking the books \(one statement over one snapshot: it reports when it ends; ` + bound
		ending := `pgadmit doctor: so far \(\d+s\): cut off by --pass-timeout \(2s\): still ending \(cancelling its statement\)\n`
		end := `pgadmit doctor: cut off by --pass-timeout \(2s\): the books were not checked: ratelimit: doctor: [^\n]*\n`
		want := `^(` + connection + `)*(` + checking + `)+(` + ending + `)+` + end + `$`
		if code != exitFailure || r.stdout.String() != "" || !regexp.MustCompile(want).MatchString(r.stderr.String()) {
			t.Errorf("doctor --progress 200ms --pass-timeout 2s on a frozen server: exit %d, stdout %q, stderr %q; want exit 1, stderr matching %s",
				code, r.stdout.String(), r.stderr.String(), want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("doctor --pass-timeout 2s on a frozen server did not return within 30s; stderr %q", r.stderr.String())
	}
}
