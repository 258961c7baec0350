package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A block request whose answer was lost (its connection dropped once the
// server had granted the block) leaves a block that its Limiter never
// learns of: nothing admits from it, reports it or returns it, Close
// included, and its units stay reserved until Recover returns it after its
// window (charging nothing: nothing was admitted from it). Beyond the two
// blocks a process holds (README, Stranding), so Stats.Lost counts it, as
// it counts a Reserve whose answer was lost.
func TestLocalBlockWhoseAnswerWasLostIsCountedLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := pgtest.NewPool(t)
	hour := hourWindow(t, admin)
	fr, p := freezer.NewPool(t, admin.Config(), nil)
	l := ratelimit.New(p)
	defer l.Close()
	key := uniqueKey("lostblock")

	// The counter row, for the test to lock.
	inDB := localWindow(hour, key, 1000, 1)
	inDB.Local = false
	direct := ratelimit.New(admin)
	defer direct.Close()
	g, err := direct.Reserve(ctx, "", "", []ratelimit.Limit{inDB})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}

	// The block request waits for the counter row; the server's answers
	// are held from then on, the block is granted, and the connection that
	// asked for it is dropped before its answer came.
	takes := fr.Watch("AS current_value") // AllotmentTake's text, which pgx sends on a new session
	unlock := lockCounter(t, admin, key)
	defer unlock()
	reserveCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	reserved := make(chan error, 1)
	go func() {
		_, err := l.Reserve(reserveCtx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
		reserved <- err
	}()
	select {
	case <-takes.Sent():
	case <-time.After(10 * time.Second):
		t.Fatal("no block was asked for in 10 s")
	}
	pgtest.AwaitLockWaiters(t, admin, "the block request")
	fr.Freeze()
	unlock()
	for deadline := time.Now().Add(10 * time.Second); len(openBlocks(t, admin, key)) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the block request was not granted in 10 s once the counter row was free")
		}
	}
	takes.Drop()
	for deadline := time.Now().Add(10 * time.Second); l.Stats().Local.Failed == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the block request whose connection dropped did not fail in 10 s")
		}
	}
	fr.Close() // the request, decided in the database, fails: no server to reach
	<-reserved
	l.Close()

	assertLost(t, l, 1, "a block request lost its answer")
	open := openBlocks(t, admin, key)
	if len(open) != 1 {
		t.Fatalf("%d open block(s) once the Limiter closed, want the one whose answer was lost", len(open))
	}
	// Recover returns it once its window is over, charging nothing.
	var clock testClock
	clock.pass(open[0].ExpiresAt.Add(ratelimit.DefaultLostAllotmentGrace + time.Second))
	_, m := clocked(admin, &clock)
	res, err := m.Recover(ctx)
	if err != nil || res.ReturnedAllotments != 1 {
		t.Fatalf("Recover past the block's window: %v, %v; want it returned", res, err)
	}
	if rows := counterRows(t, admin, "model", key); len(rows) != 1 || rows[0].UsedValue != 1 || rows[0].ReservedValue != 0 {
		t.Errorf("counter after Recover: %+v; want used 1 (the Reserve in the database), nothing reserved", rows)
	}
	assertBooksBalance(t, admin, "model", key)
}

// A block request that the pool could not give a session to (the pool
// closed) sent nothing: it is counted failed, not lost; nor is the Reserve
// that then went to the database, on the closed pool, lost.
func TestLocalBlockRequestNeverSentIsNotLost(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	hour := hourWindow(t, pgtest.OpenPool(t, url))
	p := pgtest.OpenPool(t, url)
	l := ratelimit.New(p)
	defer l.Close()
	p.Close()
	if _, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, uniqueKey("closedpool"), 1000, 1)}); err == nil {
		t.Fatal("Reserve on a closed pool succeeded")
	}
	if s := l.Stats(); s.Local.Failed == 0 || s.Lost != 0 {
		t.Errorf("Stats() = %+v after a block request on a closed pool, want it failed and nothing lost", s)
	}
}
