package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A task whose execution lease expired while its worker heartbeats it in a
// transaction of its own, still open: recovery must not sit on the counter
// rows it locked first (the lock order) while it waits for that task row,
// or every admission on those counters waits for the worker's transaction.
// It passes the busy task over (the heartbeat renews it, or a later pass
// reclaims it) and the admissions go on.
func TestRecoverPassesOverATaskRowHeldByItsWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	hot := window("model", uniqueKey("hot"), ratelimit.MetricRequests, 1000, 1)

	task := startSync(t, l, time.Second)
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{hot}); err != nil {
		t.Fatalf("Reserve(task): %v", err)
	}
	clock.pass(task.LeaseExpiresAt)

	tx := heartbeatHeld(t, l, pool, task) // the worker heartbeats in its own transaction, and keeps it open

	recovered, done := recoverInBackground(ctx, m)
	awaitWaitersOrDone(t, pool, 1, done) // recovery has passed the task's row over, or waits for it

	// Another request on the hot counter: it must not wait for the worker.
	// A Reserve that waits for the worker waits until its transaction commits, after this
	// call: a generous bound still tells the two apart, where 3 s could run out under load.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	_, rerr := l.Reserve(rctx, "", "", []ratelimit.Limit{hot})
	waited := time.Since(start)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the worker's transaction: %v", err)
	}
	if rerr != nil {
		t.Fatalf("Reserve on the hot counter while recovery waited for a busy task row: %v (after %s)", rerr, waited.Round(time.Millisecond))
	}
	out := <-recovered
	if out.err != nil {
		t.Fatalf("Recover: %v", out.err)
	}
	if !out.res.Zero() {
		t.Fatalf("Recover = %+v, want nothing reclaimed (the task was heartbeated)", out.res)
	}
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning || got.ExecutionToken != task.ExecutionToken {
		t.Fatalf("task after recovery = %+v, want still running with its token", got)
	}
	recoverOnce(t, m, ratelimit.RecoveryResult{}) // renewed: nothing to reclaim
	assertDoctorOK(t, pool)
}

// The same for a lease of the task that its worker renews in a transaction
// of its own, still open: the reclaim leaves that lease to a later step
// (the task's attempt is over, so "release leases of finished attempts"
// gives it back once it is free) rather than wait for it with the
// counter rows locked.
func TestRecoverPassesOverALeaseRowHeldByItsWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	hot := window("model", uniqueKey("hot"), ratelimit.MetricRequests, 1000, 1)
	slot := concurrent("model", uniqueKey("slots"), 10)
	slot.LeaseTTL = time.Hour

	task := startSync(t, l, time.Second)
	grant, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{hot, slot})
	if err != nil {
		t.Fatalf("Reserve(task): %v", err)
	}
	clock.pass(task.LeaseExpiresAt)

	// The worker renews its lease in its own transaction, and keeps it open.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if renewed, err := l.WithTx(tx).RenewLeases(ctx, grant.Leases); err != nil || len(renewed) != 1 {
		t.Fatalf("RenewLeases in the worker's transaction = %v, %v", renewed, err)
	}

	recovered, done := recoverInBackground(ctx, m)
	awaitWaitersOrDone(t, pool, 1, done) // recovery has passed the lease row over, or waits for it

	// A Reserve that waits for the worker waits until its transaction commits, after this
	// call: a generous bound still tells the two apart, where 3 s could run out under load.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	_, rerr := l.Reserve(rctx, "", "", []ratelimit.Limit{hot})
	waited := time.Since(start)
	var out recoverOutcome
	select {
	case out = <-recovered: // done without waiting for the worker
	case <-time.After(20 * time.Second): // as generous: a Recover that waits does so until the commit below
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the worker's transaction: %v", err)
	}
	if rerr != nil {
		<-recovered
		t.Fatalf("Reserve on the hot counter while recovery waited for a busy lease row: %v (after %s)", rerr, waited.Round(time.Millisecond))
	}
	if out == (recoverOutcome{}) {
		t.Fatalf("Recover waited for the worker's transaction: %+v", <-recovered)
	}
	if out.err != nil {
		t.Fatalf("Recover: %v", out.err)
	}
	want := ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1}
	if diff := cmp.Diff(want, out.res); diff != "" {
		t.Fatalf("Recover while the lease was busy (-want +got):\n%s", diff)
	}
	// Free now: the next pass gives it back (its attempt is over).
	recoverOnce(t, m, ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1})
	assertDoctorOK(t, pool)
}

// recoverOutcome is what one Recover call returned.
type recoverOutcome struct {
	res ratelimit.RecoveryResult
	err error
}

// recoverInBackground runs m.Recover, sends what it returned on recovered
// and then closes done.
func recoverInBackground(ctx context.Context, m *ratelimit.Maintenance) (recovered <-chan recoverOutcome, done <-chan struct{}) {
	out, finished := make(chan recoverOutcome, 1), make(chan struct{})
	go func() {
		res, err := m.Recover(ctx)
		out <- recoverOutcome{res, err}
		close(finished)
	}()
	return out, finished
}

// heartbeatHeld has task's worker heartbeat it in a transaction of its own
// and keep it open, its task row locked, until the test commits it or ends
// (rolled back then).
func heartbeatHeld(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool, task ratelimit.Task) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := l.WithTx(tx).HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Hour); err != nil {
		t.Fatalf("HeartbeatTask in the worker's transaction: %v", err)
	}
	return tx
}
