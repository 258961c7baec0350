package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// A transaction left idle with counter rows locked (a gateway's WithTx, a long manual session)
// used to hang recover and prune for as long as it stayed open. They now give up on the rows
// behind it after operatorLockTimeout, do the rest, print what they did, and say plainly what
// they left and why, exiting 1.
func TestRecoverAndPruneGiveUpOnALockedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	q := dbtest.New()
	seedMaintenanceWork(t, pool, "free", "held")
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
	said := "another session held locks it needed (a transaction left idle in transaction, a migration?): gave up on them after 5s"

	start := time.Now()
	out, errOut, code := cli(t, nil, "--database-url", url, "recover", "--batch-size", "1")
	if took := time.Since(start); took < operatorLockTimeout || took > 2*operatorLockTimeout+slack { // two steps meet the held reservation
		t.Errorf("recover took %v, want about %v", took, operatorLockTimeout)
	}
	if code != exitFailure || !strings.Contains(errOut, said) || !strings.Contains(errOut, "release reservations of finished tasks") {
		t.Errorf("recover: exit %d, stderr %q: want 1, %q and the step", code, errOut, said)
	}
	if !strings.Contains(out, "released 0 leases and 1 reservations; failed 2 attempts") {
		t.Errorf("recover printed %q, want what it did: the free reservation released, both attempts failed", out)
	}

	time.Sleep(2100 * time.Millisecond) // the 1 s windows end, and a cutoff of 1 s passes them
	start = time.Now()
	out, errOut, code = cli(t, nil, "--database-url", url, "prune", "--older-than", "1s", "--batch-size", "1")
	if took := time.Since(start); took < operatorLockTimeout || took > operatorLockTimeout+slack {
		t.Errorf("prune took %v, want about %v", took, operatorLockTimeout)
	}
	if code != exitFailure || !strings.Contains(errOut, said) || !strings.Contains(errOut, "release stale reservations") {
		t.Errorf("prune: exit %d, stderr %q: want 1, %q and the step", code, errOut, said)
	}
	if !strings.Contains(out, ": released 1 stale reservations; deleted 2 counter windows, 2 reservations") {
		t.Errorf("prune printed %q, want what it did: the free windows pruned", out)
	}

	_ = tx.Rollback(ctx) // the locks go: the next runs take what was left
	if out := cliOK(t, "--database-url", url, "recover"); !strings.Contains(out, "released 0 leases and 1 reservations; failed 0 attempts") {
		t.Errorf("recover once the locks went printed %q, want the held reservation released", out)
	}
	if out := cliOK(t, "--database-url", url, "prune", "--older-than", "1s"); !strings.Contains(out, ": released 1 stale reservations; deleted 2 counter windows, 2 reservations") {
		t.Errorf("prune once the locks went printed %q, want the held windows pruned", out)
	}
}
