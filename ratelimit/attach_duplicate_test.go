package ratelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach of a grant that names one reservation or lease twice (not a grant
// Reserve returned: two grants spliced into one, say) is refused as bad
// input before anything is sent, and links nothing. Before, the statement
// linked the rows to the attempt's task, and only then did the counts
// (one row updated for two ids) make Attach return ErrUnknownGrant: the
// caller was told the grant was refused, and finishing the task released
// the reservation it still meant to commit.
func TestAttachOfAGrantNamingARowTwiceLinksNothing(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	task := startSync(t, l, time.Minute)
	key := uniqueKey("attachtwice")
	taskless, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	for _, twice := range []string{"reservation", "lease"} {
		g := taskless
		g.Reservations = slices.Clone(taskless.Reservations)
		g.Leases = slices.Clone(taskless.Leases)
		field := "Reservations.ID[1]"
		if twice == "reservation" {
			g.Reservations = append(g.Reservations, g.Reservations[0])
		} else {
			g.Leases = append(g.Leases, g.Leases[0])
			field = "Leases.ID[1]"
		}
		_, err := l.Attach(ctx, task.AttemptID, g)
		assertValidation(t, "Attach of a grant naming a "+twice+" twice", err, field)
	}
	finished, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if finished.ReleasedReservations != 0 || finished.ReleasedLeases != 0 {
		t.Fatalf("FinishTask released %d reservations and %d leases, want 0 and 0: a refused Attach linked the grant to the task",
			finished.ReleasedReservations, finished.ReleasedLeases)
	}
	s, err := l.Commit(ctx, taskless, nil)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if len(s.Reservations) != 1 || !s.Reservations[0].Settled || s.Reservations[0].Status != ratelimit.StatusCommitted || s.LeasesReleased != 1 {
		t.Fatalf("Commit of the grant after the refused Attach = %+v, want its reservation committed and its lease released by it", s)
	}
}
