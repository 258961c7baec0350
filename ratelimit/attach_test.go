package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

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
