package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A take of a maintenance lease that waited for the lease row (another
// transaction held it locked) or for the leases table (a migration) longer
// than the lease's TTL got a lease counted from the statement's start,
// before the wait: expired already, so a second process took the job over
// at once and the two runs overlapped. The lease now runs its TTL from the
// clock the take reads after its locks, as a concurrency lease does (00018).
func TestMaintenanceLeaseTakenAfterALockWaitRunsItsTTLFromTheTake(t *testing.T) {
	t.Parallel()
	for _, held := range []struct {
		name string
		hold func(t *testing.T, admin dbtest.DBTX, tx pgx.Tx)
	}{
		// The row of a lease whose holder died, locked by another
		// transaction: the take waits for it, then takes the lease over.
		{"row", func(t *testing.T, admin dbtest.DBTX, tx pgx.Tx) {
			ctx := context.Background()
			if err := testq.OpsMaintenanceLeasePlant(ctx, admin, dbtest.OpsMaintenanceLeasePlantParams{
				Name: "recover", Holder: "dead-host/1/000000", ExpiresAt: pgtest.DBNow(t, admin).Add(-time.Hour),
			}); err != nil {
				t.Fatal(err)
			}
			if n, err := testq.OpsMaintenanceLeaseLock(ctx, tx, "recover"); err != nil || n != 1 {
				t.Fatalf("OpsMaintenanceLeaseLock = %d, %v", n, err)
			}
		}},
		// The table, as a migration's ALTER TABLE holds it: the take waits
		// for it, then inserts the lease.
		{"table", func(t *testing.T, _ dbtest.DBTX, tx pgx.Tx) {
			if err := testq.OpsLockMaintenanceLeases(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		// In the exec modes that prepare a statement first, a take that
		// meets the table locked waits in the prepare's round trip, before
		// its statement's start: only the row's wait shows there.
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
			t.Run(held.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pools := poolsOn(t, pgtest.NewURL(t), 2, mode)
				pool, admin := pools[0], pools[1]
				const ttl = time.Second // WithMaintenanceLeaseTTL's minimum
				// A task whose lease lapses while the take waits: a batch for
				// Recover to do, after which it reports its progress.
				startSync(t, ratelimit.New(admin), ttl)

				var once sync.Once
				reported := false
				report := func(ratelimit.Progress) {
					once.Do(func() {
						reported = true
						assertRunLeaseHeld(t, admin, "taken", ttl)
					})
				}
				m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLeaseTTL(ttl), ratelimit.WithProgress(0, report))

				tx := heldTx(t, admin)
				held.hold(t, admin, tx)
				done := make(chan error, 1)
				go func() {
					// Deferred, so that a check of report's that fails (t.Fatal ends
					// this goroutine, not the test's) still lets the test go on.
					err := errors.New("Recover's goroutine ended by a failed check")
					defer func() { done <- err }()
					_, err = m.Recover(ctx)
				}()
				pgtest.AwaitLockWaiters(t, admin, "the take of the recover lease")
				waitPast(t, admin, pgtest.DBNow(t, admin).Add(ttl+300*time.Millisecond))
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Errorf("Recover: %v", err)
				}
				if !reported {
					t.Fatal("Recover reported no progress: the lease was never looked at mid-run")
				}
			})
		}
	}
}

// A renewal of a maintenance lease that waited for the leases table (a
// migration) longer than the TTL extended the lease from the statement's
// start, before the wait: the run went on under a lease expired already,
// which another process could take over at once. It now runs from the
// clock the renewal reads after its locks, as the take's does.
func TestMaintenanceLeaseRenewedAfterALockWaitRunsItsTTLFromTheRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// In the exec modes that prepare a statement first, the first renewal
	// of a connection waits in the prepare's round trip, before its
	// statement's start.
	pools := poolsOn(t, pgtest.NewURL(t), 2, pgx.QueryExecModeExec)
	pool, admin := pools[0], pools[1]
	const ttl = time.Second // WithMaintenanceLeaseTTL's minimum
	// Tasks whose leases lapsed: a batch each for Recover, with a progress
	// report after each.
	var last ratelimit.Task
	for range 3 {
		last = startSync(t, ratelimit.New(admin), ttl)
	}
	waitPast(t, admin, last.LeaseExpiresAt)

	reports := 0
	var waited chan error
	report := func(ratelimit.Progress) {
		reports++
		switch reports {
		case 1:
			// The table locked until the renewal before the next batch has
			// waited past the TTL.
			tx := heldTx(t, admin)
			if err := testq.OpsLockMaintenanceLeases(ctx, tx); err != nil {
				t.Fatal(err)
			}
			waited = make(chan error, 1)
			go func() {
				// Deferred, so that a failed wait (t.Fatal ends this goroutine,
				// not the test's) still lets the test go on.
				err := errors.New("the rollback's goroutine ended by a failed wait")
				defer func() { waited <- err }()
				pgtest.AwaitLockWaiters(t, admin, "the renewal of the recover lease")
				waitPast(t, admin, pgtest.DBNow(t, admin).Add(ttl+300*time.Millisecond))
				err = tx.Rollback(ctx)
			}()
			time.Sleep(ttl/3 + 50*time.Millisecond) // the renewal is due before the next batch
		case 2:
			if err := <-waited; err != nil {
				t.Fatal(err)
			}
			assertRunLeaseHeld(t, admin, "renewed", ttl)
		}
	}
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLeaseTTL(ttl), ratelimit.WithRecoveryBatchSize(1),
		ratelimit.WithProgress(0, report))
	if _, err := m.Recover(ctx); err != nil {
		t.Errorf("Recover: %v", err)
	}
	if reports < 2 {
		t.Fatalf("Recover reported its progress %d times, want 2 at least: the renewal was never looked at", reports)
	}
}

// assertRunLeaseHeld checks, in the middle of a Recover run whose lease was
// taken or renewed (how) after a lock wait longer than its ttl, that the
// run's lease is live on the database's clock and that a second Recover is
// skipped for it.
func assertRunLeaseHeld(t *testing.T, admin *pgxpool.Pool, how string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	now := pgtest.DBNow(t, admin)
	leases, err := testq.MaintenanceLeaseList(ctx, admin)
	if err != nil || len(leases) != 1 {
		t.Errorf("MaintenanceLeaseList mid-run = %v, %v; want the run's lease", leases, err)
		return
	}
	if !leases[0].ExpiresAt.After(now) {
		t.Errorf("lease %s after a lock wait longer than its %v TTL expires at %v, already past on the database's clock (%v)", how, ttl, leases[0].ExpiresAt, now)
	}
	res, err := ratelimit.NewMaintenance(admin).Recover(ctx)
	if err != nil || !res.Skipped {
		t.Errorf("a second Recover while the first runs: %+v, %v; want it skipped (the lease is held)", res, err)
	}
}
