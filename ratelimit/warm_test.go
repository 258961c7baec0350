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

// warmPool opens a pool of maxConns connections at most on the database
// of url, none open yet, in the exec mode whose prepared statements a
// session lists (pgx's default).
func warmPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A gateway's kinds of limits: requests and tokens of a key (tokens
// Local), and a model's concurrency.
func gatewayKinds() []ratelimit.Limit {
	key := ratelimit.Scope{Type: "api_key", Key: "key-1"}
	model := ratelimit.Scope{Type: "model", Key: "model-1"}
	return []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 100, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 100000, Amount: 500, Local: true},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 10, Amount: 1},
	}
}

// After Warm every connection the pool may hold is open and has run the
// statements a request of those kinds runs: the admission (pgadmit_reserve)
// and its Commit (pgadmit_settle). Nothing of it stays, and no block of
// the Local limit was taken.
func TestWarmRunsTheAdmissionAndCommitOnEveryConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := warmPool(t, pgtest.NewURL(t), 4)
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	n, err := limiter.Warm(ctx, gatewayKinds())
	if err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if n != 4 {
		t.Errorf("Warm warmed %d connections, want 4 (the pool's MaxConns)", n)
	}
	if open := pool.Stat().TotalConns(); open != 4 {
		t.Errorf("after Warm the pool holds %d connections, want 4", open)
	}
	if acquired := pool.Stat().AcquiredConns(); acquired != 0 {
		t.Errorf("after Warm %d connections are still acquired, want 0", acquired)
	}

	conns := make([]*pgxpool.Conn, 4) // held at once: each a different one
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns[i] = c
	}
	for i, c := range conns {
		for _, fn := range []string{"pgadmit_reserve", "pgadmit_settle"} {
			run, err := testq.SessionPreparedCallsRun(ctx, c, fn)
			if err != nil {
				t.Fatal(err)
			}
			if run == 0 {
				t.Errorf("connection %d (backend %d) has not run %s", i, c.Conn().PgConn().PID(), fn)
			}
		}
	}
	rows := rowCounts(t, conns[0])
	if rows.Counters != 0 || rows.Reservations != 0 || rows.Leases != 0 || rows.Admissions != 0 {
		t.Errorf("Warm left %d counters, %d reservations, %d leases, %d admissions; want none",
			rows.Counters, rows.Reservations, rows.Leases, rows.Admissions)
	}
	if local := limiter.Stats().Local; local.Granted != 0 || local.FromBlocks != 0 {
		t.Errorf("Warm took blocks of the Local limit: %+v", local)
	}
}

// A single window limit runs a statement of its own (pgadmit_reserve_one),
// and Warm on a single connection warms that one.
func TestWarmOnOneConnectionRunsItsShape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := warmPool(t, pgtest.NewURL(t), 2)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	limiter := ratelimit.New(c)
	defer limiter.Close()

	n, err := limiter.Warm(ctx, []ratelimit.Limit{window("api_key", "k", ratelimit.MetricRequests, 10, 1)})
	if err != nil || n != 1 {
		t.Fatalf("Warm = %d, %v; want 1, nil", n, err)
	}
	for _, fn := range []string{"pgadmit_reserve_one", "pgadmit_settle_one"} {
		if run, err := testq.SessionPreparedCallsRun(ctx, c, fn); err != nil || run == 0 {
			t.Errorf("the connection ran %s %d times (%v), want at least once", fn, run, err)
		}
	}
	if rows := rowCounts(t, c); rows.Counters != 0 || rows.Reservations != 0 {
		t.Errorf("Warm left %d counters, %d reservations; want none", rows.Counters, rows.Reservations)
	}
}

// Bad input is a *ValidationError and nothing is sent: no connection is
// even opened.
func TestWarmRefusesBadInputSendingNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool := warmPool(t, url, 3)
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	tx := heldTx(t, warmPool(t, url, 1))

	zero := window("api_key", "k", ratelimit.MetricRequests, 10, 0)
	for name, warm := range map[string]func() (int, error){
		"negative Amount": func() (int, error) {
			return limiter.Warm(ctx, []ratelimit.Limit{window("api_key", "k", ratelimit.MetricRequests, 10, -1)})
		},
		"no limits":      func() (int, error) { return limiter.Warm(ctx, nil) },
		"every Amount 0": func() (int, error) { return limiter.Warm(ctx, []ratelimit.Limit{zero}) },
		"in a transaction": func() (int, error) {
			return limiter.WithTx(tx).Warm(ctx, gatewayKinds())
		},
		"nil ctx": func() (int, error) {
			//lint:ignore SA1012 the nil context is the point: Warm must refuse it as bad input
			return limiter.Warm(nil, gatewayKinds())
		},
	} {
		n, err := warm()
		var verr *ratelimit.ValidationError
		if !errors.As(err, &verr) || n != 0 {
			t.Errorf("%s: Warm = %d, %v; want 0 and a *ValidationError", name, n, err)
		}
	}
	if open := pool.Stat().TotalConns(); open != 0 {
		t.Errorf("refused calls opened %d connections, want 0", open)
	}
}

// A ctx that ends while Warm waits (for a table another session locked)
// returns ctx's error, and nothing is held: no connection stays acquired,
// no row is left once the lock is gone.
func TestWarmCancelledHoldsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := warmPool(t, url, 3)
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := limiter.Warm(cancelled, gatewayKinds()); !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("Warm with a ctx already over = %d, %v; want 0, context.Canceled", n, err)
	}
	if open := pool.Stat().TotalConns(); open != 0 {
		t.Errorf("Warm with a ctx already over opened %d connections, want 0", open)
	}

	other := warmPool(t, url, 2) // another session's, on the same database
	locker := heldTx(t, other)
	if err := testq.OpsLockCounters(context.Background(), locker); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := limiter.Warm(ctx, gatewayKinds())
		done <- result{n, err}
	}()
	pgtest.AwaitLockWaiterCount(t, other, 3, "the warm-ups waiting for the counters")
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Warm did not return 10 s after its ctx ended")
	}
	if !errors.Is(r.err, context.Canceled) || r.n != 0 {
		t.Errorf("Warm cancelled = %d, %v; want 0, context.Canceled", r.n, r.err)
	}
	// A connection whose statement was cut is closed (its rollback fails on
	// the ended ctx), and pgxpool destroys it in the background.
	for deadline := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after a cancelled Warm %d connections are still acquired, want 0", pool.Stat().AcquiredConns())
		}
	}
	if err := locker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows := rowCounts(t, other); rows.Counters != 0 || rows.Reservations != 0 || rows.Leases != 0 {
		t.Errorf("a cancelled Warm left %d counters, %d reservations, %d leases; want none", rows.Counters, rows.Reservations, rows.Leases)
	}
}
