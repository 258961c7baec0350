package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind PgBouncer in transaction mode, in each exec mode that suits it,
// WithMaintenanceLockTimeout bounds Recover's wait for a counter row
// another session holds, and leaves no lock_timeout on the server
// sessions that other clients get next: it is set per batch, in the
// batch's own transaction.
func TestMaintenanceLockTimeoutBehindTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	behindTransactionPooling(t, func(t *testing.T, pool, direct *pgxpool.Pool) {
		var clock testClock
		ld, _ := clocked(direct, &clock)
		_, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLockTimeout(lockBound))
		locked := uniqueKey("locked")
		syncTask := func(int) ratelimit.Task { return startSync(t, ld, time.Second) }
		deadTasksOn(t, ld, &clock, syncTask, uniqueKey("free"), locked, uniqueKey("free"))
		release := holdCounters(t, direct, "api_key", locked)

		hang, stop := context.WithTimeout(ctx, lockBound+lockSlack)
		defer stop()
		res, err := m.Recover(hang)
		assertLockWait(t, err, "recover", "reclaim expired tasks", 1, lockBound)
		if errors.Is(err, context.DeadlineExceeded) || res.FailedTasks != 2 || res.ReleasedRateReservations != 2 {
			t.Errorf("Recover = %+v, %v; want the 2 tasks on free counters failed, their reservations released", res, err)
		}
		assertNoLockTimeoutLeft(t, pool)
		release()
		recoverOnce(t, m, ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1})
	})
}

// Behind PgBouncer in transaction mode, in each exec mode that suits it, a
// table another session holds locked (a migration's ALTER TABLE) is met
// when the server parses Prune's and Doctor's statements: both give up
// after about the bound, leave no lock_timeout on the server sessions, and
// run whole once the lock goes.
func TestMaintenanceLockTimeoutBoundsALockedTableBehindTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	behindTransactionPooling(t, func(t *testing.T, pool, direct *pgxpool.Pool) {
		m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(lockBound), ratelimit.WithPruneEvents(true))
		lock := heldTx(t, direct)
		if err := testq.OpsLockCounters(ctx, lock); err != nil {
			t.Fatal(err)
		}
		var err error
		runBounded(t, "Prune", func(ctx context.Context) { _, err = m.Prune(ctx, time.Second) })
		if !ratelimit.OnlyLockWaits(err) || !isLockNotAvailable(err) {
			t.Errorf("Prune on a locked table: %v, want only lock waits (55P03)", err)
		}
		runBounded(t, "Doctor", func(ctx context.Context) { _, err = m.Doctor(ctx) })
		if !isLockNotAvailable(err) {
			t.Errorf("Doctor on a locked table: %v, want 55P03", err)
		}
		assertNoLockTimeoutLeft(t, pool)
		_ = lock.Rollback(ctx)
		if _, err := m.Prune(ctx, time.Second); err != nil {
			t.Errorf("Prune once the lock went: %v", err)
		}
		if rep, err := m.Doctor(ctx); err != nil || !rep.OK() {
			t.Errorf("Doctor once the lock went: %v, %v", rep, err)
		}
	})
}

// behindTransactionPooling runs test behind PgBouncer in transaction mode,
// once in each exec mode that suits it, with a pool of one connection
// through the pooler and one straight to the server (exec mode).
func behindTransactionPooling(t *testing.T, test func(t *testing.T, pool, direct *pgxpool.Pool)) {
	t.Helper()
	pooled, directURL := pgtest.NewPoolerURL(t)
	direct := poolsOn(t, directURL, 1, pgx.QueryExecModeExec)[0]
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { test(t, poolsOn(t, pooled, 1, mode)[0], direct) })
	}
}

// assertNoLockTimeoutLeft checks that every server session the pooler may
// hand out has the server's default lock_timeout, 0: the bound was set per
// transaction, never on a session.
func assertNoLockTimeoutLeft(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for range pgtest.PoolerSize {
		if v, err := db.New().BenchServerSetting(context.Background(), pool, "lock_timeout"); err != nil || v != "0" {
			t.Errorf("lock_timeout behind the pooler = %q, %v; want the server's default, 0", v, err)
		}
	}
}
