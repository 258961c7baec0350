package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve whose caller left while a frozen server kept its answer may
// have been granted, and nobody can give the grant back: the server
// committed it (the freezer passes statements on), and the statement,
// cancelled, got no answer, as its cancel request got none. Stats.Lost
// counts it, combining or not, for the scalar statement of one window limit
// and for the statement of several limits; the database holds what it says.
func TestStatsCountsAReserveWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		lease bool // a concurrent limit besides the window's: the statement of several limits
		opts  []ratelimit.Option
	}{
		{"one window limit, combined", false, nil},
		{"window and lease, combined", true, nil},
		{"window and lease, not combined", true, []ratelimit.Option{ratelimit.WithoutCombining()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			fr, p := freezer.NewPool(t, pool.Config(), ratelimit.ConfigurePool)
			l := ratelimit.New(p, c.opts...)
			key := uniqueKey("lost")
			limits := []ratelimit.Limit{window("key", key, "requests", 100, 1)}
			if c.lease {
				limits = append(limits, concurrent("key", key, 10))
			}
			limits = hourLimits(t, pool, limits...)
			if _, err := l.Reserve(context.Background(), "", "", limits); err != nil { // answered: not lost
				t.Fatal(err)
			}
			fr.Freeze()
			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
			select { // the statement is sent
			case <-fr.SentFrozen():
			case <-time.After(10 * time.Second):
				t.Fatal("Reserve sent nothing to the frozen server in 10 s")
			}
			leave()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			l.Close()
			assertLost(t, l, 1, "one Reserve lost its answer")
			// Both grants are held: the first one's caller holds it, the second's nobody.
			awaitReserved(t, pool, key, 2)
			if live := liveLeases(t, pool, "key", key); c.lease && live != 2 {
				t.Errorf("live leases = %d, want 2 (one held for nobody)", live)
			}
		})
	}
}

// What the server answered is not lost, nor what was never sent: a Reserve
// admitted, one refused, one whose caller left while it waited for a lock,
// which the server cancelled (57014) and rolled back, and one whose caller
// left while the pool had no connection to give it.
func TestStatsLostCountsNoAnsweredOrUnsentReserve(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	fr, p := freezer.NewPool(t, pool.Config(), ratelimit.ConfigurePool)
	l := ratelimit.New(p)
	defer l.Close()
	key := uniqueKey("answered")
	one := hourLimits(t, pool, window("key", key, "requests", 1, 1))
	if _, err := l.Reserve(context.Background(), "", "", one); err != nil {
		t.Fatal(err)
	}
	var exceeded *ratelimit.ExceededError
	if _, err := l.Reserve(context.Background(), "", "", one); !errors.As(err, &exceeded) {
		t.Fatalf("second Reserve of a limit of 1: %v, want *ExceededError", err)
	}
	limits, _ := holdCounter(t, pool, uniqueKey("held"))
	leaveWhile := func(what string, waiting func()) {
		t.Helper()
		ctx, leave := context.WithCancel(context.Background())
		errs := make(chan error, 1)
		go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
		waiting()
		leave()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Reserve whose caller left %s: %v, want context.Canceled", what, err)
		}
	}
	leaveWhile("waiting for a lock", func() { pgtest.AwaitLockWaiters(t, pool, "Reserve") })
	// Every connection of the pool taken, and new ones left unanswered: the
	// Reserve waits for one, and its Acquire ends with its statement's context.
	held := make([]*pgxpool.Conn, p.Config().MaxConns)
	for i := range held {
		c, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held[i] = c
	}
	fr.Hold()
	leaveWhile("waiting for a connection", func() { time.Sleep(200 * time.Millisecond) })
	for _, c := range held {
		c.Release()
	}
	fr.Thaw()
	l.Close()
	assertLost(t, l, 0, "Reserves the server answered or that were never sent")
}

// awaitReserved waits for the key's requests counters to hold want
// reserved: a statement the freezer passed on may still be committing.
func awaitReserved(t *testing.T, pool *pgxpool.Pool, key string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var reserved float64
		for _, c := range counterRows(t, pool, "key", key) {
			if c.Metric == "requests" {
				reserved += c.ReservedValue
			}
		}
		if reserved == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's requests counters hold %v reserved, want %v", key, reserved, want)
		}
	}
}
