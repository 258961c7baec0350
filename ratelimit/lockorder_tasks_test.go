package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The flow the README recommends, in one caller's transaction: commit the
// task's grant, then finish the task. FinishTask takes the task's other
// live leases in id order; when one of them is below the lease the Commit
// locked, it would wait for it holding the higher one, while a renewal of
// both (the worker's heartbeat, in a session of its own) holds the lower
// and waits for the higher: a deadlock. FinishTask must be refused before
// it runs (*LockOrderError), as a Commit of that lower lease would be.
func TestFinishTaskBelowALeaseTheTransactionLockedIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	l, heartbeat := ratelimit.New(pools[0]), ratelimit.New(pools[1])
	task := startSync(t, l, time.Minute)
	reserve := func() ratelimit.Grant {
		g, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{concurrent("model", uniqueKey("m"), 5)})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	low, high := reserve(), reserve()
	if low.Leases[0].ID > high.Leases[0].ID {
		low, high = high, low
	}

	tx := heldTx(t, pools[0])
	lt := l.WithTx(tx)
	if _, err := lt.Commit(ctx, high, nil); err != nil {
		t.Fatalf("Commit of the grant with the higher lease id: %v", err)
	}
	renewed := make(chan error, 1)
	go func() {
		_, err := heartbeat.RenewLeases(ctx, append(low.Leases, high.Leases...))
		renewed <- err
	}()
	pgtest.AwaitLockWaiters(t, pools[0], "RenewLeases")
	_, err := lt.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	assertRefusedNotDeadlocked(t, tx, "FinishTask", err, "RenewLeases", renewed)
	// Refused, FinishTask wrote nothing: the task still runs, and finishes
	// in a transaction of its own.
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning {
		t.Errorf("task %s after the refused FinishTask, want running", got.Status)
	}
	if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask in its own transaction: %v", err)
	}
}

// The same flow with one grant: Commit, then FinishTask, in one caller's
// transaction, meets a second FinishTask of the same claim (another
// gateway instance finishing it, a watchdog failing it) that started in
// between. That one holds the task row FOR UPDATE and waits for the lease
// the Commit holds; FinishTask in the transaction waits for the task row.
// The guard cannot see the other session: the order of one transaction's
// operations is sound, and refusing it would refuse the natural flow. The
// README says so: PostgreSQL aborts one of the two (40P01), and what the
// other did stands. Pinned here: a deadlock, not a *LockOrderError, and
// after it the task is finished with no lease left live.
func TestCommitThenFinishInATransactionDeadlocksWithAnotherFinishOfTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	l, other := ratelimit.New(pools[0]), ratelimit.New(pools[1])
	task := startSync(t, l, time.Minute)
	model := uniqueKey("m")
	grant, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{concurrent("model", model, 5)})
	if err != nil {
		t.Fatal(err)
	}

	tx := heldTx(t, pools[0])
	lt := l.WithTx(tx)
	if _, err := lt.Commit(ctx, grant, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := other.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed})
		finished <- err
	}()
	pgtest.AwaitLockWaiters(t, pools[0], "the other FinishTask")
	_, err = lt.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if errors.Is(err, ratelimit.ErrLockOrder) {
		t.Fatalf("FinishTask after Commit in the transaction refused: %v", err)
	}
	if err == nil {
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	} else {
		_ = tx.Rollback(ctx)
	}
	otherErr := <-finished
	if !isDeadlock(err) && !isDeadlock(otherErr) {
		t.Errorf("neither deadlocked: in the transaction %v, the other %v", err, otherErr)
	}
	if got := getTask(t, l, task.ID); got.Status == ratelimit.TaskRunning {
		t.Errorf("task still running after the deadlock")
	}
	if n := liveLeases(t, pools[0], "model", model); n != 0 {
		t.Errorf("%d leases live after the deadlock", n)
	}
}

// Task rows that operations of callers' transactions lock (heartbeats,
// events, attaches, a finish) rank against each other only as any rows of
// the caller's do: two transactions that touch two tasks crosswise
// deadlock, and the guard does not refuse either (the README leaves the
// order of several tasks to the caller: in task id order). Touched in one
// order, the second transaction waits for the first instead.
func TestTasksTouchedCrosswiseInTwoTransactionsDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	l := ratelimit.New(pools[0])
	a, b := startSync(t, l, time.Minute), startSync(t, l, time.Minute)
	if a.ID > b.ID {
		a, b = b, a
	}
	beat := func(lt *ratelimit.Limiter, task ratelimit.Task) error {
		_, err := lt.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
		return err
	}
	// run: tx1 beats first1, tx2 beats first2, tx1 beats second1 (waiting
	// when tx2 holds it), tx2 beats second2. Returns what the last two did.
	run := func(first1, second1, first2, second2 ratelimit.Task) (err1, err2 error) {
		tx1, tx2 := heldTx(t, pools[0]), heldTx(t, pools[1])
		defer func() { _, _ = tx1.Rollback(ctx), tx2.Rollback(ctx) }()
		lt1, lt2 := ratelimit.New(pools[0]).WithTx(tx1), ratelimit.New(pools[1]).WithTx(tx2)
		if err := beat(lt1, first1); err != nil {
			t.Fatal(err)
		}
		done1 := make(chan error, 1)
		if first2.ID == first1.ID {
			// tx2 waits on its first beat: run it behind tx1's second.
			go func() { done1 <- beat(lt2, first2) }()
			pgtest.AwaitLockWaiters(t, pools[0], "the second transaction")
			if err1 = beat(lt1, second1); err1 == nil {
				err1 = tx1.Commit(ctx)
			}
			if err := <-done1; err != nil {
				t.Fatal(err)
			}
			return err1, beat(lt2, second2)
		}
		if err := beat(lt2, first2); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := beat(lt1, second1)
			if err != nil {
				_ = tx1.Rollback(ctx) // let tx2 go on
			}
			done1 <- err
		}()
		pgtest.AwaitLockWaiters(t, pools[0], "the first transaction")
		err2 = beat(lt2, second2)
		if err2 != nil {
			_ = tx2.Rollback(ctx)
		}
		return <-done1, err2
	}

	err1, err2 := run(a, b, b, a)
	for _, err := range []error{err1, err2} {
		if errors.Is(err, ratelimit.ErrLockOrder) {
			t.Errorf("crosswise heartbeats refused by the guard: %v", err)
		}
	}
	if !isDeadlock(err1) && !isDeadlock(err2) {
		t.Errorf("crosswise: neither deadlocked: %v, %v", err1, err2)
	}

	err1, err2 = run(a, b, a, b)
	if err1 != nil || err2 != nil {
		t.Errorf("in task id order: %v, %v, want both to succeed", err1, err2)
	}
}
