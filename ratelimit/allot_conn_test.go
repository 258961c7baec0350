package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter on one connection (*pgx.Conn), used by one goroutine at a
// time as a connection must be, keeps working when its limits are Local:
// blocks are taken ahead, reported and returned by statements sent off the
// caller's path, which used to run on the same connection alongside the
// caller's own statements ("conn busy", a data race inside pgx, and the
// connection unusable from then on). On one connection Local limits are
// decided in the database, as inside a caller's transaction.
func TestLocalOnOneConnectionIsDecidedInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	hour := hourWindow(t, conn)
	l := ratelimit.New(conn, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	defer l.Close()
	key := uniqueKey("oneconn")
	limits := []ratelimit.Limit{localWindow(hour, key, 1e6, 1), window("user", key, ratelimit.MetricRequests, 1e6, 1)}
	// Blocks of 16, then sized by the rate: many are taken ahead, each
	// while the next call's database part runs.
	for i := range 300 {
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatalf("call %d: Reserve: %v", i, err)
		}
		if g.Reservations[0].Local {
			t.Fatalf("call %d: admitted from a block on a single connection (%+v), want decided in the database", i, g.Reservations[0])
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatalf("call %d: Commit: %v", i, err)
		}
	}
	l.Close()
	if open := openBlocks(t, conn, key); len(open) > 0 {
		t.Errorf("%d blocks open after Close", len(open))
	}
}

// A second Close, while the first is still returning the blocks (here: the
// counter row is locked, so the return waits), waits for it: it used to
// return at once, and a caller that then closed the pool left the blocks
// to fail their return and stay reserved until their window ended.
func TestLocalSecondCloseWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	key := uniqueKey("closetwice")
	reserveLocal(t, l, hour, key, 1000, 1)
	unlock := lockCounter(t, pool, key)
	defer unlock()
	first, second := make(chan struct{}), make(chan struct{})
	go func() { defer close(first); l.Close() }()
	pgtest.AwaitLockWaiters(t, pool, "the first Close's return of the block")
	go func() { defer close(second); l.Close() }()
	parked := make(chan bool, 1)
	go func() { parked <- awaitParkedIn(t.Name(), "(*allotments).close", 5*time.Second) }()
	select {
	case <-second:
		if open := openBlocks(t, pool, key); len(open) > 0 {
			t.Errorf("the second Close returned while the first was still returning %d block(s)", len(open))
		}
	case <-parked:
	}
	unlock()
	<-first
	<-second
	if open := openBlocks(t, pool, key); len(open) > 0 {
		t.Errorf("%d block(s) open after both Close calls", len(open))
	}
}

// A Reserve whose ctx has already ended returns ctx's error and holds
// nothing, Local limits or not: a Local limit used to be admitted from the
// block in memory regardless, so the same call was refused with ctx's error
// when decided in the database and granted when Local.
func TestLocalReserveWithAnEndedContextHoldsNothing(t *testing.T) {
	t.Parallel()
	l, _, hour := localLimiter(t)
	key := uniqueKey("ended")
	reserveLocal(t, l, hour, key, 1000, 1) // a block with room is there
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if !errors.Is(err, context.Canceled) || len(g.Reservations) > 0 {
		t.Fatalf("Reserve with an ended ctx: %+v, %v; want context.Canceled and nothing held", g, err)
	}
}

// Close returns the blocks even when the server has just ended the pool's
// sessions (a restart, a failover, pg_terminate_backend). pgxpool hands
// out a connection used less than a second ago without pinging it, so the
// return Close sends may fail on the dead session; Close tried once, and
// left the blocks reserved until their window ended and Recover took them
// (an hour here, a month for a monthly limit).
func TestLocalCloseReturnsBlocksAfterTheServerEndedItsSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	app := "pgadmit-test-" + uniqueKey("closeended")
	if len(app) > 63 {
		app = app[:63]
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 1 // one session: the one the server ends
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	hour := hourWindow(t, admin)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	defer l.Close()
	key := uniqueKey("closeended")
	if _, err := l.Commit(ctx, reserveLocal(t, l, hour, key, 1000, 1), nil); err != nil {
		t.Fatal(err)
	}

	pid, err := testq.OpsBackendPid(ctx, pool) // the pool's session, used just now
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testq.OpsTerminateBackend(ctx, admin, pid); err != nil {
		t.Fatal(err)
	}
	if !awaitNoSessions(t, admin, app) {
		t.FailNow()
	}
	closing := time.Now()
	l.Close()
	t.Logf("Close took %s", time.Since(closing))
	if open := openBlocks(t, admin, key); len(open) > 0 {
		t.Errorf("%d block(s) still open after Close", len(open))
	}
}

// Close returns the blocks even when its return meets pgx's statement
// cache on a server session that does not hold the statement (pgx's
// default cache_statement exec mode behind a transaction-pooling proxy,
// which every other call reports as a *PoolerError; Close reports
// nothing). pgx drops the statement from its cache on the failure, so the
// same return sent again prepares it anew on the session it runs on; Close
// tried once, and left the blocks reserved until their window ended.
func TestLocalCloseReturnsBlocksAfterTheStatementCacheMissedBehindAPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, directURL := pgtest.NewPoolerURLIn(t, "transaction", 2)
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	cfg.MaxConns = 1 // one client connection: the one whose cache Close uses
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	direct := poolsOn(t, directURL, 1, pgx.QueryExecModeExec)[0]
	hour := hourWindow(t, direct)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	defer l.Close()
	key := uniqueKey("closecache")
	if _, err := l.Commit(ctx, reserveLocal(t, l, hour, key, 1000, 1), nil); err != nil {
		t.Fatal(err)
	}

	// The client connection prepares the return (returning nothing) on one
	// server session, in a transaction that names it.
	var prepared int32
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := db.New().AllotmentReturn(ctx, tx, db.AllotmentReturnParams{Ids: []pgtype.UUID{}, Used: []string{}, Reasons: []string{}}); err != nil {
			return err
		}
		prepared, err = testq.OpsBackendPid(ctx, tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Another client connection holds that session (PgBouncer hands out the
	// server connection released last), so Close's return runs on the other.
	holderCfg, err := pgx.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	holderCfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	holder, err := pgx.ConnectConfig(ctx, holderCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close(ctx) }()
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if held, err := testq.OpsBackendPid(ctx, tx); err != nil || held != prepared {
		t.Fatalf("the holder's session = %d, %v; want %d, where the return was prepared", held, err, prepared)
	}

	l.Close()
	if open := openBlocks(t, direct, key); len(open) > 0 {
		t.Errorf("%d block(s) still open after Close", len(open))
	}
}
