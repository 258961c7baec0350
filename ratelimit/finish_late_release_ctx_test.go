package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A FinishTask whose caller's context ends after its batch, before it has
// released the reservations linked to the task after its first read (a
// Reserve for the task that committed while the batch waited for the task
// row), still gives them back, in the background as a Reserve whose caller
// left does: the task has finished, nobody holds them, and they held the
// counter's capacity until the next Recover.
func TestFinishTaskLateReleaseOutlivesCallersContext(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := ratelimit.New(pool, ratelimit.WithFinishTaskHooks(nil, cancel)) // the caller leaves once the batch answered
	task := startSync(t, l, time.Minute)
	key := uniqueKey("late-ctx")

	// A Reserve for the task in a transaction still open: FinishTask's first
	// read misses its reservation, its batch waits for the task row.
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 100, 100)}); err != nil {
		t.Fatalf("Reserve in the transaction: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.FinishTask(cctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		done <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "FinishTask")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("FinishTask whose caller left after its batch: %v; want context.Canceled", err)
	}
	if got, err := l.GetTask(ctx, task.ID); err != nil || got.Status != ratelimit.TaskSucceeded {
		t.Fatalf("task after FinishTask: %+v, %v; want succeeded", got, err)
	}
	l.Close() // waits for the give-backs in the background

	// The counter's capacity is back without Recover.
	l2 := ratelimit.New(pool)
	defer l2.Close()
	g, err := l2.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 100, 100)})
	if err != nil {
		t.Fatalf("Reserve of the whole limit after FinishTask: %v; want granted (the late reservation released)", err)
	}
	if _, err := l2.Release(ctx, g, "test"); err != nil {
		t.Fatal(err)
	}
	res, err := ratelimit.NewMaintenance(pool).Recover(ctx)
	if err != nil || res.ReleasedRateReservations != 0 {
		t.Fatalf("Recover = %+v, %v; want nothing left for it to release", res, err)
	}
	assertDoctorOK(t, pool)
}
