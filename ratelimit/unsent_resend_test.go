package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// closeOnNextAcquire makes cfg's pool, once the returned flag is set, hand
// out its next connection with its socket closed under it: the statement it
// was taken for fails as pgx writes it, before any of it reaches the server
// (pgconn.SafeToRetry). It is done as the connection is taken
// (PrepareConn), after ConfigurePool's peek, as when a session is lost
// between the peek and the statement.
func closeOnNextAcquire(cfg *pgxpool.Config) *atomic.Bool {
	var armed atomic.Bool
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		if armed.CompareAndSwap(true, false) {
			_ = c.PgConn().Conn().Close()
		}
		return true, nil
	}
	return &armed
}

// unsentPool returns a ConfigurePool pool on a fresh database whose next
// connection taken once the flag is set fails its statement unsent.
func unsentPool(t *testing.T) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg)
	kill := closeOnNextAcquire(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, kill
}

// assertKilled checks that the statement did take the dead connection.
func assertKilled(t *testing.T, kill *atomic.Bool) {
	t.Helper()
	if kill.Load() {
		t.Fatal("no connection was taken while the kill was armed: the test proves nothing")
	}
}

// A Reserve, Commit or Release whose statement is handed a connection
// whose socket is already closed fails before anything reaches the server.
// It used to fail its callers (every caller of a combined statement);
// it is now sent once more, at once, on another connection, combined or
// not, and each call succeeds once.
func TestStatementsFailedUnsentAreSentAgainOnAnotherConnection(t *testing.T) {
	pool, kill := unsentPool(t)
	ctx := context.Background()
	for name, opts := range map[string][]ratelimit.Option{
		"combined": nil,
		"alone":    {ratelimit.WithoutCombining()},
	} {
		t.Run(name, func(t *testing.T) {
			l := ratelimit.New(pool, opts...)
			t.Cleanup(l.Close)
			key := uniqueKey("unsent")
			one := hourLimits(t, pool, window("provider", key, "requests", 100, 1))
			two := hourLimits(t, pool, window("provider", key, "tokens", 1000, 10), concurrent("provider", key, 10))

			kill.Store(true)
			g1, err := l.Reserve(ctx, "", "", one)
			assertKilled(t, kill)
			if err != nil || len(g1.Reservations) != 1 {
				t.Fatalf("Reserve of one window = %+v, %v; want a reservation", g1, err)
			}
			kill.Store(true)
			g2, err := l.Reserve(ctx, "", "", two)
			assertKilled(t, kill)
			if err != nil || len(g2.Reservations) != 1 || len(g2.Leases) != 1 {
				t.Fatalf("Reserve of a window and a lease = %+v, %v; want one of each", g2, err)
			}
			kill.Store(true)
			s1, err := l.Commit(ctx, g1, nil)
			assertKilled(t, kill)
			if err != nil || !s1.Reservations[0].Settled {
				t.Fatalf("Commit = %+v, %v; want it settled", s1, err)
			}
			kill.Store(true)
			s2, err := l.Release(ctx, g2, "done")
			assertKilled(t, kill)
			if err != nil || !s2.Reservations[0].Settled || s2.LeasesReleased != 1 {
				t.Fatalf("Release = %+v, %v; want the reservation and the lease released", s2, err)
			}
			assertOpen(t, pool, key, 0)
			if n := liveLeases(t, pool, "provider", key); n != 0 {
				t.Errorf("%d live leases, want 0", n)
			}
			assertBooksBalance(t, pool, "provider", key)
		})
	}
}

// A hot batch (two requests on one counter) of Reserve, then of Commit,
// handed a dead connection is sent again, hot, and each request in it is
// decided once.
func TestHotBatchesFailedUnsentAreSentAgainOnAnotherConnection(t *testing.T) {
	pool, kill := unsentPool(t)
	ctx := context.Background()
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	key := uniqueKey("unsent-hot")
	limits := hourLimits(t, pool, window("provider", key, "requests", 100, 1))
	reqs := []ratelimit.BatchRequest{{Limits: limits}, {Limits: limits}}

	kill.Store(true)
	grants, errs, err := l.ReserveCombined(ctx, reqs)
	assertKilled(t, kill)
	if err != nil {
		t.Fatalf("hot Reserve batch: %v", err)
	}
	for i, e := range errs {
		if e != nil || len(grants[i].Reservations) != 1 {
			t.Fatalf("request %d = %+v, %v; want a reservation", i, grants[i], e)
		}
	}
	if hot := l.Stats().Reserve.Hot; hot != 1 {
		t.Errorf("Reserve statements sent hot = %d, want 1", hot)
	}
	assertOpen(t, pool, key, 2)

	kill.Store(true)
	outs, err := l.CommitCombined(ctx, grants)
	assertKilled(t, kill)
	if err != nil {
		t.Fatalf("hot Commit batch: %v", err)
	}
	for i, s := range outs {
		if !s.Reservations[0].Settled {
			t.Errorf("grant %d not settled: %+v", i, s)
		}
	}
	if hot := l.Stats().Settle.Hot; hot != 1 {
		t.Errorf("Commit statements sent hot = %d, want 1", hot)
	}
	assertOpen(t, pool, key, 0)
	assertBooksBalance(t, pool, "provider", key)
}

