package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// A transaction left idle with counter rows locked (a gateway's WithTx, a long manual session)
// used to hang recover and prune for as long as it stayed open. They now give up on the rows
// behind it after --lock-timeout (short here: what is checked is what they leave, not how long
// they wait), do the rest, print what they did, and say plainly what they left and why, exiting 1.
func TestRecoverAndPruneGiveUpOnALockedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	q := dbtest.New()
	seedMaintenanceWork(t, pool, "free", "held")
	seeded := time.Now()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, key := range []string{"held-task", "held-stale"} {
		if n, err := q.OpsLockScopeCounters(ctx, tx, dbtest.OpsLockScopeCountersParams{ScopeType: "api_key", ScopeKey: key}); err != nil || n != 1 {
			t.Fatalf("lock the counter of %s: %d, %v", key, n, err)
		}
	}
	// A batch that times out is left whole: with batches of one row, the rows left are exactly
	// the ones behind the locks.
	const slack = 20 * time.Second // a shared machine: a hung run takes for ever, not this
	const bound = 300 * time.Millisecond
	said := "another session held locks it needed (a transaction left idle in transaction, a migration?): gave up on them at --lock-timeout and left"
	const bounded = "another transaction held a lock past the lock timeout (300ms)" // the bound, said once

	start := time.Now()
	out, errOut, code := cli(t, nil, "--database-url", url, "recover", "--batch-size", "1", "--lock-timeout", "300ms")
	if took := time.Since(start); took < bound || took > 2*bound+slack { // two steps meet the held reservation
		t.Errorf("recover took %v, want about %v", took, bound)
	}
	if code != exitFailure || !strings.Contains(errOut, said) || !strings.Contains(errOut, "release reservations of finished tasks: left 1 row: "+bounded) {
		t.Errorf("recover: exit %d, stderr %q: want 1, %q and the step's %q", code, errOut, said, bounded)
	}
	if !strings.Contains(out, "released 0 leases and 1 reservation; failed 2 attempts") {
		t.Errorf("recover printed %q, want what it did: the free reservation released, both attempts failed", out)
	}

	// The 1 s windows end, and a cutoff of 1 s passes them, 2 s after they were seeded.
	time.Sleep(time.Until(seeded.Add(2100 * time.Millisecond)))
	start = time.Now()
	out, errOut, code = cli(t, nil, "--database-url", url, "prune", "--older-than", "1s", "--batch-size", "1", "--lock-timeout", "300ms")
	if took := time.Since(start); took < bound || took > bound+slack {
		t.Errorf("prune took %v, want about %v", took, bound)
	}
	if code != exitFailure || !strings.Contains(errOut, said) || !strings.Contains(errOut, "release stale reservations") || !strings.Contains(errOut, bounded) {
		t.Errorf("prune: exit %d, stderr %q: want 1, %q and the step's %q", code, errOut, said, bounded)
	}
	if !strings.Contains(out, ": released 1 stale reservation; deleted 2 counter windows, 2 reservations") {
		t.Errorf("prune printed %q, want what it did: the free windows pruned", out)
	}

	_ = tx.Rollback(ctx) // the locks go: the next runs take what was left
	if out := cliOK(t, "--database-url", url, "recover"); !strings.Contains(out, "released 0 leases and 1 reservation; failed 0 attempts") {
		t.Errorf("recover once the locks went printed %q, want the held reservation released", out)
	}
	if out := cliOK(t, "--database-url", url, "prune", "--older-than", "1s"); !strings.Contains(out, ": released 1 stale reservation; deleted 2 counter windows, 2 reservations") {
		t.Errorf("prune once the locks went printed %q, want the held windows pruned", out)
	}
}

// A table a migration holds locked (ACCESS EXCLUSIVE, an ALTER TABLE left open) is met when the
// server parses a statement, which pgx, in its default exec mode (the connection string's here),
// does before the statement runs. recover and prune give up on it after --lock-timeout per
// statement that meets it (recover meets the tasks table in five steps, prune the counters table
// in two: 25 s and 10 s at the default 5s), and say that another session held locks, naming the
// bound, instead of hanging.
func TestRecoverAndPruneGiveUpOnALockedTable(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	said := "another session held locks it needed (a transaction left idle in transaction, a migration?): gave up on them at --lock-timeout and left"
	const bounded = "another transaction held a lock past the lock timeout (300ms)" // the bound, said once
	for _, c := range []struct {
		args  []string
		lock  func(context.Context, dbtest.DBTX) error
		waits int // statements that meet the lock
	}{
		{[]string{"recover"}, dbtest.New().OpsLockTasks, 5},
		{[]string{"prune", "--older-than", "1s"}, dbtest.New().OpsLockCounters, 2},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			holdLocks(t, pool, c.lock)
			// A hang ends here, and says so otherwise than the lock waits.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			start := time.Now()
			code := run(ctx, append(append([]string{"--database-url", url}, c.args...), "--lock-timeout", "300ms"), &out, &errOut, func(string) string { return "" })
			took := time.Since(start)
			if code != exitFailure || !strings.Contains(errOut.String(), said) || !strings.Contains(errOut.String(), bounded+": ERROR: ") {
				t.Errorf("pgadmit %s on a locked table: exit %d after %s, stderr %q; want exit 1, %q and %q (55P03)",
					c.args[0], code, took.Round(time.Millisecond), errOut.String(), said, bounded)
			}
			// At least one wait of the bound; sooner than the default bound could have let it give up.
			if took < bound || took >= time.Duration(c.waits)*defaultLockTimeout {
				t.Errorf("pgadmit %s --lock-timeout 300ms gave up after %s, want between %s and %s", c.args[0], took, bound, time.Duration(c.waits)*defaultLockTimeout)
			}
		})
	}
}

// The take of a recover or prune run's lease waits for a lock at most 4 s, whatever
// --lock-timeout says (it ignores Ctrl-C, so that a take that may commit is not left half
// done, and has 5 s of its own). With the default --lock-timeout, 5s, or any above 4s, a
// migration holding the leases table made the run give up after 4 s and say it gave up "after
// 5s (--lock-timeout)": the error now names the bound that applied.
func TestRecoverAndPruneNameTheLeaseTakesBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		said string
	}{
		{[]string{"recover"}, "gave up on them at the bound of a run's lease (less than --lock-timeout 5s) and did nothing;"},
		{[]string{"prune", "--older-than", "1s", "--lock-timeout", "1h"}, "gave up on them at the bound of a run's lease (less than --lock-timeout 1h) and did nothing;"},
		{[]string{"recover", "--lock-timeout", "300ms"}, "gave up on them at --lock-timeout and did nothing;"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			holdLocks(t, pool, dbtest.New().OpsLockMaintenanceLeases)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			code := run(ctx, append([]string{"--database-url", url}, c.args...), &out, &errOut, func(string) string { return "" })
			if code != exitFailure || !strings.Contains(errOut.String(), c.said) || !strings.Contains(errOut.String(), "lease") {
				t.Errorf("pgadmit %s on a locked leases table: exit %d, stderr %q; want exit 1, %q",
					strings.Join(c.args, " "), code, errOut.String(), c.said)
			}
		})
	}
}
