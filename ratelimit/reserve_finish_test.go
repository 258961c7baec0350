package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve for a task, racing FinishTask of that task: either Reserve
// commits first and FinishTask releases what it granted, or Reserve is
// refused (ErrTaskFinished) and writes nothing. Never does a finished task
// keep an open reservation or a live lease. Before, Reserve checked the
// task without a lock before it took its counters, and inserted its rows
// after FinishTask had read the task's reservations and leases (or after
// it had committed): they stayed open until Recover released them.
func TestReserveRacingFinishTaskLeavesNothingOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"combined", nil},
		{"without combining", []ratelimit.Option{ratelimit.WithoutCombining()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			l := ratelimit.New(pool, tc.opts...)
			key := uniqueKey("k")

			// The order made certain: Reserve has checked the task and waits
			// for a counter row that another transaction holds; FinishTask
			// runs and commits meanwhile; then the holder lets go.
			t.Run("finish while reserve waits", func(t *testing.T) {
				for _, limits := range [][]ratelimit.Limit{
					{window("key", key, "requests", 100, 1)},
					{window("key", key, "requests", 100, 1), concurrent("key", key, 10)},
				} {
					limits = hourLimits(t, pool, limits...)
					task := startSync(t, l, time.Minute)
					blocker, err := pool.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := l.WithTx(blocker).Reserve(ctx, "", "", limits[:1]); err != nil {
						t.Fatal(err)
					}
					errs := make(chan error, 1)
					go func() { _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); errs <- err }()
					pgtest.AwaitLockWaiters(t, pool, "Reserve")
					if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
						t.Fatalf("FinishTask: %v", err)
					}
					if err := blocker.Rollback(ctx); err != nil {
						t.Fatal(err)
					}
					if err := <-errs; !errors.Is(err, ratelimit.ErrTaskFinished) {
						t.Errorf("Reserve for a task finished while it waited (%d limits): %v, want ErrTaskFinished", len(limits), err)
					}
					assertNothingHeld(t, pool, "key", key)
				}
			})

			// A batch of two admissions on one counter (a hot batch, when
			// combined), one for the task: the statement is rolled back
			// whole, with an error that says why (the combiner then runs
			// each request again alone, as on any P0 error).
			t.Run("batch", func(t *testing.T) {
				key := uniqueKey("k")
				limits := hourLimits(t, pool, window("key", key, "requests", 100, 1), concurrent("key", key, 10))
				task := startSync(t, l, time.Minute)
				blocker, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.WithTx(blocker).Reserve(ctx, "", "", limits[:1]); err != nil {
					t.Fatal(err)
				}
				errs := make(chan error, 1)
				go func() {
					_, _, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{
						{TaskID: task.ID, AttemptID: task.AttemptID, Limits: limits},
						{Limits: limits},
					})
					errs <- err
				}()
				pgtest.AwaitLockWaiters(t, pool, "Reserve")
				if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
					t.Fatalf("FinishTask: %v", err)
				}
				if err := blocker.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-errs; !errors.Is(err, ratelimit.ErrTaskFinished) {
					t.Errorf("a batch with an admission for a task finished while it waited: %v, want ErrTaskFinished", err)
				}
				assertNothingHeld(t, pool, "key", key)
			})

			t.Run("race", func(t *testing.T) {
				key := uniqueKey("k")
				limits := []ratelimit.Limit{window("key", key, "tokens", 1e9, 10), concurrent("key", key, 1e6)}
				for range 100 {
					task := startSync(t, l, time.Minute)
					var reserveErr, finishErr error
					var wg sync.WaitGroup
					start := make(chan struct{})
					wg.Go(func() { <-start; _, reserveErr = l.Reserve(ctx, task.ID, task.AttemptID, limits) })
					wg.Go(func() {
						<-start
						_, finishErr = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
					})
					close(start)
					wg.Wait()
					if finishErr != nil {
						t.Fatalf("FinishTask: %v", finishErr)
					}
					if reserveErr != nil && !errors.Is(reserveErr, ratelimit.ErrTaskFinished) {
						t.Fatalf("Reserve: %v, want a grant or ErrTaskFinished", reserveErr)
					}
					assertNothingHeld(t, pool, "key", key)
					if t.Failed() {
						return
					}
				}
			})
		})
	}
}
