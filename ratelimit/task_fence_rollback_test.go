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
	pools := pgtest.NewPools(t, 3)
	ls := []*ratelimit.Limiter{ratelimit.New(pools[0]), ratelimit.New(pools[1], ratelimit.WithoutCombining()), ratelimit.New(pools[2])}
	// A key of its own per Reserve: they do not queue on a counter, and
	// reach the task row together.
	limitsFor := func() []ratelimit.Limit {
		key := uniqueKey("fence-rollback")
		limits := []ratelimit.Limit{window("key", key, "tokens", 1e12, 10), concurrent("key", key, 1e9)}
		limits[0].Window = time.Hour
		return limits
	}
	pgtest.AwaitRoomInWindow(t, pools[0], time.Hour, 5*time.Minute)
	jitter := func() { time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) }
	const rounds, tasksPerRound, reserves = 30, 6, 6
	for range rounds {
		var wg sync.WaitGroup
		var stop atomic.Bool
		var touching sync.WaitGroup
		for i := range tasksPerRound {
			task := startSync(t, ls[i%len(ls)], time.Minute)
			id := mustUUID(t, task.ID)
			touching.Go(func() {
				for !stop.Load() {
					if err := touchAndRollBack(ctx, pools[i%len(pools)], id); err != nil {
						t.Errorf("update the task row and roll it back: %v", err)
						return
					}
				}
			})
			for j := range reserves {
				limits := limitsFor()
				wg.Go(func() {
					jitter()
					_, err := ls[(i+j)%len(ls)].Reserve(ctx, task.ID, task.AttemptID, limits)
					if err != nil && !errors.Is(err, ratelimit.ErrTaskFinished) {
						t.Errorf("Reserve: %v", err)
					}
				})
			}
			wg.Go(func() {
				jitter()
				if _, err := ls[(i+1)%len(ls)].FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
					t.Errorf("FinishTask: %v", err)
				}
			})
		}
		wg.Wait()
		stop.Store(true)
		touching.Wait()
		if t.Failed() {
			break
		}
		if s := summary(t, pools[0]); s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 {
			t.Fatalf("left open on a finished task: %+v", s)
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
