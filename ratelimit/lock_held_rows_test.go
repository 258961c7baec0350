package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A batch of Recover or Prune that timed out on one counter another
// transaction held (a gateway's WithTx left idle) was left whole: with one
// counter held among 1,000 stale reservations, Prune released none of
// them (nor pruned their windows), and Recover reclaimed no task of a
// batch that had one on it. The batch is now retried once without the
// rows whose counter is still held (found without waiting), which alone
// are left.
func TestLockTimedOutBatchIsRetriedWithoutItsHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("prune", func(t *testing.T) {
		t.Parallel()
		pruneWithOneCounterHeld(t, holdCounters)
	})
	// The probe for held counters locks them as the settlement does (FOR
	// UPDATE, which waits even for FOR KEY SHARE): it used FOR NO KEY
	// UPDATE, which does not, so it found nothing held and the retry waited
	// for the same counter again.
	t.Run("prune, held FOR KEY SHARE", func(t *testing.T) {
		t.Parallel()
		pruneWithOneCounterHeld(t, keyShareCounters)
	})
	t.Run("recover", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		var clock testClock
		l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound))
		const tasks = 20
		locked := uniqueKey("locked")
		keys := make([]string, tasks)
		for i := range keys {
			keys[i] = uniqueKey(fmt.Sprint("free-", i))
		}
		keys[tasks/2] = locked
		deadTasksOn(t, l, &clock, claimedAsync(t, l), keys...)
		release := holdCounters(t, pool, "api_key", locked)
		got, err := m.Recover(ctx)
		assertLockWait(t, err, "recover", "reclaim expired tasks", 1, lockBound)
		want := ratelimit.RecoveryResult{RequeuedAsyncTasks: tasks - 1, FailedAttempts: tasks - 1, ReleasedRateReservations: tasks - 1}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Recover with one counter held (-want +got):\n%s", diff)
		}
		release()
		recoverOnce(t, m, ratelimit.RecoveryResult{RequeuedAsyncTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1})
		assertDoctorOK(t, pool)
	})
}

// pruneWithOneCounterHeld runs Prune over 200 stale reservations while
// hold keeps one of their counters locked.
func pruneWithOneCounterHeld(t *testing.T, hold func(*testing.T, *pgxpool.Pool, string, string) func()) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound))
	const stale = 200
	locked := uniqueKey("locked")
	for i := range stale {
		key := uniqueKey("stale")
		if i == stale/2 {
			key = locked
		}
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(key, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Minute)
	release := hold(t, pool, "api_key", locked)
	res, err := m.Prune(ctx, time.Second)
	assertLockWait(t, err, "prune", "release stale reservations", 1, lockBound)
	if res.ReleasedStaleReservations != stale-1 || res.Counters != stale-1 || res.Reservations != stale-1 {
		t.Errorf("released %d stale reservations, pruned %d counter windows and %d reservations, want %d of each",
			res.ReleasedStaleReservations, res.Counters, res.Reservations, stale-1)
	}
	release()
	if res, err := m.Prune(ctx, time.Second); err != nil || res.ReleasedStaleReservations != 1 {
		t.Errorf("Prune once the lock is gone: %+v, %v; want the one left released", res, err)
	}
	assertDoctorOK(t, pool)
}

// keyShareCounters holds every counter row of a scope FOR KEY SHARE until
// release is called.
func keyShareCounters(t *testing.T, pool *pgxpool.Pool, scopeType, key string) (release func()) {
	t.Helper()
	return holdCountersBy(t, pool, "OpsKeyShareScopeCounters", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		return testq.OpsKeyShareScopeCounters(ctx, tx, dbtest.OpsKeyShareScopeCountersParams{ScopeType: scopeType, ScopeKey: key})
	})
}
