package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// After a statement the server refused for a missing table (here one renamed while the statement
// waited for its lock), recover, prune, doctor and inspect read the schema version to say what
// to run; a server that stopped answering then (the read waits for a lock on the version table
// when it freezes) is cut off by --pass-timeout, as the rest of the run is: the read had no
// bound but the run's interrupt, and the one-shot commands and the sweeper hung there for ever.
func TestCommandsFrozenWhileReadingTheVersionAfterAMissingTableAreCutOff(t *testing.T) {
	t.Parallel()
	// --pass-timeout counts from the run's start, and the run must reach its read of the version
	// before then: the steps up to the freeze (the run's start, its statement's lock wait, the
	// test's lock, rename and commit, the read's lock wait) took up to 2.4 s on a loaded machine,
	// and at 2s one-shot prune was cut off on a live server, still behind the first lock, before
	// it read the version (the test then failed: "never waited for a lock").
	const passTimeout = 5 * time.Second
	for _, c := range []struct {
		name string
		args []string
		lock func(context.Context, dbtest.DBTX) error // what its statement waits for before it fails
		want string                                   // on stderr (stdout for the sweeper)
	}{
		{"recover", []string{"recover", "--progress", "0", "--pass-timeout", "5s"}, dbtest.New().OpsLockTasks,
			`^pgadmit recover: cut off by --pass-timeout \(5s\): [^\n]*"gateway_tasks" does not exist[^\n]*\n$`},
		{"prune", []string{"prune", "--progress", "0", "--pass-timeout", "5s"}, dbtest.New().OpsLockCounters,
			`^pgadmit prune: cut off by --pass-timeout \(5s\): [^\n]*does not exist[^\n]*\n$`},
		{"doctor", []string{"doctor", "--lock-timeout", "0", "--pass-timeout", "5s"}, dbtest.New().OpsLockCounters,
			`^pgadmit doctor: cut off by --pass-timeout \(5s\): the books were not checked: [^\n]*does not exist[^\n]*\n$`},
		{"inspect", []string{"inspect", "--lock-timeout", "0", "--pass-timeout", "5s"}, dbtest.New().OpsLockCounters,
			`^pgadmit inspect: cut off by --pass-timeout \(5s\): no table was shown: [^\n]*does not exist[^\n]*\n$`},
		{"recover --every", []string{"recover", "--every", "200ms", "--pass-timeout", "5s"}, dbtest.New().OpsLockTasks,
			`(?m)^\S+ recover: pass failed: cut off by --pass-timeout \(5s\): [^\n]*"gateway_tasks" does not exist[^\n]*\n`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dbURL, pool := newDatabase(t)
			f, frozenURL := throughFreezer(t, dbURL, pool, nil)
			ctx := context.Background()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			if err := c.lock(ctx, tx); err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			cli := startCLI(t, ctx, append([]string{"--database-url", frozenURL}, c.args...)...)
			pgtest.AwaitLockWaiters(t, pool, c.name)
			// Its statement waits; the version table is locked, then its table renamed: the
			// statement fails, and the read of the version that follows waits, and freezes.
			holdLocks(t, pool, dbtest.New().OpsLockVersionTable)
			if err := dbtest.New().OpsHideCountersAndTasks(ctx, tx); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			// On the version table: right after the commit, the wait of the statement that
			// failed may still show, and a freeze then would hold back its error.
			pgtest.AwaitLockWaitersOn(t, pool, "pgadmit_goose_version", c.name+"'s read of the schema version")
			f.Freeze()
			frozen := time.Now()
			out := &cli.stderr
			if strings.Contains(c.name, "--every") {
				out = &cli.stdout
			}
			for deadline := time.Now().Add(30 * time.Second); !regexp.MustCompile(c.want).MatchString(out.String()); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s, frozen while it read the schema version after a missing table, was not cut off so within 30s: "+
						"stdout %q, stderr %q; want it cut off by --pass-timeout", c.name, cli.stdout.String(), cli.stderr.String())
				}
			}
			took := time.Since(started)
			t.Logf("%s: cut off %s after it started, %s after it froze; stdout %q, stderr %q", c.name, took.Round(time.Millisecond),
				time.Since(frozen).Round(time.Millisecond), cli.stdout.String(), cli.stderr.String())
			// --pass-timeout from the run's start (the bound's own start point: the freeze comes
			// at a time the load decides), then the cancel request's wait for a server that does
			// not answer (1s; endWait at most), and room for a loaded machine.
			if took > passTimeout+endWait+1500*time.Millisecond {
				t.Errorf("%s, frozen while it read the schema version after a missing table, was cut off %s after it started, want %s at most",
					c.name, took.Round(time.Millisecond), passTimeout+endWait)
			}
		})
	}
}
