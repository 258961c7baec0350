package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A combined batch that the server rejected as a whole is run again one
// request at a time. The caller of the first request run again leaves
// before its answer, and the batch's in-flight place goes with it
// (detached); the second request is then run on no place, and its caller
// leaves too. Close waits for that statement and for the release of what
// it granted, as it does for any statement its callers left, so that a
// process that closes its Limiter and then its pool gives the grant back.
// Close used to count neither and could return with the grant still held;
// its release then ran on a pool being closed, and it stayed held until
// its window ended.
func TestCloseWaitsForARejectedBatchRunAgainAfterItGaveUpItsPlace(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, 2)
	pool, admin := pools[0], pools[1]
	l := ratelimit.New(pool, ratelimit.WithCombining(8, 1), ratelimit.WithLeftStatementGrace(time.Minute))
	var holding atomic.Bool
	answered, gate := make(chan struct{}, 1), make(chan struct{})
	l.AfterReserveStatements(func(requests int) {
		if requests == 1 && holding.Load() { // a request run again on its own
			answered <- struct{}{}
			<-gate
		}
	})
	ctx := context.Background()
	keyA, keyB := uniqueKey("a"), uniqueKey("b")
	limitsA := hourLimits(t, admin, window("api_key", keyA, "requests", 100, 1))
	limitsB := hourLimits(t, admin, window("api_key", keyB, "requests", 100, 1))
	v := stageVanishingTask(t, l, pool)

	callA, leaveA := context.WithCancel(ctx)
	defer leaveA()
	callB, leaveB := context.WithCancel(ctx)
	defer leaveB()
	errA, errB, ofTask := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { _, err := l.Reserve(callA, "", "", limitsA); errA <- err }()
	awaitQueuedReserves(t, l, 1, "A")
	go func() { _, err := l.Reserve(callB, "", "", limitsB); errB <- err }()
	awaitQueuedReserves(t, l, 2, "B")
	go func() {
		_, err := l.Reserve(ctx, v.task.ID, "", []ratelimit.Limit{window("api_key", uniqueKey("task"), "requests", 100, 1)})
		ofTask <- err
	}()
	awaitQueuedReserves(t, l, 3, "the task's Reserve")
	v.unblock("the batch of three")
	holding.Store(true)
	v.vanish() // the batch is rejected and run again: A, then B, then the task's

	<-answered // A's statement granted it; its answer is held
	leaveA()   // the batch's place goes
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("A's caller who left: %v, want context.Canceled", err)
	}
	for deadline := time.Now().Add(5 * time.Second); l.ReservesInFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A's statement, which every caller left, kept the batch's in-flight place")
		}
	}
	gate <- struct{}{}
	<-answered // B's statement, on no place, granted it
	leaveB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("B's caller who left: %v, want context.Canceled", err)
	}

	closed := make(chan []db.CounterListByScopeRow, 1)
	go func() {
		l.Close()
		rows, err := queries.CounterListByScope(context.Background(), admin, db.CounterListByScopeParams{ScopeType: "api_key", ScopeKey: keyB})
		if err != nil {
			t.Errorf("CounterListByScope: %v", err)
		}
		closed <- rows
	}()
	var afterClose []db.CounterListByScopeRow
	returned := false
	select {
	case afterClose = <-closed:
		returned = true
	case <-time.After(300 * time.Millisecond):
	}
	gate <- struct{}{} // B's answer
	<-answered
	gate <- struct{}{} // the task's
	if !returned {
		afterClose = <-closed
	}
	if len(afterClose) == 0 {
		t.Error("B's counter row is missing: B was never granted")
	}
	for _, c := range afterClose {
		if c.ReservedValue != 0 {
			t.Errorf("once Close returned, B's counter still had %v reserved for its caller who left", c.ReservedValue)
		}
	}
	if err := <-ofTask; !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Errorf("the admission of the deleted task: %v, want ErrUnknownTask", err)
	}
	if !returned {
		assertNothingHeld(t, admin, "api_key", keyA)
		assertNothingHeld(t, admin, "api_key", keyB)
	}
}
