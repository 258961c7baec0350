package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The undo of CreateTask (TaskCancelAbandoned) and of ClaimTask
// (TaskUnclaim) for a caller who left after the commit never touches a
// task that a real worker owns by then: an async task claimed between the
// creation and its undo, and a task that recovery reclaimed and another
// worker claimed between the lost claim and its undo. The worker's claim
// stays whole (it heartbeats and finishes), the books stay right and
// Doctor is clean.
func TestAbandonUndoSparesATaskAWorkerClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	bg := context.Background()

	t.Run("create, then a worker claims", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		kind := uniqueKey("kind") // in the creation's statement only
		held, answers := holdAnswers(t, pool, kind)
		l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute))
		direct := ratelimit.New(pool)
		q := queueLimit(uniqueKey("q"), 1)

		ctx, leave := context.WithCancel(bg)
		errs := make(chan error, 1)
		go func() {
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: kind, QueueLimits: []ratelimit.Limit{q}})
			errs <- err
		}()
		awaitSummary(t, pool, "the task created", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksQueued == 1 })
		task := claim(t, direct, "w-real", time.Hour)
		leaveThenAnswer(leave, answers.release)
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("CreateTask after its caller left: %v, want context.Canceled", err)
		}
		l.Close() // the undo, run in the background, is over before the worker goes on
		if _, err := direct.HeartbeatTask(bg, task.ID, task.ExecutionToken, time.Hour); err != nil {
			t.Errorf("the worker's heartbeat: %v", err)
		}
		if _, err := direct.FinishTask(bg, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Errorf("the worker's FinishTask: %v", err)
		}
		want := []string{"task.queued", "task.running", "task.completed"}
		if got := eventTypes(t, direct, task.ID); !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if s := summary(t, pool); s.TasksCancelled != 0 || s.Admissions != 0 {
			t.Errorf("%d tasks cancelled, %d queue admissions; want none", s.TasksCancelled, s.Admissions)
		}
		assertDoctorOK(t, pool)
	})

	t.Run("claim, then recovery and another worker", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		c := &testClock{}
		direct, m := clocked(pool, c)
		worker := uniqueKey("w")
		held, answers := holdAnswers(t, pool, worker)
		l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute), ratelimit.WithClock(c.now))
		created := createAsync(t, direct, queueLimit(uniqueKey("q"), 1))

		ctx, leave := context.WithCancel(bg)
		errs := make(chan error, 1)
		go func() { _, err := l.ClaimTask(ctx, worker, time.Minute); errs <- err }()
		awaitSummary(t, pool, "the task claimed", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksRunning == 1 })
		c.advance(2 * time.Minute)
		if res, err := m.Recover(bg); err != nil {
			t.Fatalf("Recover: %v", err)
		} else if s := summary(t, pool); s.TasksQueued != 1 {
			t.Fatalf("Recover did not requeue the task: %+v, %+v", res, s)
		}
		task := claim(t, direct, "w-real", time.Hour)
		if task.ID != created.ID {
			t.Fatalf("claimed %s, want %s", task.ID, created.ID)
		}
		leaveThenAnswer(leave, answers.release)
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("ClaimTask after its caller left: %v, want context.Canceled", err)
		}
		l.Close() // the undo, run in the background, is over before the worker goes on
		if got := getTask(t, direct, task.ID); got.Status != ratelimit.TaskRunning || got.ExecutionToken != task.ExecutionToken {
			t.Fatalf("the real worker's task after the undo: %s under %s, want running under %s", got.Status, got.ExecutionToken, task.ExecutionToken)
		}
		if _, err := direct.FinishTask(bg, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Errorf("the worker's FinishTask: %v", err)
		}
		// Recover's requeue is the second task.queued; the undo adds none.
		want := []string{"task.queued", "task.running", "task.queued", "task.running", "task.completed"}
		if got := eventTypes(t, direct, task.ID); !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if got := getTask(t, direct, task.ID); got.AttemptCount != 2 || got.RequeueCount != 1 {
			t.Errorf("attempts %d, requeues %d; want 2 and 1", got.AttemptCount, got.RequeueCount)
		}
		assertDoctorOK(t, pool)
	})
}
