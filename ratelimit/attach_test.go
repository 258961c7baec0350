package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach is all or nothing: a grant with a row that no longer exists
// (pruned, or never written) links none of its other rows. Before, the
// rows that existed were adopted by the task before ErrUnknownGrant came
// back, so finishing the task released a grant that Attach had refused.
func TestAttachOfAGrantWithAMissingRowLinksNothing(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	task := startSync(t, l, time.Minute)
	key := uniqueKey("key")
	taskless, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	for _, missing := range []string{"reservation", "lease"} {
		g := taskless
		g.Reservations = slices.Clone(taskless.Reservations)
		g.Leases = slices.Clone(taskless.Leases)
		const gone = "123e4567-e89b-12d3-a456-426614174000"
		if missing == "reservation" {
			extra := g.Reservations[0]
			extra.ID = gone
			g.Reservations = append(g.Reservations, extra)
		} else {
			extra := g.Leases[0]
			extra.ID = gone
			g.Leases = append(g.Leases, extra)
		}
		if _, err := l.Attach(ctx, task.AttemptID, g); !errors.Is(err, ratelimit.ErrUnknownGrant) {
			t.Fatalf("Attach of a grant with a missing %s: err = %v, want ErrUnknownGrant", missing, err)
		}
	}
	finished, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if finished.ReleasedReservations != 0 || finished.ReleasedLeases != 0 {
		t.Fatalf("FinishTask released %d reservations and %d leases, want 0 and 0: the refused Attach linked the grant's other rows to the task",
			finished.ReleasedReservations, finished.ReleasedLeases)
	}
	if _, err := l.Release(ctx, taskless, "done"); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Attach locks a grant's leases in id order, as every statement that locks
// several leases does: otherwise it deadlocks with FinishTask of the same
// task (which locks them in id order) when the two meet on the leases in
// opposite orders. Each case holds one lease from another transaction,
// starts FinishTask, then Attach, and lets go.
func TestAttachLocksLeasesInIdOrder(t *testing.T) {
	for _, reversed := range []bool{false, true} {
		for held := range 2 {
			t.Run(fmt.Sprintf("reversed=%v/held=%d", reversed, held), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				l, pool := setup(t)
				task := startSync(t, l, time.Minute)
				var limits []ratelimit.Limit
				for i := range 8 {
					limits = append(limits, concurrent("model", uniqueKey(fmt.Sprintf("m%d", i)), 10))
				}
				grant, err := l.Reserve(ctx, task.ID, "", limits)
				if err != nil {
					t.Fatalf("Reserve: %v", err)
				}
				if reversed {
					slices.Reverse(grant.Leases)
				}
				// The lease first in id order, or the last.
				ids := make([]string, len(grant.Leases))
				for i, lease := range grant.Leases {
					ids[i] = lease.ID
				}
				slices.Sort(ids)
				target := ids[0]
				if held == 1 {
					target = ids[len(ids)-1]
				}

				finishErr, attachErr := meetFinishTask(t, l, pool, task, target, func() error {
					_, err := l.Attach(ctx, task.AttemptID, grant)
					return err
				})
				var pgErr *pgconn.PgError
				for name, err := range map[string]error{"FinishTask": finishErr, "Attach": attachErr} {
					if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
						t.Errorf("%s deadlocked: %v", name, err)
					} else if err != nil && !errors.Is(err, ratelimit.ErrTaskFinished) {
						t.Errorf("%s: %v", name, err)
					}
				}
			})
		}
	}
}
