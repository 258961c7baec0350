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
// answered: every client of the pooler then lost its connection.
func TestReserveCancelledBehindPgBouncerLeavesThePoolerRunning(t *testing.T) {
	t.Parallel()
	pooled, directURL := pgtest.NewPoolerURLIn(t, "transaction", 4)
	direct, err := pgxpool.New(context.Background(), directURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
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
