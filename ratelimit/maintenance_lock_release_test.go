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

// A run's release of its lease has a timeout of its own, 5 s, and waited
// for a lock as long as WithMaintenanceLockTimeout said: with a bound of
// 5 s or more, a migration holding the leases table made the release end
// on the client's timeout (a context.DeadlineExceeded the caller's context
// had nothing to do with) instead of the server's lock_not_available. Its
// wait is now kept a second short of its timeout, as the take's is, and
// gives up with a *LockWaitError, as the take's does.
func TestMaintenanceLockTimeoutPastTheLeaseTimeoutBoundsTheRelease(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := poolsOn(t, pgtest.NewURL(t), 1, mode)[0]
			var once sync.Once
			report := func(ratelimit.Progress) {
				once.Do(func() {
					// The lease taken, a migration takes the leases table: only the
					// release meets it (the renewal is not due for 20 s).
					if err := testq.OpsLockMaintenanceLeases(context.Background(), heldTx(t, pool)); err != nil {
						t.Error(err)
					}
				})
			}
			m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLeaseTTL(time.Minute),
				ratelimit.WithMaintenanceLockTimeout(6*time.Second), ratelimit.WithProgress(0, report))
			_, err := m.Prune(context.Background(), time.Second)
			if !isLockNotAvailable(err) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Prune with the leases table locked at its release: %v, want the server's lock_not_available (55P03), no client timeout", err)
			}
			// As the take's: a *LockWaitError of its own step, under the bound that
			// applied (it was a plain error, which OnlyLockWaits, the CLI and promadmit
			// took for the database failing).
			assertLockWait(t, err, "prune", "release the prune lease", 0, 4*time.Second)
			if !ratelimit.OnlyLockWaits(err) {
				t.Errorf("Prune: %v, want only a *LockWaitError", err)
			}
		})
	}
}

// Recover and Prune kept the error of their lease's release only when the
// run had none of its own: a run that also left a batch behind a lock said
// so, and hid that its lease was still held (another process's run is
// skipped until it expires). The run's error now carries both, each a
// *LockWaitError of its own step, so that LeaseRelease finds the second.
func TestMaintenanceRunThatFailedAStepStillSaysItsLeaseIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, job := range []string{"recover", "prune"} {
		t.Run(job, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			var clock testClock
			var once sync.Once
			report := func(ratelimit.Progress) {
				once.Do(func() {
					// After the step that waits on the counter gave up: only the release
					// meets this lock (the renewal is not due for 20 s).
					if err := testq.OpsLockMaintenanceLeases(ctx, heldTx(t, pool)); err != nil {
						t.Error(err)
					}
				})
			}
			l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLeaseTTL(time.Minute),
				ratelimit.WithMaintenanceLockTimeout(lockBound), ratelimit.WithProgress(0, report))
			locked := uniqueKey("locked")
			var err error
			step := "reclaim expired tasks"
			if job == "recover" {
				deadTasksOn(t, l, &clock, claimedAsync(t, l), locked)
				holdCounters(t, pool, "api_key", locked)
				_, err = m.Recover(ctx)
			} else {
				step = "release stale reservations"
				if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(locked, 1)}); err != nil {
					t.Fatal(err)
				}
				clock.advance(time.Minute)
				holdCounters(t, pool, "api_key", locked)
				_, err = m.Prune(ctx, time.Second)
			}
			release := "release the " + job + " lease"
			if steps := lockWaitSteps(err); !slices.Equal(steps, []string{step, release}) {
				t.Fatalf("%s with a counter held, then the leases table: lock waits of %q (%v), want of %q", job, steps, err, []string{step, release})
			}
			if !ratelimit.OnlyLockWaits(err) || !isLockNotAvailable(err) {
				t.Errorf("%s: %v, want only lock waits", job, err)
			}
			if !strings.Contains(err.Error(), "left the lease held until it expires") {
				t.Errorf("%s: %q does not say the lease is still held", job, err)
			}
		})
	}
}
