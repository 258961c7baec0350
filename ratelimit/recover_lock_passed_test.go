package ratelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// lockWaitSteps lists the steps of err's *LockWaitErrors, in order.
func lockWaitSteps(err error) []string {
	if lw, ok := err.(*ratelimit.LockWaitError); ok {
		return []string{lw.Step}
	}
	var steps []string
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			steps = append(steps, lockWaitSteps(e)...)
		}
	case interface{ Unwrap() error }:
		steps = lockWaitSteps(u.Unwrap())
	}
	return steps
}

// A reservation of a finished task whose counter another transaction holds
// is one of a finished attempt too (step 5 fails the attempt). Recover's
// release step for finished tasks waited the bound for it and left it; the
// release step for finished attempts then found the same reservation and
// waited the bound for the same lock again. It now passes it over: one wait
// per step that met the lock, none twice for one row.
func TestRecoverWaitsForALeftReservationOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(lockBound))
	locked := uniqueKey("locked")
	// An async task whose worker died, and a task marked finished by a
	// writer that cleaned up nothing, each holding a reservation on the
	// counter another transaction holds.
	deadTasksOn(t, l, &clock, claimedAsync(t, l), locked)
	task := startSync(t, l, time.Hour)
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", locked, ratelimit.MetricTokens, 1e6, 7)}); err != nil {
		t.Fatal(err)
	}
	if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, task.ID), Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
		t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
	}
	release := holdCounters(t, pool, "api_key", locked)

	hang, stop := context.WithTimeout(ctx, lockSlack)
	defer stop()
	start := time.Now()
	got, err := m.Recover(hang)
	t.Logf("Recover with the counter held took %v (bound %v)", time.Since(start), lockBound)
	want := []string{"reclaim expired tasks", "release reservations of finished tasks"}
	if steps := lockWaitSteps(err); !slices.Equal(steps, want) {
		t.Errorf("Recover waited on the held counter in the steps %q, want %q: %v", steps, want, err)
	}
	if !ratelimit.OnlyLockWaits(err) {
		t.Errorf("Recover: %v, want only *LockWaitErrors", err)
	}
	if want := (ratelimit.RecoveryResult{FailedAttempts: 1}); got != want {
		t.Errorf("Recover = %+v, want %+v: the finished task's attempt failed, nothing on the counter", got, want)
	}

	release()
	recoverOnce(t, m, ratelimit.RecoveryResult{RequeuedAsyncTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 2})
	assertDoctorOK(t, pool)
}
