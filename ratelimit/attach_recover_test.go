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

// Attach of a grant to the attempt of a task whose execution lease expired,
// racing the Recover that reclaims it: once both returned, an attempt that
// Recover took back holds no open reservation and no unreleased lease.
// Either Attach linked the grant first and Recover released it (with the
// task's own, or as a finished attempt's), or Attach found the attempt
// over (ErrTaskFinished) and linked nothing, or Recover passed over the
// task while Attach held its row and the attempt still runs.
func TestAttachRacingRecoverLeavesNothingOpenOnAReclaimedAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, async := range []bool{true, false} {
		name := map[bool]string{true: "async", false: "sync"}[async]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			var clock testClock
			l, m := clocked(pool, &clock)
			key := uniqueKey("k")
			limits := []ratelimit.Limit{window("api_key", key, "tokens", 1e9, 10), concurrent("model", key, 1e6)}
			reclaimed, attached := 0, 0
			for range 100 {
				var task ratelimit.Task
				if async {
					createAsync(t, l)
					task = claim(t, l, "w", time.Minute)
				} else {
					task = startSync(t, l, time.Minute)
				}
				// The task's own holdings, and a grant taken without a task.
				if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); err != nil {
					t.Fatalf("Reserve(task): %v", err)
				}
				grant, err := l.Reserve(ctx, "", "", limits)
				if err != nil {
					t.Fatalf("Reserve: %v", err)
				}
				clock.advance(2 * time.Minute) // the execution lease expired

				var attachErr, recoverErr error
				var wg sync.WaitGroup
				start := make(chan struct{})
				wg.Go(func() { <-start; _, attachErr = l.Attach(ctx, task.AttemptID, grant) })
				wg.Go(func() { <-start; _, recoverErr = m.Recover(ctx) })
				close(start)
				wg.Wait()
				if recoverErr != nil {
					t.Fatalf("Recover: %v", recoverErr)
				}
				if attachErr != nil && !errors.Is(attachErr, ratelimit.ErrTaskFinished) {
					t.Fatalf("Attach: %v, want nil or ErrTaskFinished", attachErr)
				}
				if attachErr == nil {
					attached++
				}
				attempts, err := l.TaskAttempts(ctx, task.ID)
				if err != nil {
					t.Fatal(err)
				}
				if attempts[len(attempts)-1].Status == "running" {
					// Passed over: Attach held the task row. The next run takes it.
					if _, err := m.Recover(ctx); err != nil {
						t.Fatalf("Recover: %v", err)
					}
				} else {
					reclaimed++
					holdings, err := testq.OpsHoldingsByAttempt(ctx, pool, mustUUID(t, task.AttemptID))
					if err != nil {
						t.Fatal(err)
					}
					for _, h := range holdings {
						if h.State == "reserved" || h.State == "unreleased" {
							t.Fatalf("the reclaimed attempt %s keeps its %s %s open (Attach: %v)", task.AttemptID, h.Kind, h.ID, attachErr)
						}
					}
				}
				if errors.Is(attachErr, ratelimit.ErrTaskFinished) {
					if _, err := l.Release(ctx, grant, "done"); err != nil {
						t.Fatalf("Release: %v", err)
					}
				}
			}
			t.Logf("of 100 rounds, %d reclaimed the task in the racing Recover, %d attached the grant", reclaimed, attached)
		})
	}
}
