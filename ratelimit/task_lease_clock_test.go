package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A CreateTask that waited for its queue scope longer than its sync task's
// execution lease (another transaction created a task on the scope and
// held it) gets a task whose lease runs its whole TTL from the creation:
// its lease was counted from the batch's start, before the wait, so the
// task was born expired, and the next Recover failed it (server_restarted)
// under its live worker.
func TestCreateTaskThatWaitedPastItsLeaseGetsALiveLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	q := queueLimit(uniqueKey("slowq"), 10)
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{q}}); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	type result struct {
		task ratelimit.Task
		err  error
	}
	done := make(chan result, 1)
	go func() {
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w-slow", LeaseTTL: ttl, QueueLimits: []ratelimit.Limit{q}})
		done <- result{task, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "CreateTask")
	time.Sleep(ttl + 500*time.Millisecond) // past the waiting task's lease
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if now := pgtest.DBNow(t, pool); !r.task.LeaseExpiresAt.After(now) {
		t.Errorf("sync task created with its lease expiring at %v, already past on the database's clock (%v)", r.task.LeaseExpiresAt, now)
	}
	res, err := ratelimit.NewMaintenance(pool).Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.FailedTasks != 0 {
		t.Errorf("Recover right after the creation failed %d sync tasks, want 0: %+v", res.FailedTasks, res)
	}
	if got := getTask(t, l, r.task.ID); got.Status != ratelimit.TaskRunning {
		t.Errorf("task %s is %s right after its creation, want running", got.ID, got.Status)
	}
}

// A ClaimTask, CreateTask or HeartbeatTask inside a caller's transaction
// that began longer ago than the lease's TTL sets a lease that runs its
// whole TTL from the call: counted from now(), the transaction's start, it
// was past already when the call returned it.
func TestTaskLeasesInAnOldTransactionRunFromTheCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	const ttl = time.Second
	queued := createAsync(t, l)
	running := startSync(t, l, time.Minute)

	tx := heldTx(t, pool)
	txl := l.WithTx(tx)
	start := pgtest.DBNow(t, tx) // its now(), for every statement in it
	waitPast(t, pool, start.Add(ttl+200*time.Millisecond))

	check := func(what string, expires time.Time) {
		t.Helper()
		if now := pgtest.DBNow(t, pool); !expires.After(now) {
			t.Errorf("%s in a transaction begun before %v: lease expires at %v, already past at %v", what, start, expires, now)
		}
	}
	claimed, err := txl.ClaimTask(ctx, "w-tx", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if claimed.ID != queued.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, queued.ID)
	}
	check("ClaimTask", claimed.LeaseExpiresAt)
	created, err := txl.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w-tx", LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	check("CreateTask", created.LeaseExpiresAt)
	until, err := txl.HeartbeatTask(ctx, running.ID, running.ExecutionToken, ttl)
	if err != nil {
		t.Fatal(err)
	}
	check("HeartbeatTask", until)
}

// A HeartbeatTask that waited for the task's row while an Attach for the
// task held it (FOR SHARE, until the end of a transaction of the caller's)
// longer than the lease's TTL renewed the lease to a time already past:
// its UPDATE computed the expiry before it waited for the row, and a
// holder that only locked the row makes it go on with that value. Recover
// then took the task from its live worker.
func TestHeartbeatThatWaitedForAnAttachRunsItsTTLFromTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	const ttl = time.Second
	task := startSync(t, l, time.Minute)
	tx := heldTx(t, pool)
	if _, err := l.WithTx(tx).Attach(ctx, task.AttemptID, ratelimit.Grant{}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		until time.Time
		err   error
	}
	done := make(chan result, 1)
	go func() {
		until, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, ttl)
		done <- result{until, err}
	}()
	pgtest.AwaitLockWaiters(t, pool, "HeartbeatTask")
	waitPast(t, pool, pgtest.DBNow(t, pool).Add(ttl+300*time.Millisecond))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if now := pgtest.DBNow(t, pool); !r.until.After(now) {
		t.Errorf("heartbeat that waited for an attach renewed the lease until %v, already past on the database's clock (%v)", r.until, now)
	}
	res, err := ratelimit.NewMaintenance(pool).Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.FailedTasks != 0 {
		t.Errorf("Recover right after the heartbeat failed %d sync tasks, want 0: %+v", res.FailedTasks, res)
	}
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning {
		t.Errorf("task %s is %s right after its heartbeat, want running", got.ID, got.Status)
	}
}
