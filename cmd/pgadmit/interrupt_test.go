package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// lockCounters holds an ACCESS EXCLUSIVE lock on the counters table of pool's database, as a
// long migration's ALTER TABLE would, until the returned release is called (or the test ends).
func lockCounters(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	return holdLocks(t, pool, dbtest.New().OpsLockCounters)
}

// holdLocks runs lock in a transaction on pool and keeps it open, holding what lock locked,
// until release is called or the test ends.
func holdLocks(t *testing.T, pool *pgxpool.Pool, lock func(context.Context, dbtest.DBTX) error) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock(ctx, tx); err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(ctx) }
	t.Cleanup(release)
	return release
}

// A Ctrl-C while a migration runs is reported as an interrupt, as it is everywhere else in the
// CLI, not as goose's "partial migration error" with the server's cancellation in it.
func TestInterruptDuringMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	cliOK(t, "--database-url", url, "migrate", "up", "--to", "1")
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Migration 2 alters the counters table: it waits behind this lock until the interrupt.
	lockCounters(t, pool)
	for _, args := range [][]string{{"migrate", "up"}, {"demo", "--duration", "5s"}} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errOut bytes.Buffer
			exited := make(chan int, 1)
			go func() {
				exited <- run(ctx, append([]string{"--database-url", url}, args...), &out, &errOut, func(string) string { return "" })
			}()
			pgtest.AwaitLockWaiters(t, pool, "the migration")
			cancel()
			code := <-exited
			if code != exitFailure || errOut.String() != "pgadmit "+args[0]+": interrupted\n" {
				t.Errorf("pgadmit %s interrupted mid-migration: exit %d, stderr %q; want exit 1, \"interrupted\"",
					strings.Join(args, " "), code, errOut.String())
			}
			pgtest.AwaitNoLockWaiters(t, pool, "the migration")
		})
	}
}

// inspect and doctor read tables that a long migration (or another session) may hold locked:
// they give up after --lock-timeout (short here) with an error that says so, naming the bound,
// instead of hanging.
func TestOperatorReadsGiveUpOnALockedTable(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	lockCounters(t, pool)
	const bound = 300 * time.Millisecond
	for _, cmd := range []string{"inspect", "doctor"} {
		t.Run(cmd, func(t *testing.T) {
			// Past the bound, but short of a hang: ctx ends the test if the command waits on.
			ctx, cancel := context.WithTimeout(context.Background(), defaultLockTimeout+10*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			start := time.Now()
			code := run(ctx, []string{"--database-url", url, cmd, "--lock-timeout", "300ms"}, &out, &errOut, func(string) string { return "" })
			took := time.Since(start)
			said := "locked by another session (a migration?): gave up after 300ms (--lock-timeout)"
			if code != exitFailure || !strings.Contains(errOut.String(), said) {
				t.Errorf("pgadmit %s on a locked table: exit %d after %s, stderr %q; want exit 1, %q",
					cmd, code, took.Round(time.Millisecond), errOut.String(), said)
			}
			// The bound, not the default: it gave up sooner than the default lets it.
			if took < bound || took >= defaultLockTimeout {
				t.Errorf("pgadmit %s --lock-timeout 300ms on a locked table gave up after %s, want between %s and %s", cmd, took, bound, defaultLockTimeout)
			}
			pgtest.AwaitNoLockWaiters(t, pool, cmd)
		})
	}
}
