package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// slowDials returns a pool on pool's database whose new connections, once
// slow is set, take delay to open: pgx opens one to send a cancel request,
// so such a request lands on the server delay late.
func slowDials(t *testing.T, pool *pgxpool.Pool, delay time.Duration, configure func(*pgxpool.Config)) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	var slow atomic.Bool
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slow.Load() {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return dial(ctx, network, addr)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, &slow
}

// A statement its caller left, stuck behind a lock, is cancelled after the
// grace; when the lock is released after that but before pgx's cancel
// request reaches the server, the statement commits. On a pool set up with
// ConfigurePool, pgx reads that answer and what the statement granted is
// released, however late the request lands within a second (a busy pooler
// forwarding it). With pgx's default the connection is given up unread, and
// the grant stays held until its window ends and its lease expires: this
// test fails so without ConfigurePool. So it did with ConfigurePool when its
// wait for the answer was counted from the cancel's start (250 ms).
func TestReserveStatementThatCommitsBeforeItsCancelLands(t *testing.T) {
	t.Parallel()
	for _, tc := range callerModes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			// The cancel request lands late, yet before ConfigurePool's
			// connection gives up waiting for its acknowledgement (1 s).
			const grace, late = 50 * time.Millisecond, 600 * time.Millisecond
			slow, slowOn := slowDials(t, pool, late, ratelimit.ConfigurePool)
			l := ratelimit.New(slow, append(tc.opts, ratelimit.WithLeftStatementGrace(grace))...)
			key := uniqueKey("k")
			leaveThenUnblock(t, pool, l, key, slowOn, grace+400*time.Millisecond)
			time.Sleep(late + 300*time.Millisecond) // the cancel request lands
			slowOn.Store(false)
			l.Close()
			assertNothingHeld(t, pool, "key", key)
		})
	}
}

// A cancel request the server has not acknowledged within a second may
// still land, and would cancel whatever statement its connection runs by
// then: on a pool set up with ConfigurePool, such a connection is closed,
// never used again, even when its statement was answered meanwhile. Here
// the pool has one connection, the request lands 1.5 s late, and the next
// Reserve waits behind a lock until after it landed.
func TestReserveAfterACancelNeverAcknowledgedIsNotCancelledByIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const grace, late = 50 * time.Millisecond, 1500 * time.Millisecond
	slow, slowOn := slowDials(t, pool, late, func(cfg *pgxpool.Config) {
		ratelimit.ConfigurePool(cfg)
		cfg.MaxConns = 1
	})
	l := ratelimit.New(slow, ratelimit.WithLeftStatementGrace(grace))
	t.Cleanup(l.Close)

	first := uniqueKey("k")
	leaveThenUnblock(t, pool, l, first, slowOn, grace+400*time.Millisecond) // answered, the request not acknowledged
	slowOn.Store(false)

	second := uniqueKey("k")
	limits, blocker := holdCounter(t, pool, second)
	_, errs := reserveBehindLock(t, pool, l, limits)
	time.Sleep(late) // the first statement's cancel request lands meanwhile
	if err := blocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("the next Reserve: %v, want it admitted", err)
	}
	l.Close()
	assertNothingHeld(t, pool, "key", first)
}

// leaveThenUnblock has a Reserve of l on key wait for a lock, its caller
// leave with slow set (the statement's cancel request will land late), and
// the lock released after wait, while the statement is being cancelled; the
// caller must get context.Canceled.
func leaveThenUnblock(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, key string, slow *atomic.Bool, wait time.Duration) {
	t.Helper()
	limits, blocker := holdCounter(t, pool, key)
	leave, errs := reserveBehindLock(t, pool, l, limits)
	slow.Store(true)
	leave()
	time.Sleep(wait)
	if err := blocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve after its caller left: %v, want context.Canceled", err)
	}
}
