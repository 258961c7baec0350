package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// These tests make a caller of CreateTask or ClaimTask leave in the moment
// between the server's commit of its statement and the client's reading of
// the answer (heldAnswers, cancel_test.go): the server created or claimed a
// task that its caller never learns of.

// awaitSummary polls the state summary until ok accepts it.
func awaitSummary(t *testing.T, pool *pgxpool.Pool, what string, ok func(dbtest.OpsStateSummaryRow) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		s := summary(t, pool)
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s: %+v", what, s)
		}
	}
}

// leaveThenAnswer makes a caller of CreateTask or ClaimTask leave, then lets
// its statement's answer come (answer). The caller has left once leave
// returns, on every run, however late its goroutine runs: these calls do
// not go through a combiner but run their statement on the caller's
// goroutine (runToAnswer), which reads ctx's error only once the statement
// is answered, and the answer cannot come before answer is called. So no
// wait goes between the two (there used to be a sleep).
func leaveThenAnswer(leave context.CancelFunc, answer func()) {
	leave()
	answer()
}

// A caller of CreateTask who leaves after the server created the task gets
// its context's error, and the task is cancelled: it holds no queue place,
// no worker claims it, and a sync task does not run on (its attempt and
// execution lease held until recovery fails it). It used to stay queued,
// to be claimed, or running until its lease expired.
func TestCreateTaskCallerWhoLeavesAfterTheCommitLeavesNoTask(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{true, false} {
		name := "sync"
		if async {
			name = "async"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			key := uniqueKey("q")
			held, answers := holdAnswers(t, pool, key)
			l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute))
			spec := ratelimit.TaskSpec{Async: async, Kind: "test", QueueLimits: []ratelimit.Limit{queueLimit(key, 1)}}
			if !async {
				spec.Worker, spec.LeaseTTL = "w-sync", time.Hour
			}

			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			go func() { _, err := l.CreateTask(ctx, spec); errs <- err }()
			awaitSummary(t, pool, "a task created", func(s dbtest.OpsStateSummaryRow) bool {
				return s.TasksQueued+s.TasksRunning == 1
			}) // the server committed; its answer is held
			leaveThenAnswer(leave, answers.release)
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("CreateTask after its caller left: %v, want context.Canceled", err)
			}
			l.Close() // waits for the cancelling, done in the background

			s := summary(t, pool)
			if s.TasksQueued != 0 || s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.Admissions != 0 || s.TasksCancelled != 1 {
				t.Errorf("after the caller left: %d queued, %d running, %d attempts running, %d queue admissions, %d cancelled; want only 1 cancelled",
					s.TasksQueued, s.TasksRunning, s.AttemptsRunning, s.Admissions, s.TasksCancelled)
			}
			direct := ratelimit.New(pool)
			if task, err := direct.ClaimTask(context.Background(), "w", time.Minute); !errors.Is(err, ratelimit.ErrNoTask) {
				t.Errorf("ClaimTask after the creator left: %+v, %v; want ErrNoTask", task, err)
			}
			// The queue place is free again.
			if _, err := direct.CreateTask(context.Background(), ratelimit.TaskSpec{Async: true, QueueLimits: spec.QueueLimits}); err != nil {
				t.Errorf("CreateTask in the place of the task its caller left: %v", err)
			}
		})
	}
}

// A caller of ClaimTask who leaves after the server claimed a task gets its
// context's error, and the task is put back: queued, its attempt over, due
// for the next worker at once. It used to stay running under a worker that
// never learned of it until its lease expired and recovery requeued it
// (counting a requeue towards the poison cap).
func TestClaimTaskCallerWhoLeavesAfterTheCommitLeavesTheTaskQueued(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	worker := uniqueKey("w")
	held, answers := holdAnswers(t, pool, worker) // the worker id is in the claim's statement
	l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute))
	direct := ratelimit.New(pool)
	created := createAsync(t, direct, queueLimit(uniqueKey("q"), 1))

	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := l.ClaimTask(ctx, worker, time.Hour); errs <- err }()
	awaitSummary(t, pool, "the task claimed", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksRunning == 1 })
	leaveThenAnswer(leave, answers.release)
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("ClaimTask after its caller left: %v, want context.Canceled", err)
	}
	l.Close() // waits for the putting back, done in the background

	s := summary(t, pool)
	if s.TasksQueued != 1 || s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.Admissions != 1 {
		t.Errorf("after the claimer left: %d queued, %d running, %d attempts running, %d queue admissions; want the task queued with its place",
			s.TasksQueued, s.TasksRunning, s.AttemptsRunning, s.Admissions)
	}
	next, err := direct.ClaimTask(context.Background(), "w-next", time.Minute)
	if err != nil {
		t.Fatalf("the next ClaimTask: %v", err)
	}
	if next.ID != created.ID || next.AttemptCount != 2 || next.RequeueCount != 0 {
		t.Errorf("the next claim got task %s attempt %d requeues %d; want %s, attempt 2, no requeue",
			next.ID, next.AttemptCount, next.RequeueCount, created.ID)
	}
	want := []string{"task.queued", "task.running", "task.queued", "task.running"}
	if got := eventTypes(t, direct, created.ID); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// A caller of CreateTask whose context ends while its statement waits for
// a queue scope's lock, held by another transaction that ends within the
// grace, gets its context's error, and the task its statement then
// creates is cancelled: its place goes back to the queue. A caller who
// leaves a statement that stays stuck past the grace has it cancelled on
// the server and no task either (TestReserveCallerWhoLeavesAStatementStuckOnALock
// shows the cancelling).
func TestCreateTaskCallerWhoLeavesWhileItWaitsForTheQueueLock(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(time.Minute))
	queue := []ratelimit.Limit{queueLimit(uniqueKey("q"), 2)}
	blocker, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }()
	if _, err := l.WithTx(blocker).CreateTask(context.Background(), ratelimit.TaskSpec{Async: true, QueueLimits: queue}); err != nil {
		t.Fatal(err)
	}

	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w-sync", LeaseTTL: time.Hour, QueueLimits: queue})
		errs <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "CreateTask")
	leaveThenAnswer(leave, func() {
		if err := blocker.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateTask after its caller left: %v, want context.Canceled", err)
	}
	l.Close() // waits for the cancelling, done in the background
	s := summary(t, pool)
	if s.TasksQueued != 1 || s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.Admissions != 1 || s.TasksCancelled != 1 {
		t.Errorf("after the caller left: %d queued, %d running, %d attempts running, %d queue admissions, %d cancelled; want the blocker's task queued and the caller's cancelled",
			s.TasksQueued, s.TasksRunning, s.AttemptsRunning, s.Admissions, s.TasksCancelled)
	}
}

// A caller whose context is over before the call sends nothing.
func TestTaskCallsWithAContextOverSendNothing(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	createAsync(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateTask: %v, want context.Canceled", err)
	}
	if _, err := l.ClaimTask(ctx, "w", time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimTask: %v, want context.Canceled", err)
	}
	if s := summary(t, pool); s.TasksQueued != 1 || s.TasksCancelled != 0 || s.TasksRunning != 0 {
		t.Errorf("%d queued, %d running, %d cancelled; want the one task queued, untouched", s.TasksQueued, s.TasksRunning, s.TasksCancelled)
	}
}
