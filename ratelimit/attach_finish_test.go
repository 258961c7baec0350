package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach of a grant taken without a task, racing FinishTask of the task
// whose attempt it names: either Attach links the grant before the task
// finishes, and FinishTask settles it, or Attach finds the task finished
// (ErrTaskFinished) and links nothing. Never does a finished task keep an
// open reservation or an unreleased lease of the grant. Before, Attach
// read the attempt as running while FinishTask was finishing it (neither
// waited for the other), and linked the grant after FinishTask had chosen
// what to settle.
func TestAttachRacingFinishTaskLeavesNothingOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	key := uniqueKey("k")
	limits := []ratelimit.Limit{window("api_key", key, "tokens", 1e9, 10), concurrent("model", key, 1e6)}

	// check runs one meeting of Attach and FinishTask and checks its outcome.
	check := func(t *testing.T, task ratelimit.Task, grant ratelimit.Grant, attachErr, finishErr error) {
		t.Helper()
		if finishErr != nil {
			t.Fatalf("FinishTask: %v", finishErr)
		}
		holdings, err := testq.OpsHoldingsByAttempt(ctx, pool, mustUUID(t, task.AttemptID))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case attachErr == nil:
			if len(holdings) != 2 {
				t.Fatalf("Attach succeeded but the attempt holds %d rows, want 2", len(holdings))
			}
			for _, h := range holdings {
				if h.State == "reserved" || h.State == "unreleased" {
					t.Fatalf("the finished task %s keeps its %s %s open (Attach succeeded, FinishTask did not settle it)", task.ID, h.Kind, h.ID)
				}
			}
		case errors.Is(attachErr, ratelimit.ErrTaskFinished):
			if len(holdings) != 0 {
				t.Fatalf("Attach refused (%v) but linked %d rows", attachErr, len(holdings))
			}
			if _, err := l.Release(ctx, grant, "done"); err != nil {
				t.Fatalf("Release: %v", err)
			}
		default:
			t.Fatalf("Attach: %v, want nil or ErrTaskFinished", attachErr)
		}
	}

	t.Run("race", func(t *testing.T) {
		const rounds = 150
		for range rounds {
			task := startSync(t, l, time.Minute)
			grant, err := l.Reserve(ctx, "", "", limits)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			var attachErr, finishErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Go(func() { <-start; _, attachErr = l.Attach(ctx, task.AttemptID, grant) })
			wg.Go(func() {
				<-start
				_, finishErr = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			})
			close(start)
			wg.Wait()
			check(t, task, grant, attachErr, finishErr)
		}
	})

	// The two orders made certain: another transaction holds a lease that
	// the first of the two calls waits for, the second starts, and the
	// holder lets go once the second waits too (or ended without waiting).
	// FinishTask first: Attach waits for it and is refused. Attach first:
	// FinishTask waits for it and releases the lease it linked with the
	// task's own, and the reservation it linked after FinishTask read the
	// task's.
	for _, attachFirst := range []bool{false, true} {
		name := map[bool]string{false: "finish-first", true: "attach-first"}[attachFirst]
		t.Run(name, func(t *testing.T) {
			task := startSync(t, l, time.Minute)
			own, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{concurrent("model", uniqueKey("own"), 10)})
			if err != nil {
				t.Fatalf("Reserve(task): %v", err)
			}
			grant, err := l.Reserve(ctx, "", "", limits)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			var attachErr, finishErr error
			var finished ratelimit.FinishResult
			attach := func() { _, attachErr = l.Attach(ctx, task.AttemptID, grant) }
			finish := func() {
				finished, finishErr = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			}
			first, second, held := finish, attach, own.Leases[0].ID
			if attachFirst {
				first, second, held = attach, finish, grant.Leases[0].ID
			}
			meetOnLease(t, pool, held, first, second)
			check(t, task, grant, attachErr, finishErr)
			want := ratelimit.FinishResult{ReleasedLeases: 1}
			if attachFirst {
				if attachErr != nil {
					t.Fatalf("Attach, which went first: %v", attachErr)
				}
				want = ratelimit.FinishResult{ReleasedReservations: 1, ReleasedLeases: 2}
			} else if !errors.Is(attachErr, ratelimit.ErrTaskFinished) {
				t.Fatalf("Attach after FinishTask: %v, want ErrTaskFinished", attachErr)
			}
			if finished.ReleasedReservations != want.ReleasedReservations || finished.ReleasedLeases != want.ReleasedLeases {
				t.Fatalf("FinishTask released %d reservations and %d leases, want %d and %d",
					finished.ReleasedReservations, finished.ReleasedLeases, want.ReleasedReservations, want.ReleasedLeases)
			}
		})
	}
}
