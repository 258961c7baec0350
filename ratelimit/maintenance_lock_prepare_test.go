package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A table another session holds locked (a migration's ALTER TABLE left in
// an open transaction) used to hang Recover and Prune on a fresh connection
// despite WithMaintenanceLockTimeout: in pgx's caching exec modes a
// statement new to its connection is prepared (or described) in a round
// trip of its own, before the batch that set lock_timeout runs, and the
// server waits for the table's lock when it parses the statement. In every
// exec mode each step that reads the table now gives up after about the
// bound, and the run's only trouble is those lock waits.
func TestMaintenanceLockTimeoutBoundsATableLockedAtPrepare(t *testing.T) {
	t.Parallel()
	runs := map[string]struct {
		lock func(context.Context, dbtest.DBTX) error
		run  func(context.Context, *ratelimit.Maintenance) error
	}{
		"Recover on locked tasks": {testq.OpsLockTasks, func(ctx context.Context, m *ratelimit.Maintenance) error {
			_, err := m.Recover(ctx)
			return err
		}},
		"Prune on locked counters": {testq.OpsLockCounters, func(ctx context.Context, m *ratelimit.Maintenance) error {
			_, err := m.Prune(ctx, time.Second)
			return err
		}},
	}
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		for name, c := range runs {
			t.Run(mode.String()+"/"+name, func(t *testing.T) {
				t.Parallel()
				pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0] // fresh: nothing prepared yet
				if err := c.lock(context.Background(), heldTx(t, pool)); err != nil {
					t.Fatal(err)
				}
				m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(lockBound))
				var err error
				runBounded(t, name, func(ctx context.Context) { err = c.run(ctx, m) })
				if !ratelimit.OnlyLockWaits(err) || !isLockNotAvailable(err) {
					t.Errorf("%s: %v, want only *LockWaitErrors, of lock_not_available (55P03)", name, err)
				}
			})
		}
	}
}

// Reclaiming tasks is a transaction of its own that locks their counters
// first. It used to send lock_timeout in the batch with its statements,
// which pgx (in its default exec mode) prepares before the batch runs: a
// counters table another session held locked hung it. The batch now waits
// about the bound, is left whole, and the run goes on.
func TestRecoverLockTimeoutBoundsTheReclaimOnALockedTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t) // pgx's default exec mode, cache_statement
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound))
	deadTasksOn(t, l, &clock, claimedAsync(t, l), uniqueKey("dead"))
	lockCountersTable(t, pool)

	var err error
	runBounded(t, "Recover", func(ctx context.Context) { _, err = m.Recover(ctx) })
	assertLockWait(t, err, "recover", "reclaim expired tasks", 1, lockBound)
	if !ratelimit.OnlyLockWaits(err) {
		t.Errorf("Recover: %v, want only *LockWaitErrors", err)
	}
}
