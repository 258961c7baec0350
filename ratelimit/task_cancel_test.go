package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// asNotQueued returns err as a *TaskNotQueuedError, failing the test
// otherwise.
func asNotQueued(t *testing.T, err error) *ratelimit.TaskNotQueuedError {
	t.Helper()
	var nq *ratelimit.TaskNotQueuedError
	if !errors.As(err, &nq) || !errors.Is(err, ratelimit.ErrTaskNotQueued) {
		t.Fatalf("error %v is not a *TaskNotQueuedError", err)
	}
	return nq
}

// A queued task's owner cancels it: the task ends cancelled, once, and
// gives back its queue place and what was reserved for it while it
// waited (a Reserve naming only the task), in one transaction.
func TestCancelTaskQueuedFreesWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	key := uniqueKey("k")
	q := queueLimit(key, 1)
	task := createAsync(t, l, q)
	if _, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricTokens, 1000, 300), concurrent("model", key, 1),
	}); err != nil {
		t.Fatalf("Reserve for the queued task: %v", err)
	}
	if _, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{q}}); err == nil {
		t.Fatal("a second task took the queue's only place")
	}

	res, err := l.CancelTask(ctx, task.ID, "client went away")
	if err != nil {
		t.Fatalf("CancelTask: %v", err)
	}
	if res.ReleasedReservations != 1 || res.ReleasedLeases != 1 || res.DeletedAdmissions != 1 {
		t.Fatalf("CancelTask result = %+v, want 1 reservation, 1 lease, 1 admission", res)
	}
	got := res.Task
	if got.ID != task.ID || got.Status != ratelimit.TaskCancelled || got.ErrorCode != ratelimit.ErrorCodeCancelledWhileQueued ||
		got.ErrorMessage != "client went away" || got.FinishedAt.IsZero() || got.ExecutionToken != "" || got.AttemptCount != 0 || got.LastEventSeq != 2 {
		t.Fatalf("cancelled task = %+v", got)
	}
	if read := getTask(t, l, task.ID); !cmp.Equal(got, read) {
		t.Fatalf("CancelTask returned what GetTask does not read (-returned +read):\n%s", cmp.Diff(got, read))
	}
	if diff := cmp.Diff([]string{"task.queued", "task.cancelled"}, eventTypes(t, l, task.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if attempts := attemptStates(t, l, task.ID); len(attempts) != 0 {
		t.Fatalf("attempts of a task cancelled while queued: %v", attempts)
	}
	s := summary(t, pool)
	if s.TasksCancelled != 1 || s.Admissions != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 || s.CountersUsed != 0 {
		t.Fatalf("summary after cancel = %+v", s)
	}
	assertDoctorOK(t, pool)

	// Nobody runs it, and its place counts again.
	if _, err := l.ClaimTask(ctx, "w", 0); !errors.Is(err, ratelimit.ErrNoTask) {
		t.Fatalf("ClaimTask after the cancel: %v, want ErrNoTask", err)
	}
	createAsync(t, l, q)

	// Once: a second cancel changes nothing and says why.
	_, err = l.CancelTask(ctx, task.ID, "again")
	if nq := asNotQueued(t, err); nq.TaskID != task.ID || nq.Status != ratelimit.TaskCancelled {
		t.Fatalf("second CancelTask: %+v", nq)
	}
	if again := getTask(t, l, task.ID); !cmp.Equal(got, again) {
		t.Fatalf("the second CancelTask changed the task (-before +after):\n%s", cmp.Diff(got, again))
	}
}

// Only a queued task is cancelled; any other is refused with a typed
// error and left as it was.
func TestCancelTaskRefusesWhatIsNotQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	key := uniqueKey("k")

	// Claimed: running, its worker's.
	createAsync(t, l, queueLimit(key, 5))
	running := claim(t, l, "w", time.Minute)
	_, err := l.CancelTask(ctx, running.ID, "")
	if nq := asNotQueued(t, err); nq.Status != ratelimit.TaskRunning {
		t.Fatalf("CancelTask of a running task: %+v", nq)
	}
	if after := getTask(t, l, running.ID); !cmp.Equal(running, after) {
		t.Fatalf("CancelTask changed a running task (-before +after):\n%s", cmp.Diff(running, after))
	}
	// A sync task is never queued.
	syncTask := startSync(t, l, time.Minute)
	_, err = l.CancelTask(ctx, syncTask.ID, "")
	if nq := asNotQueued(t, err); nq.Status != ratelimit.TaskRunning {
		t.Fatalf("CancelTask of a sync task: %+v", nq)
	}
	// Finished.
	if _, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	_, err = l.CancelTask(ctx, running.ID, "")
	if nq := asNotQueued(t, err); nq.Status != ratelimit.TaskSucceeded {
		t.Fatalf("CancelTask of a finished task: %+v", nq)
	}
	// Unknown, and not an id.
	if _, err := l.CancelTask(ctx, "123e4567-e89b-12d3-a456-426614174000", ""); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("CancelTask of an unknown task: %v, want ErrUnknownTask", err)
	}
	var invalid *ratelimit.ValidationError
	if _, err := l.CancelTask(ctx, "nope", ""); !errors.As(err, &invalid) || invalid.Field != "taskID" {
		t.Fatalf("CancelTask of a malformed id: %v, want a *ValidationError on taskID", err)
	}
	queued := createAsync(t, l)
	if _, err := l.CancelTask(ctx, queued.ID, "bad\x00reason"); !errors.As(err, &invalid) || invalid.Field != "reason" {
		t.Fatalf("CancelTask with a NUL in its reason: %v, want a *ValidationError on reason", err)
	}
	// Outside READ COMMITTED it would miss what committed after its
	// snapshot: refused, nothing written.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.WithTx(tx).CancelTask(ctx, queued.ID, "")
	_ = tx.Rollback(ctx)
	if !errors.Is(err, ratelimit.ErrIsolation) {
		t.Fatalf("CancelTask in REPEATABLE READ: %v, want ErrIsolation", err)
	}
	if got := getTask(t, l, queued.ID); got.Status != ratelimit.TaskQueued {
		t.Fatalf("refused CancelTask left the task %s", got.Status)
	}
	if _, err := l.CancelTask(ctx, queued.ID, ""); err != nil {
		t.Fatalf("CancelTask: %v", err)
	}

	// Requeued by Recover after its worker died: queued again, so
	// cancellable; its failed attempt stays as it was.
	requeued := createAsync(t, l)
	dead := claim(t, l, "dead", time.Second)
	if dead.ID != requeued.ID {
		t.Fatalf("claimed %s, want %s", dead.ID, requeued.ID)
	}
	clock.pass(dead.LeaseExpiresAt)
	recoverOnce(t, m, ratelimit.RecoveryResult{FailedAttempts: 1, RequeuedAsyncTasks: 1})
	if _, err := l.CancelTask(ctx, requeued.ID, ""); err != nil {
		t.Fatalf("CancelTask of a requeued task: %v", err)
	}
	if diff := cmp.Diff([]string{"task.queued", "task.running", "task.queued", "task.cancelled"}, eventTypes(t, l, requeued.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"failed/" + ratelimit.ErrorCodeExecutionLeaseExpired}, attemptStates(t, l, requeued.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
	assertDoctorOK(t, pool)
}

// CancelTask locks its task row FOR UPDATE, as FinishTask does: in one
// transaction of a caller's, only one of them may run (see
// TestFinishTaskTwiceInATransactionDoesNotDeadlockWithABatch).
func TestCancelTaskInATransactionFollowsTheLockOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	t1, t2, running := createAsync(t, l), createAsync(t, l), startSync(t, l, time.Minute)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lt := l.WithTx(tx)
	if _, err := lt.CancelTask(ctx, t1.ID, ""); err != nil {
		t.Fatalf("CancelTask in the transaction: %v", err)
	}
	var order *ratelimit.LockOrderError
	if _, err := lt.CancelTask(ctx, t2.ID, ""); !errors.As(err, &order) || order.Op != "CancelTask" || order.Previous != "CancelTask" {
		t.Fatalf("second CancelTask in the transaction: %v, want a *LockOrderError", err)
	}
	if _, err := lt.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); !errors.Is(err, ratelimit.ErrLockOrder) {
		t.Fatalf("FinishTask after CancelTask in the transaction: %v, want ErrLockOrder", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := getTask(t, l, t1.ID); got.Status != ratelimit.TaskCancelled {
		t.Fatalf("task cancelled in the transaction is %s", got.Status)
	}
	if got := getTask(t, l, t2.ID); got.Status != ratelimit.TaskQueued {
		t.Fatalf("task refused in the transaction is %s", got.Status)
	}
	if got := getTask(t, l, running.ID); got.Status != ratelimit.TaskRunning {
		t.Fatalf("task refused in the transaction is %s", got.Status)
	}
	assertDoctorOK(t, pool)
}

// Cancellers on one pool race workers claiming on another, while a third
// group reserves for the tasks: every task ends either claimed and
// finished by its worker or cancelled, never both, and nothing stays held.
func TestCancelTaskRacesClaimTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	workers, cancellers := ratelimit.New(pools[0]), ratelimit.New(pools[1])
	const n, goroutines = 300, 6
	key := uniqueKey("k")
	q := queueLimit(key, n)
	limits := hourLimits(t, pools[0],
		window("api_key", key, ratelimit.MetricTokens, 1e9, 10), concurrent("model", key, 1e6))
	ids := make([]string, n)
	grants := map[string]ratelimit.Grant{} // read only once the goroutines start
	for i := range ids {
		task := createAsync(t, workers, q)
		ids[i] = task.ID
		if i%2 == 0 { // half of them hold capacity while they wait
			grant, err := workers.Reserve(ctx, task.ID, "", limits)
			if err != nil {
				t.Fatalf("Reserve for a queued task: %v", err)
			}
			grants[task.ID] = grant
		}
	}

	var (
		mu        sync.Mutex
		claimed   = map[string]bool{}
		cancelled = map[string]bool{}
		released  int
		wg        sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(3)
		go func() { // a worker
			defer wg.Done()
			for {
				task, err := workers.ClaimTask(ctx, "w", time.Minute)
				if errors.Is(err, ratelimit.ErrNoTask) {
					return
				}
				if err != nil {
					t.Errorf("ClaimTask: %v", err)
					return
				}
				// What was reserved for the task while it waited is still
				// open: a cancel that lost the race released nothing.
				if grant, ok := grants[task.ID]; ok {
					settled, err := workers.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 7})
					if err != nil {
						t.Errorf("Commit of the claimed task's grant: %v", err)
					} else if len(settled.Reservations) != 1 || !settled.Reservations[0].Settled || settled.LeasesReleased != 1 {
						t.Errorf("Commit of the claimed task's grant: %+v, want its reservation and lease still open", settled)
					}
				}
				if _, err := workers.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
					t.Errorf("FinishTask of a claimed task: %v", err)
				}
				mu.Lock()
				claimed[task.ID] = true
				mu.Unlock()
			}
		}()
		go func() { // a canceller, each in its own order
			defer wg.Done()
			for _, i := range rand.New(rand.NewPCG(uint64(g), 1)).Perm(n) {
				res, err := cancellers.CancelTask(ctx, ids[i], "gone")
				var nq *ratelimit.TaskNotQueuedError
				switch {
				case errors.As(err, &nq):
					if nq.Status == ratelimit.TaskQueued {
						t.Errorf("CancelTask refused a task it reports queued: %+v", nq)
					}
				case err != nil:
					t.Errorf("CancelTask: %v", err)
				default:
					mu.Lock()
					if cancelled[ids[i]] {
						t.Errorf("task %s cancelled twice", ids[i])
					}
					cancelled[ids[i]] = true
					released += res.ReleasedReservations
					mu.Unlock()
				}
			}
		}()
		go func() { // admissions for the tasks, refused once a task finished
			defer wg.Done()
			for _, i := range rand.New(rand.NewPCG(uint64(g), 2)).Perm(n)[:n/3] {
				if _, err := cancellers.Reserve(ctx, ids[i], "", limits); err != nil && !errors.Is(err, ratelimit.ErrTaskFinished) {
					t.Errorf("Reserve: %v", err)
				}
			}
		}()
	}
	wg.Wait()

	for _, id := range ids {
		task := getTask(t, workers, id)
		switch {
		case claimed[id] && cancelled[id]:
			t.Errorf("task %s was both claimed and cancelled (now %s)", id, task.Status)
		case claimed[id] && task.Status != ratelimit.TaskSucceeded, cancelled[id] && task.Status != ratelimit.TaskCancelled:
			t.Errorf("task %s (claimed %v, cancelled %v) is %s", id, claimed[id], cancelled[id], task.Status)
		case !claimed[id] && !cancelled[id]:
			t.Errorf("task %s was neither claimed nor cancelled (now %s)", id, task.Status)
		}
	}
	s := summary(t, pools[0])
	if s.TasksQueued != 0 || s.TasksRunning != 0 || s.Admissions != 0 || s.AttemptsRunning != 0 ||
		s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 {
		t.Errorf("summary after the race = %+v", s)
	}
	t.Logf("%d claimed, %d cancelled (%d reservations released by the cancels)", len(claimed), len(cancelled), released)
	if len(cancelled) == 0 || len(claimed) == 0 {
		t.Errorf("no race: %d claimed, %d cancelled", len(claimed), len(cancelled))
	}
	assertBooksBalance(t, pools[0], "api_key", key)
	assertDoctorOK(t, pools[0])
}

// A Reserve for the queued task that has written its rows but not yet
// committed when CancelTask comes (here, in a caller's transaction) is
// waited for, and what it wrote is released with the task; a Reserve
// that comes after the cancel is refused.
func TestCancelTaskWaitsForAReserveInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	key := uniqueKey("k")
	limits := []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1000, 10), concurrent("api_key", key, 1)}
	task := createAsync(t, l)
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).Reserve(ctx, task.ID, "", limits); err != nil {
		t.Fatalf("Reserve in the transaction: %v", err)
	}
	type outcome struct {
		res ratelimit.FinishResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := l.CancelTask(ctx, task.ID, "")
		done <- outcome{res, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "CancelTask")
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("CancelTask: %v", got.err)
	}
	if got.res.ReleasedReservations != 1 || got.res.ReleasedLeases != 1 || got.res.Task.Status != ratelimit.TaskCancelled {
		t.Fatalf("CancelTask result = %+v, want the reservation and lease written meanwhile released", got.res)
	}
	if _, err := l.Reserve(ctx, task.ID, "", limits); !errors.Is(err, ratelimit.ErrTaskFinished) {
		t.Fatalf("Reserve after the cancel: %v, want ErrTaskFinished", err)
	}
	assertNothingHeld(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}
