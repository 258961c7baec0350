package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Prune with WithPruneEvents reads where its walk over finished tasks
// stopped before its steps run. That read went to the pool with no lock
// bound: a migration holding the cursors table hung the whole run until
// its context ended, despite WithMaintenanceLockTimeout. It is now the
// events step's first batch, bounded like the rest: that step gives up
// after about the bound and the others run.
func TestPruneLockTimeoutBoundsTheEventsPosition(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0]
			if err := testq.OpsLockMaintenanceCursors(context.Background(), heldTx(t, pool)); err != nil {
				t.Fatal(err)
			}
			m := ratelimit.NewMaintenance(pool, ratelimit.WithPruneEvents(true), ratelimit.WithMaintenanceLockTimeout(lockBound))
			var err error
			runBounded(t, "Prune", func(ctx context.Context) { _, err = m.Prune(ctx, time.Second) })
			assertLockWait(t, err, "prune", "events", 0, lockBound)
			if !ratelimit.OnlyLockWaits(err) {
				t.Errorf("Prune: %v, want only *LockWaitErrors", err)
			}
		})
	}
}

// A run renews its lease between batches. The renewal went to the pool
// with no lock bound: a migration that took the leases table mid-run hung
// the run until its context ended. It now gives up after about the bound
// (WithMaintenanceLockTimeout), the run stops there with a *LockWaitError
// for the step it stopped in, and gives its lease up within the bound too.
func TestMaintenanceLockTimeoutBoundsTheLeaseRenewal(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0]
			const ttl = time.Second // renewed once a third of it passed
			var once sync.Once
			var start time.Time
			report := func(ratelimit.Progress) {
				once.Do(func() {
					// The first batch is done, the lease taken: a migration takes the
					// leases table, and the next batch's renewal meets it.
					if err := testq.OpsLockMaintenanceLeases(context.Background(), heldTx(t, pool)); err != nil {
						t.Error(err)
					}
					time.Sleep(ttl/3 + 50*time.Millisecond)
					start = time.Now()
				})
			}
			m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLeaseTTL(ttl),
				ratelimit.WithMaintenanceLockTimeout(lockBound), ratelimit.WithProgress(0, report))
			hang, stop := context.WithTimeout(context.Background(), lockBound+lockSlack)
			defer stop()
			_, err := m.Prune(hang, time.Second)
			if took := time.Since(start); took >= 4*time.Second { // the release's own timeout is 5 s
				t.Errorf("Prune after the leases table was locked took %v, want about %v", took, lockBound)
			}
			var lw *ratelimit.LockWaitError
			if !errors.As(err, &lw) || !lw.Rest || !isLockNotAvailable(err) || !ratelimit.OnlyLockWaits(err) {
				t.Errorf("Prune: %v, want only a *LockWaitError (Rest) of lock_not_available", err)
			}
			// The renewal waits as a batch does, under the whole bound (not the take's 4 s cap).
			if lw != nil && lw.Bound != lockBound {
				t.Errorf("Prune: LockWaitError.Bound = %v, want the renewal's bound, %v", lw.Bound, lockBound)
			}
		})
	}
}

