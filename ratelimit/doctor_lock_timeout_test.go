package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// With WithDoctorLockTimeout, a Doctor that meets a table another session
// holds locked (a migration altering it) gives up after about that long
// with the server's lock_not_available; without it, it waits for as long
// as its context lets it.
func TestDoctorLockTimeoutGivesUpOnALockedTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	lockCountersTable(t, pool)

	const bound = 300 * time.Millisecond
	assertDoctorGivesUp(t, pool, bound, 5*time.Second, "Doctor on a locked table", ratelimit.WithDoctorLockTimeout(bound))

	wait, cancel := context.WithTimeout(ctx, 2*bound)
	defer cancel()
	if _, err := ratelimit.NewMaintenance(pool).Doctor(wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Doctor without a lock timeout on a locked table: %v, want it to wait until its context ends", err)
	}
}

// A bound past lock_timeout's range (about 24.8 days in milliseconds) is
// as long as the server allows, not an invalid setting that fails every
// Doctor.
func TestDoctorLockTimeoutPastItsRange(t *testing.T) {
	t.Parallel()
	m := ratelimit.NewMaintenance(pgtest.NewPool(t), ratelimit.WithDoctorLockTimeout(1000*time.Hour))
	if rep, err := m.Doctor(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("Doctor with a lock timeout of 1000h = %v, %v; want a clean report", rep, err)
	}
}

// WithMaintenanceLockTimeout bounds Doctor too when WithDoctorLockTimeout
// is not given: a Maintenance made for a sweeper with one bound does not
// leave its Doctor hanging behind a migration. WithDoctorLockTimeout, in
// either order, is Doctor's own bound and wins.
func TestMaintenanceLockTimeoutBoundsDoctor(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	lockCountersTable(t, pool)

	const bound = 300 * time.Millisecond
	assertDoctorGivesUp(t, pool, bound, 10*time.Second, "Doctor with WithMaintenanceLockTimeout on a locked table", ratelimit.WithMaintenanceLockTimeout(bound))

	for name, opts := range map[string][]ratelimit.MaintenanceOption{
		"doctor's first":      {ratelimit.WithDoctorLockTimeout(time.Hour), ratelimit.WithMaintenanceLockTimeout(bound)},
		"maintenance's first": {ratelimit.WithMaintenanceLockTimeout(bound), ratelimit.WithDoctorLockTimeout(time.Hour)},
	} {
		wait, cancel := context.WithTimeout(ctx, 4*bound)
		_, err := ratelimit.NewMaintenance(pool, opts...).Doctor(wait)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Doctor with WithDoctorLockTimeout(1h) on a locked table: %v, want it to wait for its own bound (until its context ends)", name, err)
		}
	}
}

// lockCountersTable locks the whole counters table in a transaction of its
// own, as a migration altering it would, until the test ends.
func lockCountersTable(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if err := testq.OpsLockCounters(context.Background(), heldTx(t, pool)); err != nil {
		t.Fatal(err)
	}
}

// assertDoctorGivesUp runs the Doctor of a Maintenance made with opts on a
// locked table and checks that it fails with the server's
// lock_not_available after about bound: no sooner, and not so late (slack
// past it, when its context ends) that it only waited on.
func assertDoctorGivesUp(t *testing.T, pool *pgxpool.Pool, bound, slack time.Duration, what string, opts ...ratelimit.MaintenanceOption) {
	t.Helper()
	hang, stop := context.WithTimeout(context.Background(), bound+slack) // a Doctor that waits on fails, not hangs
	defer stop()
	start := time.Now()
	_, err := ratelimit.NewMaintenance(pool, opts...).Doctor(hang)
	took := time.Since(start)
	if !isLockNotAvailable(err) {
		t.Fatalf("%s: %v, want lock_not_available (55P03)", what, err)
	}
	if took < bound || took > bound+slack {
		t.Errorf("Doctor gave up after %v, want about %v", took, bound)
	}
}
