package ratelimit_test

import (
	"context"
	"errors"
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
