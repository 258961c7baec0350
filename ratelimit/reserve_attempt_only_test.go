package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Reserve with an attempt id but no task id wrote its reservation and
// lease with the attempt alone (task_id NULL): FinishTask, which settles a
// task's rows by task id, left them open on the finished attempt (a
// concurrency slot held until Recover or its TTL; Doctor reported
// live_lease_of_finished_attempt), and nothing serialized the admission
// with FinishTask. Now Reserve refuses an attempt id without its task id,
// before anything is sent.
func TestReserveWithAnAttemptButNoTaskIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	key := uniqueKey("attemptonly")
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, pool)
	limits := []ratelimit.Limit{window("api_key", key, "tokens", 1000, 10), concurrent("model", key, 1)}
	_, err = l.Reserve(ctx, "", task.AttemptID, limits)
	var verr *ratelimit.ValidationError
	if !errors.As(err, &verr) || verr.Field != "TaskID" || !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Fatalf("Reserve with an attempt but no task: %v, want a *ValidationError on TaskID", err)
	}
	if after := rowCounts(t, pool); after != before {
		t.Fatalf("the refused Reserve wrote rows: %+v, then %+v", before, after)
	}
	// With its task, the attempt's admission is settled by FinishTask.
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); err != nil {
		t.Fatalf("Reserve with task and attempt: %v", err)
	}
	res, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil || res.ReleasedLeases != 1 || res.ReleasedReservations != 1 {
		t.Fatalf("FinishTask = %+v, %v; want 1 lease and 1 reservation released", res, err)
	}
	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil || !report.OK() {
		t.Fatalf("Doctor after FinishTask: %+v, %v", report, err)
	}
}
