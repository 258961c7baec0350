package ratelimit_test

import (
	"context"
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
				assertLockWait(t, err, run.job, run.step, 0)
				if !ratelimit.OnlyLockWaits(err) {
					t.Errorf("%s: %v, want only a *LockWaitError", run.job, err)
				}
			}
		})
	}
}
