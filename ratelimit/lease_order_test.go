package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every statement that locks several leases locks them in id order, so an
// operation on a task's leases, whatever order its caller lists them in,
// waits for FinishTask instead of deadlocking with it. Each case holds one
// of the two leases from another transaction, starts FinishTask, then the
// operation, and lets go. Under the old orders (FinishTask's in the order
// its index scan met the rows, the others' in the caller's) one case of
// each operation deadlocked, and PostgreSQL aborted one of the two.
func TestLeasesAreLockedInOneOrder(t *testing.T) {
	ops := map[string]func(context.Context, *ratelimit.Limiter, ratelimit.Grant) error{
		"RenewLeases": func(ctx context.Context, l *ratelimit.Limiter, g ratelimit.Grant) error {
			_, err := l.RenewLeases(ctx, g.Leases)
			if errors.Is(err, ratelimit.ErrLeaseLost) { // FinishTask released them first
				return nil
			}
			return err
		},
		"ReleaseLeases": func(ctx context.Context, l *ratelimit.Limiter, g ratelimit.Grant) error {
			_, err := l.ReleaseLeases(ctx, g.Leases, "done")
			return err
		},
		"Release": func(ctx context.Context, l *ratelimit.Limiter, g ratelimit.Grant) error {
			_, err := l.Release(ctx, g, "done")
			return err
		},
	}
	for name, op := range ops {
		for _, reversed := range []bool{false, true} {
			for held := range 2 {
				t.Run(fmt.Sprintf("%s/reversed=%v/held=%d", name, reversed, held), func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					l, pool := setup(t)
					task := startSync(t, l, time.Minute)
					grant, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{
						concurrent("model", uniqueKey("m"), 10), concurrent("account", uniqueKey("a"), 10),
					})
					if err != nil {
						t.Fatalf("Reserve: %v", err)
					}
					if reversed {
						slices.Reverse(grant.Leases)
					}

					finishErr, opErr := meetFinishTask(t, l, pool, task, grant.Leases[held].ID, func() error { return op(ctx, l, grant) })
					if finishErr != nil {
						t.Errorf("FinishTask: %v", finishErr)
					}
					if opErr != nil {
						t.Errorf("%s: %v", name, opErr)
					}
					for _, lease := range grant.Leases {
						if n := liveLeases(t, pool, lease.ScopeType, lease.ScopeKey); n != 0 {
							t.Errorf("%s %s: %d leases still live", lease.ScopeType, lease.ScopeKey, n)
						}
					}
				})
			}
		}
	}
}

// meetFinishTask makes op meet FinishTask of task on the task's leases:
// another transaction holds the lease heldID, FinishTask starts and waits
// for it, then op starts and waits too (meetOnLease), and the holder lets
// go. It returns what FinishTask and op returned.
func meetFinishTask(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool, task ratelimit.Task, heldID string, op func() error) (finishErr, opErr error) {
	t.Helper()
	meetOnLease(t, pool, heldID,
		func() {
			_, finishErr = l.FinishTask(context.Background(), task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		},
		func() { opErr = op() })
	return finishErr, opErr
}
