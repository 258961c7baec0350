package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A CancelTask that met a reservation linked to the task after its first
// read (a Reserve for the task that committed while its batch waited) and
// then failed to release it names itself in its error: it said "finish
// task". The task is cancelled all the same, and the reservation is
// released in the background (nothing is left for Recover).
func TestCancelTaskLateReleaseErrorNamesCancelTask(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := ratelimit.New(pool, ratelimit.WithCancelTaskBatchHook(cancel)) // the late release meets an ended context
	ctx := context.Background()
	task := createAsync(t, l)

	// A Reserve for the task in a transaction still open: the cancel's
	// first read misses its reservation, its batch waits for the task row.
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", uniqueKey("late"), ratelimit.MetricTokens, 100, 5)}); err != nil {
		t.Fatalf("Reserve in the transaction: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.CancelTask(cctx, task.ID, "gone")
		done <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "CancelTask")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancel task: release the reservations linked to the task") {
		t.Fatalf("CancelTask whose late release failed: %v; want context.Canceled, named as cancel task's", err)
	}
	if got, err := l.GetTask(ctx, task.ID); err != nil || got.Status != ratelimit.TaskCancelled {
		t.Fatalf("task after CancelTask: %+v, %v; want cancelled", got, err)
	}
	l.Close() // waits for the release in the background
	res, err := ratelimit.NewMaintenance(pool).Recover(ctx)
	if err != nil || res.ReleasedRateReservations != 0 {
		t.Fatalf("Recover = %+v, %v; want nothing left: the late reservation released in the background", res, err)
	}
	assertDoctorOK(t, pool)
}
