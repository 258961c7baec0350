package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// WithMaintenanceLeaseTTL below its one-second minimum is that minimum,
// not the 15 s default: a caller asking for a short lease does not get one
// fifteen times longer than asked.
func TestMaintenanceLeaseTTLBelowASecondIsASecond(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var clock testClock
	var lease time.Duration // expires_at - acquired_at of the recover lease, read mid-run
	report := func(ratelimit.Progress) {
		leases, err := testq.MaintenanceLeaseList(context.Background(), pool)
		if err != nil || len(leases) != 1 {
			t.Errorf("MaintenanceLeaseList mid-run = %v, %v; want the run's lease", leases, err)
			return
		}
		lease = leases[0].ExpiresAt.Sub(leases[0].AcquiredAt)
	}
	l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLeaseTTL(500*time.Millisecond), ratelimit.WithProgress(0, report))
	task := startSync(t, l, time.Second)
	clock.pass(task.LeaseExpiresAt)
	recoverOnce(t, m, ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1})
	// A renewal during the run (a third of the lease passed on a busy machine) extends
	// expires_at from the time of the renewal, but never to the default's 15 s.
	if lease < time.Second || lease >= ratelimit.DefaultMaintenanceLeaseTTL {
		t.Errorf("recover lease with WithMaintenanceLeaseTTL(500ms) = %v, want 1s (the minimum)", lease)
	}
}
