package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A caller of FinishTask or CancelTask who leaves while its batch is in
// flight, the batch committing all the same, gets its context's error, and
// the reservations linked to the task after the call's first read (a
// Reserve for the task that committed while the batch waited for the task
// row), which only the batch's answer names, are released without
// Recover. The batch used to run in the caller's context: pgx gave its
// connection up when the caller left, the answer was never read, and those
// reservations held their counter's capacity until the next Recover.
func TestTaskEndWhoseCallerLeftMidBatchReleasesLateReservations(t *testing.T) {
	t.Parallel()
	for _, e := range taskEnds {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			// The caller leaves while the batch waits for the task row; the
			// row is free before the grace ends, and the batch commits.
			t.Run("waiting for the task row", func(t *testing.T) {
				t.Parallel()
				pool := pgtest.NewPool(t)
				l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(time.Minute))
				leaveMidBatch(t, pool, l, uniqueKey("end-msg"), e.create, e.end, e.status, func(leave context.CancelFunc, commit func()) {
					leave()
					commit()
				})
			})
			// The batch has committed, its answer not yet read, when the
			// caller leaves: only that answer names the late reservation.
			t.Run("its answer unread", func(t *testing.T) {
				t.Parallel()
				pool := pgtest.NewPool(t)
				msg := uniqueKey("end-msg") // in the batch alone (the outcome's message, the cancel's reason)
				held, answers := holdAnswers(t, pool, msg)
				l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute))
				leaveMidBatch(t, pool, l, msg, e.create, e.end, e.status, func(leave context.CancelFunc, commit func()) {
					commit()
					awaitSummary(t, pool, "the task ended", e.ended)
					leaveThenAnswer(leave, answers.release)
				})
			})
		})
	}
}

// leaveMidBatch creates a task, has a transaction of its own reserve
// for it (a late reservation: end's first read cannot see it, and its
// batch waits for the task row), ends the task with l (end, passing msg)
// in a context that leaveAndCommit ends, committing the transaction as it
// sees fit, and checks that the caller got its context's error, that the
// task took status, and that the late reservation was released without
// Recover.
func leaveMidBatch(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, msg string,
	create func(*testing.T, *ratelimit.Limiter) ratelimit.Task,
	end func(context.Context, *ratelimit.Limiter, ratelimit.Task, string) (ratelimit.FinishResult, error),
	status string, leaveAndCommit func(leave context.CancelFunc, commit func()),
) {
	t.Helper()
	ctx := context.Background()
	direct := ratelimit.New(pool)
	defer direct.Close()
	key := uniqueKey("late")
	task, tx, leave, done := endBehindALateReserve(t, pool, direct, l, key, create, end, msg, "the batch")
	defer leave()
	var commitErr error
	leaveAndCommit(leave, func() { commitErr = tx.Commit(ctx) })
	if commitErr != nil {
		t.Fatalf("commit the Reserve: %v", commitErr)
	}
	got := <-done
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("caller who left mid-batch got %+v, %v; want context.Canceled", got.res, got.err)
	}
	if got.res.Task.ID != task.ID || got.res.Task.Status != status {
		t.Errorf("caller who left mid-batch got the task %+v; want %s %s, the task its batch ended", got.res.Task, task.ID, status)
	}
	l.Close() // waits for what runs in the background

	if read := getTask(t, direct, task.ID); read.Status != status {
		t.Fatalf("task after its caller left: %s; want %s", read.Status, status)
	}
	assertNothingHeld(t, pool, "api_key", key)
	if rec, err := ratelimit.NewMaintenance(pool).Recover(ctx); err != nil || rec.ReleasedRateReservations != 0 {
		t.Fatalf("Recover = %+v, %v; want nothing left for it to release", rec, err)
	}
	assertDoctorOK(t, pool)
}

// A batch of FinishTask or CancelTask still unanswered the grace after its
// caller left (stuck behind the task row's lock) is cancelled: the caller
// gets its context's error (here a deadline's), and the task is left as it
// was, holding the reservation linked to it meanwhile and the one it held
// before. With pgx's default, the connection is given up unread; the task
// has not ended once pgx has closed it, so its reservations are not
// released then (releaseIfEndedUnread; l.Close waits for it).
func TestTaskEndBatchStuckPastTheGraceIsCancelled(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"FinishTask", "CancelTask"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			ctx := context.Background()
			const grace = 50 * time.Millisecond
			l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(grace))
			defer l.Close()
			var task ratelimit.Task
			want := ratelimit.TaskRunning
			if op == "FinishTask" {
				task = startSync(t, l, time.Hour)
			} else {
				task, want = createAsync(t, l), ratelimit.TaskQueued
			}
			key, before := uniqueKey("stuck"), uniqueKey("before")
			if _, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", before, ratelimit.MetricTokens, 100, 100)}); err != nil {
				t.Fatalf("Reserve for the task: %v", err)
			}
			tx := heldTx(t, pool)
			if _, err := l.WithTx(tx).Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 100, 100)}); err != nil {
				t.Fatalf("Reserve for the task in a transaction: %v", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			var err error
			if op == "FinishTask" {
				_, err = l.FinishTask(dctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			} else {
				_, err = l.CancelTask(dctx, task.ID, "")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s stuck past its deadline and the grace: %v; want context.DeadlineExceeded", op, err)
			}
			pgtest.AwaitNoLockWaiters(t, pool, op+"'s batch")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := getTask(t, l, task.ID); got.Status != want {
				t.Fatalf("task after its batch was cancelled: %s; want %s", got.Status, want)
			}
			l.Close()
			for _, k := range []string{key, before} {
				if open := openReservations(t, pool, "api_key", k); open != 1 {
					t.Fatalf("%s: %d reservations open; want the task's one", k, open)
				}
			}
		})
	}
}

// taskEnded is what FinishTask or CancelTask returned.
type taskEnded struct {
	res ratelimit.FinishResult
	err error
}

// endBehindALateReserve creates a task (create, on direct), has a
// transaction of its own (tx, held open: the caller commits it) reserve on
// key for it, a late reservation that the end's first read cannot see, and
// ends the task with l (end, sending msg) in a context that leave ends. It
// returns once the end's batch waits for the task row; done gives what the
// end returned.
func endBehindALateReserve(t *testing.T, pool *pgxpool.Pool, direct, l *ratelimit.Limiter, key string,
	create func(*testing.T, *ratelimit.Limiter) ratelimit.Task,
	end func(context.Context, *ratelimit.Limiter, ratelimit.Task, string) (ratelimit.FinishResult, error),
	msg, batch string,
) (task ratelimit.Task, tx pgx.Tx, leave context.CancelFunc, done <-chan taskEnded) {
	t.Helper()
	task = create(t, direct)
	tx = heldTx(t, pool)
	if _, err := direct.WithTx(tx).Reserve(context.Background(), task.ID, "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 100, 100)}); err != nil {
		t.Fatalf("Reserve for the task in a transaction: %v", err)
	}
	cctx, leave := context.WithCancel(context.Background())
	ended := make(chan taskEnded, 1)
	go func() {
		res, err := end(cctx, l, task, msg)
		ended <- taskEnded{res, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, batch)
	return task, tx, leave, ended
}