// Concurrent Reserves whose first combined statement is handed a dead
// connection are all granted, once each.
func TestCombinedReservesFailedUnsentAreAllGranted(t *testing.T) {
	pool, kill := unsentPool(t)
	ctx := context.Background()
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	key := uniqueKey("unsent-many")
	limits := hourLimits(t, pool, window("provider", key, "requests", 1000, 1))
	const callers = 16

	kill.Store(true)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			_, err := l.Reserve(ctx, "", "", limits)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	assertKilled(t, kill)
	for err := range errs {
		if err != nil {
			t.Errorf("Reserve: %v", err)
		}
	}
	assertOpen(t, pool, key, callers)
	assertBooksBalance(t, pool, "provider", key)
}

// Inside a caller's transaction, and on a single connection, a statement
// that failed unsent is not sent again: the transaction or the connection
// is gone with the socket, and the caller gets the failure itself (the
// closed socket), not a second one ("conn closed").
func TestStatementsFailedUnsentOnOneConnectionAreNotSentAgain(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := uniqueKey("unsent-one")
	limits := hourLimits(t, pool, window("provider", key, "requests", 100, 1))

	assertFailedOnce := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("Reserve on a closed socket succeeded")
		}
		if !pgconn.SafeToRetry(err) || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Reserve = %v; want the unsent write's failure on the closed socket", err)
		}
		if errors.Is(err, pgconn.ErrConnClosed) {
			t.Fatalf("Reserve = %v: sent again on the closed connection", err)
		}
	}
	t.Run("tx", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_ = tx.Conn().PgConn().Conn().Close()
		_, err = ratelimit.New(pool).WithTx(tx).Reserve(ctx, "", "", limits)
		assertFailedOnce(t, err)
	})
	t.Run("conn", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		_ = conn.PgConn().Conn().Close()
		_, err = ratelimit.New(conn).Reserve(ctx, "", "", limits)
		assertFailedOnce(t, err)
	})
	assertOpen(t, pool, key, 0)
}

// assertOpen checks how many reservations on key's requests-or-tokens
// counters are open.
func assertOpen(t *testing.T, pool *pgxpool.Pool, key string, want int64) {
	t.Helper()
	totals, err := testq.ReservationTotalsByScope(context.Background(), pool, dbtest.ReservationTotalsByScopeParams{ScopeType: "provider", ScopeKey: key})
	if err != nil {
		t.Fatal(err)
	}
	var open int64
	for _, tot := range totals {
		open += tot.OpenCount
	}
	if open != want {
		t.Errorf("open reservations %+v, want %d in all", totals, want)
	}
}

// In QueryExecModeExec pgx writes a hot batch (pgconn.ExecBatch) without
// marking a failed write as unsent (pgconn.SafeToRetry), so a hot batch
// handed a dead connection is not sent again and fails, with nothing
// written, as the README says. Should pgx mark it, this fails: the README
// is then wrong, and the batch is sent again.
func TestHotBatchesInExecModeFailedUnsentAreNotSentAgain(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	ratelimit.ConfigurePool(cfg)
	kill := closeOnNextAcquire(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	key := uniqueKey("unsent-exec-hot")
	limits := hourLimits(t, pool, window("provider", key, "requests", 100, 1))

	kill.Store(true)
	_, _, err = l.ReserveCombined(context.Background(), []ratelimit.BatchRequest{{Limits: limits}, {Limits: limits}})
	assertKilled(t, kill)
	if err == nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("hot Reserve batch in exec mode = %v; want the failed write on the closed socket", err)
	}
	if pgconn.SafeToRetry(err) {
		t.Fatalf("hot Reserve batch in exec mode = %v, marked safe to retry but not sent again", err)
	}
	assertOpen(t, pool, key, 0)
}
