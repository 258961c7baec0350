package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Two Attach calls of one grant taken without a task (leases only, so no
// counter lock serializes them), to running attempts of two different
// tasks, race: exactly one links the grant; the other finds it already of
// another task (ErrUnknownTask) instead of also reporting success while
// the last writer took the lease. Each round holds the lease from another
// transaction until both calls wait for it, so that they always meet.
func TestAttachOfATasklessGrantToTwoTasksLinksOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	const rounds = 8
	for round := range rounds {
		tasks := [2]ratelimit.Task{startSync(t, l, time.Minute), startSync(t, l, time.Minute)}
		key := uniqueKey("m")
		grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", key, 10), concurrent("account", key, 10)})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		var errs [2]error
		var linked [2]ratelimit.Grant
		attach := func(i int) func() {
			return func() { linked[i], errs[i] = l.Attach(ctx, tasks[i].AttemptID, grant) }
		}
		meetOnLease(t, pool, grant.Leases[0].ID, attach(0), attach(1))
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both Attach calls succeeded", round)
				}
				winner = i
			case !errors.Is(err, ratelimit.ErrUnknownTask):
				t.Fatalf("round %d: Attach to task %d: %v, want nil or ErrUnknownTask", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no Attach succeeded: %v", round, errs)
		}
		if linked[winner].TaskID != tasks[winner].ID {
			t.Fatalf("round %d: the linked grant names task %s, want %s", round, linked[winner].TaskID, tasks[winner].ID)
		}
		for _, scope := range []string{"model", "account"} {
			rows, err := testq.OpsHoldingsByScope(ctx, pool, dbtest.OpsHoldingsByScopeParams{ScopeType: scope, ScopeKey: key})
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range rows {
				if got := row.TaskID.String(); got != tasks[winner].ID {
					t.Fatalf("round %d: %s lease linked to task %s, want the winner's %s", round, scope, got, tasks[winner].ID)
				}
			}
		}
	}
}

// meetOnLease makes two calls meet while another transaction holds the
// lease leaseID: first starts and waits for it, then second starts, and
// the holder lets go once second waits too (or ended without waiting).
func meetOnLease(t *testing.T, pool *pgxpool.Pool, leaseID string, first, second func()) {
	t.Helper()
	ctx := context.Background()
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if n, err := testq.OpsLeaseLock(ctx, blocker, mustUUID(t, leaseID)); err != nil || n != 1 {
		t.Fatalf("OpsLeaseLock = %d, %v", n, err)
	}
	firstDone, secondDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(firstDone); first() }()
	awaitWaitersOrDone(t, pool, 1, firstDone)
	go func() { defer close(secondDone); second() }()
	awaitWaitersOrDone(t, pool, 2, secondDone)
	_ = blocker.Rollback(ctx)
	<-firstDone
	<-secondDone
}

// awaitWaitersOrDone waits until n backends wait for a lock, or done is
// closed.
func awaitWaitersOrDone(t *testing.T, pool *pgxpool.Pool, n int, done <-chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		select {
		case <-done:
			return
		default:
		}
		if len(pgtest.LockWaiters(t, pool)) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends never waited for a lock", n)
		}
	}
}
