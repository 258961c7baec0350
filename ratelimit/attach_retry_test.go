package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach's doc says a retry is safe when a call's answer was lost (its
// ctx ended after the server committed the link): the retry with the same
// attempt and grant finds the rows linked to the attempt's task, links
// them again and returns what the first call would have; once the attempt
// no longer runs it gets ErrTaskFinished, and releasing the grant leaves
// what FinishTask settled alone.
func TestAttachAgainWithTheSameAttemptAndGrantIsSafe(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	task := startSync(t, l, time.Minute)
	key := uniqueKey("attachagain")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Attach(ctx, task.AttemptID, grant); err != nil { // the call whose answer was lost
		t.Fatalf("Attach: %v", err)
	}
	again, err := l.Attach(ctx, task.AttemptID, grant)
	if err != nil {
		t.Fatalf("Attach again of the grant it linked: %v", err)
	}
	if again.TaskID != task.ID || again.AttemptID != task.AttemptID {
		t.Fatalf("Attach again = task %q attempt %q, want %q and %q", again.TaskID, again.AttemptID, task.ID, task.AttemptID)
	}
	finished, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if finished.ReleasedReservations != 1 || finished.ReleasedLeases != 1 {
		t.Fatalf("FinishTask released %d reservations and %d leases, want 1 and 1: the grant linked once, to this task",
			finished.ReleasedReservations, finished.ReleasedLeases)
	}
	if _, err := l.Attach(ctx, task.AttemptID, grant); !errors.Is(err, ratelimit.ErrTaskFinished) {
		t.Fatalf("Attach again after FinishTask: %v, want ErrTaskFinished", err)
	}
	s, err := l.Release(ctx, grant, "attach refused")
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !s.AlreadySettled() {
		t.Fatalf("Release after FinishTask settled the grant = %+v, want a no-op", s)
	}
}
