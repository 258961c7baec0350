package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve for a task and FinishTask of that task exclude each other: one
// of them waits for the other's commit, so FinishTask settles what the
// Reserve wrote, or the Reserve finds the task finished and writes
// nothing. Here the task row is also updated, and the update rolled back,
// over and over while they race (as a worker's failed statement would).
// PostgreSQL 15 can then grant a foreign key's FOR KEY SHARE on the row
// beside a live FOR UPDATE (heap_lock_tuple rechecks, after re-locking the
// page, only whether the row was updated meanwhile, not whether it was
// locked FOR UPDATE): a fence built on those two row locks let Reserves
// commit rows on a task that FinishTask had already read, left open on a
// finished task. The fence is a transaction advisory lock of the task's
// own now (pgadmit_task_fence_key).
func TestTaskFenceHoldsWhileTaskUpdatesRollBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools, ls, limits := fenceRace(t, "fence-rollback")
	const rounds, reservers, touchers = 300, 4, 2
	for round := range rounds {
		task := startSync(t, ls[round%len(ls)], time.Minute)
		id := mustUUID(t, task.ID)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for i := range touchers {
			wg.Go(func() {
				for !stop.Load() {
					if err := touchAndRollBack(ctx, pools[i%len(pools)], id); err != nil {
						t.Errorf("update the task row and roll it back: %v", err)
						return
					}
				}
			})
		}
		// Reserves for the task, back to back, until one finds it finished.
		for i := range reservers {
			l := ls[i%len(ls)]
			wg.Go(func() {
				for !stop.Load() {
					_, err := l.Reserve(ctx, task.ID, task.AttemptID, limits)
					if errors.Is(err, ratelimit.ErrTaskFinished) {
						return
					}
					if err != nil {
						t.Errorf("Reserve: %v", err)
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		_, err := ls[(round+1)%len(ls)].FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		stop.Store(true)
		wg.Wait()
		if err != nil {
			t.Fatalf("FinishTask: %v", err)
		}
		if t.Failed() {
			break
		}
		if s := summary(t, pools[0]); s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 {
			t.Fatalf("round %d: left open on a finished task: %+v", round, s)
		}
	}
	assertDoctorOK(t, pools[0])
}

// touchAndRollBack updates the task row, without changing it, in a
// transaction it rolls back a moment later.
func touchAndRollBack(ctx context.Context, pool *pgxpool.Pool, id pgtype.UUID) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := testq.OpsTaskTouch(ctx, tx, id); err != nil {
		return err
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	return tx.Rollback(ctx)
}

// FinishTask waits for an admission for its task that holds the task's
// fence (shared, taken once the admission's rows are written), and goes on
// once it commits. The fence is held here alone, without the task row, so
// that nothing else could make FinishTask wait.
func TestFinishTaskWaitsForTheTaskFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	task := startSync(t, l, time.Minute)
	tx := heldTx(t, pool)
	if err := testq.OpsTaskFenceShare(ctx, tx, mustUUID(t, task.ID)); err != nil {
		t.Fatal(err)
	}
	waitsForFence(t, pool, "FinishTask", func() error {
		_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		return err
	}, func() error { return tx.Commit(ctx) })
}

// A Reserve for a task waits, once its rows are written, for a finish of
// the task that holds the task's fence (exclusively, taken once it holds
// the task row), and is admitted when that transaction ends with the task
// still running.
func TestReserveForATaskWaitsForTheTaskFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	task := startSync(t, l, time.Minute)
	limits := hourLimits(t, pool, window("api_key", uniqueKey("fenced"), "requests", 100, 1))
	tx := heldTx(t, pool)
	if err := db.New().TaskFenceLock(ctx, tx, mustUUID(t, task.ID)); err != nil { // as FinishTask's batch
		t.Fatal(err)
	}
	waitsForFence(t, pool, "Reserve", func() error {
		_, err := l.Reserve(ctx, task.ID, task.AttemptID, limits)
		return err
	}, func() error { return tx.Rollback(ctx) })
	if s := summary(t, pool); s.ReservationsOpen != 1 {
		t.Errorf("after the Reserve: %+v, want its reservation open", s)
	}
}

// waitsForFence runs call, named what, while a transaction holds a task's
// fence, and checks that it waits for a lock until free ends that
// transaction, and then succeeds.
func waitsForFence(t *testing.T, pool *pgxpool.Pool, what string, call, free func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	pgtest.AwaitLockWaiters(t, pool, what)
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the task's fence was held", what, err)
	default:
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%s once the fence was free: %v", what, err)
	}
}
