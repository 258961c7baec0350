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

// Behind PgBouncer in transaction mode, a Reserve on a pool set up with
// ConfigurePool, stuck behind a lock that is released about when its
// statement is cancelled, leaves the pooler running and nothing held.
// PgBouncer (1.18, the one the tests run; its issue #801) exits with
// "FATAL ... disconnect_client(): bad client state: 0" when a client closes
// its cancel request's connection before PgBouncer has forwarded it, which
// pgx's CancelRequestContextWatcherHandler does as soon as the statement is
// answered: every client of the pooler then lost its connection. A busy
// PgBouncer takes a while to forward the request (it opens a server
// connection for it: 312 ms in a CI run where this test failed), and it must
// be left to finish however long that takes.
func TestReserveCancelledBehindPgBouncerLeavesThePoolerRunning(t *testing.T) {
	t.Parallel()
	t.Run("prompt pooler", func(t *testing.T) {
		t.Parallel()
		pooled, direct := pgtest.NewPoolerURLIn(t, "transaction", 4)
		cancelThroughPooler(t, pooled, direct)
	})
	// Forwarding a cancel takes a server connection's opening: acknowledged
	// late, then beyond the Limiter's wait for it (the connection is closed
	// while the request is still being forwarded).
	for _, delay := range []time.Duration{400 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run("pooler forwarding the cancel in "+delay.String(), func(t *testing.T) {
			t.Parallel()
			pooled, direct := pgtest.NewSlowPoolerURL(t, "transaction", 4, delay)
			cancelThroughPooler(t, pooled, direct)
		})
	}
}

// cancelThroughPooler has ten Reserves through the pooler at pooled cancelled
// as the lock they wait for is released, and checks after each that the
// pooler still runs, and at the end that nothing is held.
func cancelThroughPooler(t *testing.T, pooled, directURL string) {
	direct := pgtest.OpenPool(t, directURL)
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const grace = 50 * time.Millisecond
	l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(grace))
	var keys []string
	for i := range 10 {
		key := uniqueKey("k")
		keys = append(keys, key)
		limits, blocker := holdCounter(t, direct, key)
		leave, errs := reserveBehindLock(t, direct, l, limits)
		leave()
		// The lock is released about when the statement is cancelled.
		time.Sleep(grace + time.Duration(i%5)*2*time.Millisecond)
		if err := blocker.Rollback(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: Reserve after its caller left: %v, want context.Canceled", i, err)
		}
		if err := pool.Ping(context.Background()); err != nil {
			t.Fatalf("round %d: the pooler is gone after a statement was cancelled through it: %v", i, err)
		}
	}
	l.Close()
	for _, key := range keys {
		assertNothingHeld(t, direct, "key", key)
	}
}
