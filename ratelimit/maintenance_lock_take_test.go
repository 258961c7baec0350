package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Taking a run's lease waited for a lock on the leases table (a migration's
// ALTER TABLE left open) for its own 5 s, whatever WithMaintenanceLockTimeout
// said, and then failed with a client timeout that OnlyLockWaits did not
// know. It now gives up after the bound, as the renewal and the release
// do, with a *LockWaitError for the take.
func TestMaintenanceLockTimeoutBoundsTheLeaseTake(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0]
			if err := testq.OpsLockMaintenanceLeases(context.Background(), heldTx(t, pool)); err != nil {
				t.Fatal(err)
			}
			m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(lockBound))
			for _, run := range []struct {
				job, step string
				run       func(context.Context) error
			}{
				{"recover", "take the recover lease", func(ctx context.Context) error { _, err := m.Recover(ctx); return err }},
				{"prune", "take the prune lease", func(ctx context.Context) error { _, err := m.Prune(ctx, time.Second); return err }},
			} {
				start := time.Now()
				err := run.run(context.Background())
				// The take's own timeout is 5 s: a take that ends sooner gave up on the bound.
				if took := time.Since(start); took < lockBound || took >= 4*time.Second {
					t.Errorf("%s with the leases table locked took %v, want about %v", run.job, took, lockBound)
				}
				assertLockWait(t, err, run.job, run.step, 0, lockBound)
				if !ratelimit.OnlyLockWaits(err) {
					t.Errorf("%s: %v, want only a *LockWaitError", run.job, err)
				}
			}
		})
	}
}

// The take waits for a lock 4 s at most, whatever WithMaintenanceLockTimeout
// says (it runs on past the caller's context, within 5 s of its own). With a
// longer bound its *LockWaitError named none, and the CLI said it gave up
// after the bound it was given (its --lock-timeout default, 5s, among
// them): Bound now says the 4 s that applied.
func TestLeaseTakeLockWaitNamesTheBoundThatApplied(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	if err := testq.OpsLockMaintenanceLeases(context.Background(), heldTx(t, pool)); err != nil {
		t.Fatal(err)
	}
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(time.Hour))
	start := time.Now()
	_, err := m.Recover(context.Background())
	if took := time.Since(start); took < 4*time.Second || took >= 5*time.Second {
		t.Errorf("Recover with the leases table locked took %v, want about 4s", took)
	}
	assertLockWait(t, err, "recover", "take the recover lease", 0, 4*time.Second)
}

// A take that got the lease after the caller's context ended gives it up
// at once; when that release gave up on a lock (a migration took the
// leases table right after the take), the run's error was made a
// *LockWaitError of the take, which had waited for nothing past the
// bound: OnlyLockWaits held it for a run that only met locks, not one
// cut off. Only the take's own 55P03 is the take's lock wait; the
// release's is the release's.
func TestMaintenanceLeaseTakenAfterCtxEndedIsNotALockWaitOfTheTake(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, 2)
	pool, admin := pools[0], pools[1]
	const bound = 3 * time.Second // the time the steps below have while the take waits
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(bound))
	first := heldTx(t, admin)
	if err := testq.OpsLockMaintenanceLeases(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := m.Recover(ctx); done <- err }()
	pgtest.AwaitLockWaiters(t, admin, "the take of the recover lease")
	cancel() // the take runs on; it will get the lease
	// A second migration queues for the table behind the take: it gets it
	// once the take commits, before the release the ended ctx calls for.
	second := heldTx(t, admin)
	locked, lockReturned := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(lockReturned)
		locked <- testq.OpsLockMaintenanceLeases(context.Background(), second)
	}()
	// On a failure, the statement on second ends before heldTx's cleanup rolls second back
	// (a pgx transaction is for one goroutine at a time): first lets go of the table.
	defer func() { _ = first.Rollback(context.Background()); <-lockReturned }()
	pgtest.AwaitLockWaiterCount(t, admin, 2, "the second lock, behind the take,")
	if err := first.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "release the recover lease") || !isLockNotAvailable(err) {
		t.Fatalf("Recover: %v, want context.Canceled, and the release of the lease it took giving up on a lock", err)
	}
	if ratelimit.OnlyLockWaits(err) {
		t.Errorf("Recover cut off by its context: %v; OnlyLockWaits says it only met locks", err)
	}
	// The release's lock wait is its own step's, as a run's release's is.
	if steps := lockWaitSteps(err); !slices.Equal(steps, []string{"release the recover lease"}) {
		t.Errorf("Recover: *LockWaitErrors for %q, want one, for the release (the take waited for no lock past the bound): %v", steps, err)
	}
	assertLockWait(t, err, "recover", "release the recover lease", 0, bound)
}

// Without WithMaintenanceLockTimeout the take and the release of a run's
// lease waited for a lock until their own 5 s timeout: a migration holding
// the leases table made the run fail with a client timeout,
// context.DeadlineExceeded, which a caller whose context had no deadline
// could not tell from one of its own, and no *LockWaitError. In the exec
// modes that send a statement in the round trip that runs it, where the
// setting costs nothing, they now wait for a lock 4 s at most, as with a
// longer bound, and give up with the server's lock_not_available (55P03).
// (In those that prepare it first, a bound would cost a transaction block,
// which a statement-pooling proxy refuses: they keep their timeout.)
func TestLeaseTakeAndReleaseWithoutALockBoundEndOnTheServersLockTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0]
			lock := heldTx(t, pool)
			if err := testq.OpsLockMaintenanceLeases(context.Background(), lock); err != nil {
				t.Fatal(err)
			}
			m := ratelimit.NewMaintenance(pool)
			start := time.Now()
			_, err := m.Recover(context.Background())
			if took := time.Since(start); took < 4*time.Second || took >= 5*time.Second {
				t.Errorf("Recover with the leases table locked took %v, want about 4s", took)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Recover with no deadline: %v, want no context.DeadlineExceeded", err)
			}
			assertLockWait(t, err, "recover", "take the recover lease", 0, 4*time.Second)
			if !ratelimit.OnlyLockWaits(err) {
				t.Errorf("Recover: %v, want only a *LockWaitError", err)
			}
			if err := lock.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}

			// The release: the table taken once the run has its lease.
			var once sync.Once
			report := func(ratelimit.Progress) {
				once.Do(func() {
					if err := testq.OpsLockMaintenanceLeases(context.Background(), heldTx(t, pool)); err != nil {
						t.Error(err)
					}
				})
			}
			m = ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLeaseTTL(time.Minute), ratelimit.WithProgress(0, report))
			_, err = m.Prune(context.Background(), time.Second)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Prune with no deadline: %v, want no context.DeadlineExceeded", err)
			}
			assertLockWait(t, err, "prune", "release the prune lease", 0, 4*time.Second)
		})
	}
}