// A statement whose prepare gave up on a locked table (55P03, in pgx's
// caching exec mode, inside the statement's own transaction) leaves
// nothing behind on its connection: once the lock goes, the next runs on
// that one connection prepare it again and succeed, and no connection
// stays taken.
func TestMaintenanceLockTimeoutPrepareGivenUpLeavesTheConnectionSound(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := poolsOn(t, url, 1, pgx.QueryExecModeCacheStatement)[0]
	single := oneSessionPoolOn(t, url)
	lock := heldTx(t, pool)
	if err := testq.OpsLockTasks(context.Background(), lock); err != nil {
		t.Fatal(err)
	}
	if err := testq.OpsLockCounters(context.Background(), lock); err != nil {
		t.Fatal(err)
	}
	m := ratelimit.NewMaintenance(single, ratelimit.WithMaintenanceLockTimeout(lockBound), ratelimit.WithPruneEvents(true))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Recover(ctx); !ratelimit.OnlyLockWaits(err) {
		t.Fatalf("Recover on locked tables: %v, want only lock waits", err)
	}
	if _, err := m.Prune(ctx, time.Second); !ratelimit.OnlyLockWaits(err) {
		t.Fatalf("Prune on locked tables: %v, want only lock waits", err)
	}
	if _, err := m.Doctor(ctx); !isLockNotAvailable(err) {
		t.Fatalf("Doctor on locked tables: %v, want lock_not_available", err)
	}
	_ = lock.Rollback(context.Background())
	if _, err := m.Recover(ctx); err != nil {
		t.Errorf("Recover once the lock went: %v", err)
	}
	if _, err := m.Prune(ctx, time.Second); err != nil {
		t.Errorf("Prune once the lock went: %v", err)
	}
	if rep, err := m.Doctor(ctx); err != nil || !rep.OK() {
		t.Errorf("Doctor once the lock went: %v, %v", rep, err)
	}
	if st := single.Stat(); st.AcquiredConns() != 0 || st.TotalConns() != 1 {
		t.Errorf("pool after: %d taken, %d in all; want 0 taken, the one connection kept", st.AcquiredConns(), st.TotalConns())
	}
}

// The reclaim of tasks sends its statements in one batch, which pgx (in
// its caching exec mode) prepares in a pipeline before the batch runs. A
// prepare that gave up there on a locked counters table (55P03) leaves no
// cached statement behind: once the lock goes, the next run on the same
// single connection prepares the batch again and reclaims the task.
func TestRecoverReclaimPrepareGivenUpLeavesTheCacheSound(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	single, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(single.Close)
	var clock testClock
	l, m := clocked(single, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound))
	deadTasksOn(t, l, &clock, claimedAsync(t, l), uniqueKey("dead"))
	other := poolsOn(t, url, 1, pgx.QueryExecModeExec)[0]
	lock := heldTx(t, other)
	if err := testq.OpsLockCounters(context.Background(), lock); err != nil {
		t.Fatal(err)
	}
	var runErr error
	runBounded(t, "Recover", func(ctx context.Context) { _, runErr = m.Recover(ctx) })
	assertLockWait(t, runErr, "recover", "reclaim expired tasks", 1, lockBound)
	_ = lock.Rollback(context.Background())
	res, err := m.Recover(context.Background())
	if err != nil || res.RequeuedAsyncTasks != 1 {
		t.Errorf("Recover once the lock went = %+v, %v; want the task requeued", res, err)
	}
}

// A run cancelled while a statement of it waits in its own transaction
// (pgx's caching exec mode, a locked table) returns the cancellation and
// leaves no connection taken, no transaction open and no lock_timeout on
// the pool's sessions: the next run, once the lock goes, runs whole.
func TestMaintenanceLockTimeoutCancelledInItsOwnTransactionLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool := poolsOn(t, url, 1, pgx.QueryExecModeCacheStatement)[0]
	other := poolsOn(t, url, 1, pgx.QueryExecModeExec)[0]
	lock := heldTx(t, other)
	if err := testq.OpsLockCounters(ctx, lock); err != nil {
		t.Fatal(err)
	}
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(time.Minute))
	run, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := m.Prune(run, time.Second); done <- err }()
	pgtest.AwaitLockWaiters(t, other, "Prune's first statement")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Prune cancelled: %v, want context.Canceled", err)
	}
	_ = lock.Rollback(ctx)
	// The cancelled statement's connection is closed, and pgxpool counts
	// it taken until its destruction, which runs on a goroutine of its
	// own, is over: a moment after Prune returned, never for long.
	for deadline := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still taken 5 s after the cancelled run", pool.Stat().AcquiredConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 4 {
		if v, err := db.New().BenchServerSetting(ctx, pool, "lock_timeout"); err != nil || v != "0" {
			t.Errorf("lock_timeout on the pool's sessions = %q, %v; want 0", v, err)
		}
	}
	if _, err := m.Prune(ctx, time.Second); err != nil {
		t.Errorf("Prune once the lock went: %v", err)
	}
}
