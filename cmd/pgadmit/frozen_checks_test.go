package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// The sweeper's start-up checks and doctor's pooler check, on a server that stopped answering,
// end within endWait of an interrupt or of --pass-timeout, as a pass does. Frozen in
// CheckPooler's probe (its prober's second statement, while the holder's transaction is open),
// neither ended at all: the probe's clean-up waited for the server with no bound.
func TestChecksOnAFrozenServerEndWithinEndWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		args      []string
		probe     bool // frozen in CheckPooler's probe; else while the schema version is read
		interrupt bool
		bound     time.Duration // from the freeze to the end (or, for the sweeper cut off, the warning)
		want      string        // stderr, all of it ("" with want matched against stdout)
		stdout    string
	}{
		{name: "sweeper interrupted while reading the schema version", args: []string{"recover", "--every", "200ms"},
			interrupt: true, stdout: `(?m)^\S+ recover: stopped\n\z`},
		{name: "sweeper interrupted in the pooler check", args: []string{"recover", "--every", "200ms"},
			probe: true, interrupt: true, stdout: `(?m)^\S+ recover: stopped\n\z`},
		{name: "sweeper cut off in the pooler check", args: []string{"recover", "--every", "200ms", "--pass-timeout", "2s"},
			probe: true, bound: 2 * time.Second, want: `^pgadmit recover: warning: the start-up checks \(the schema version, the connection pooler\) ` +
				`were cut off by --pass-timeout \(2s\): not checked\n`},
		{name: "doctor interrupted in the pooler check", args: []string{"doctor"}, probe: true, interrupt: true,
			want: `^pgadmit doctor: interrupted\n$`},
		// CheckPooler ends with its context now, within endWait: its own error, that of the
		// prober's statement cut off; or, given up on after endWait (a slow machine), doctor's.
		{name: "doctor cut off in the pooler check", args: []string{"doctor", "--pass-timeout", "2s"}, probe: true, bound: 2 * time.Second,
			want: `^pgadmit doctor: cut off by --pass-timeout \(2s\): the connection and the books were not checked: ` +
				`(ratelimit: pooler check: timeout|checking the connection pooler): context deadline exceeded\n$`},
		// Its progress says, from the start, that it checks the connection, and what bounds it (never
		// "0s from now"): it said nothing until the books' check, 10 s or more behind a proxy that
		// queued its probes.
		{name: "doctor cut off in the pooler check, saying so every --progress", args: []string{"doctor", "--pass-timeout", "2s", "--progress", "100ms"},
			probe: true, bound: 2 * time.Second,
			want: `^(pgadmit doctor: so far \(\d+s\): still checking the connection \(whether a pooler in between keeps its server session: ` +
				`it reports when it ends; it is cut off at --pass-timeout \(2s\), [1-9]\d*s from now\)\n)+` +
				`(pgadmit doctor: so far \(\d+s\): cut off by --pass-timeout \(2s\): still ending \(cancelling its statement\)\n)*` +
				`pgadmit doctor: cut off by --pass-timeout \(2s\): the connection and the books were not checked: ` +
				`(ratelimit: pooler check: timeout|checking the connection pooler): context deadline exceeded\n$`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, interrupt := context.WithCancel(context.Background())
			t.Cleanup(interrupt)
			var r frozenRun
			if c.probe {
				r = runFrozenInPoolerProbe(t, ctx, c.args...)
			} else {
				r = runUntilFrozen(t, ctx, dbtest.New().OpsLockVersionTable, c.args[0], c.args[1:]...)
			}
			if c.interrupt {
				interrupt()
			}
			check := func() bool {
				return (c.want == "" || regexp.MustCompile(c.want).MatchString(r.stderr.String())) &&
					(c.stdout == "" || regexp.MustCompile(c.stdout).MatchString(r.stdout.String()))
			}
			exit := -1
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				select {
				case exit = <-r.exited:
				default:
				}
				if exit >= 0 || (c.args[0] == "recover" && !c.interrupt && check()) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s on a frozen server: not ended within 30s; stdout %q, stderr %q", c.name, r.stdout.String(), r.stderr.String())
				}
			}
			took := time.Since(r.frozen)
			t.Logf("%s: %s after the freeze (exit %d); stdout %q, stderr %q", c.name, took.Round(time.Millisecond), exit, r.stdout.String(), r.stderr.String())
			if !check() || (c.interrupt && c.args[0] == "recover" && (exit != exitOK || r.stderr.String() != "")) {
				t.Errorf("%s on a frozen server: exit %d, stdout %q, stderr %q; want stdout matching %q, stderr %q",
					c.name, exit, r.stdout.String(), r.stderr.String(), c.stdout, c.want)
			}
			if took > c.bound+endWait+1500*time.Millisecond {
				t.Errorf("%s on a frozen server: %s after the freeze, want %s at most", c.name, took.Round(time.Millisecond), c.bound+endWait)
			}
		})
	}
}

// runFrozenInPoolerProbe runs the CLI with args, after --database-url, in ctx, on a database of
// its own reached through a freezer that freezes as CheckPooler's prober runs its statement the
// second time in its first probe: the holder's transaction is open then. That statement
// (PoolerBackendPid, pg_backend_pid) is sent three times before the first probe, in the check's
// transaction (two runs, and a preparation by name deallocated there), and three times in a
// probe (the prober's run, the holder's, the prober's again).
func runFrozenInPoolerProbe(t *testing.T, ctx context.Context, args ...string) frozenRun {
	t.Helper()
	dbURL, pool := newDatabase(t)
	f, frozenURL := throughFreezer(t, dbURL, pool, nil)
	f.FreezeAt("pg_backend_pid", 3+3)
	r := frozenRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan int, 1)}
	go func() {
		r.exited <- run(ctx, append([]string{"--database-url", frozenURL}, args...), r.stdout, r.stderr, func(string) string { return "" })
	}()
	select {
	case <-f.SentFrozen():
	case <-time.After(30 * time.Second):
		t.Fatalf("%v never ran CheckPooler's probe twice", args)
	}
	r.frozen = time.Now()
	return r
}
