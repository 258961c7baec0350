package ratelimit_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/connpeek"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The server ends every session of a ConfigurePool pool (a restart, a
// failover, pg_terminate_backend) less than a second after each was used,
// and concurrent Reserves follow at once: each is granted. pgxpool pings
// only a connection idle for over a second, so each dead connection failed
// the combined statement it was taken for, and every caller of it (about
// seven per connection after a restart); the server says so on the socket
// (57P01, then EOF) before the client writes, and ConfigurePool has the
// pool ping, and replace, a connection whose socket has something to read.
//
// The pool's own ShouldPing never asks for a ping, so ConfigurePool's
// composition leaves the peek alone to save the Reserves: pgxpool's idle
// rule plays no part, and how long the test takes from the connections'
// last use to the Reserves (under load in CI, past a second at times)
// decides nothing.
//
// Over TCP, TLS (the peek looks at the socket under it) and a Unix socket.
func TestConfiguredPoolReplacesSessionsTheServerEndedWithinASecond(t *testing.T) {
	dsn := pgtest.NewURL(t)
	for name, transport := range transports(t, dsn) {
		t.Run(name, func(t *testing.T) { replacesEndedSessions(t, dsn, transport(t), true) })
	}
}

// replacesEndedSessions runs the test above on a pool that connects to
// poolURL; admin statements go to adminURL. ended says whether the end of a
// session reaches the pool's socket (not through PgBouncer in transaction
// mode, whose client connections outlive the server's sessions).
func replacesEndedSessions(t *testing.T, adminURL, poolURL string, ended bool) {
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	cfg, err := pgxpool.ParseConfig(poolURL)
	if err != nil {
		t.Fatal(err)
	}
	const conns, callers = 4, 16
	app := uniqueKey("ended")
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = conns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	key := uniqueKey("ended")
	limit := hourLimits(t, admin, window("provider", key, "requests", 1000, 1))[0]

	// Use every connection at once, then end their sessions.
	held := make([]*pgxpool.Conn, conns)
	for i := range held {
		if held[i], err = pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pids := make([]int32, conns)
	sockets := make([]net.Conn, conns)
	for i, c := range held {
		if pids[i], err = testq.OpsBackendPid(ctx, c); err != nil {
			t.Fatal(err)
		}
		sockets[i] = c.Conn().PgConn().Conn()
	}
	for _, c := range held {
		c.Release()
	}
	for _, pid := range pids {
		if _, err := testq.OpsTerminateBackend(ctx, admin, pid); err != nil {
			t.Fatal(err)
		}
	}
	awaitNoSessions(t, admin, app)
	if ended {
		awaitEndedOnTheSocket(t, sockets)
	}

	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{limit})
			if err == nil && len(g.Reservations) != 1 {
				t.Errorf("Reserve granted %d reservations, want 1", len(g.Reservations))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Logf("Reserve: %v", err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d Reserves failed on a session the server had ended", failed, callers)
	}

	totals, err := testq.ReservationTotalsByScope(ctx, admin, dbtest.ReservationTotalsByScopeParams{ScopeType: "provider", ScopeKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != 1 || totals[0].OpenCount != callers || totals[0].OpenAmount != callers {
		t.Errorf("open reservations %+v, want one window with %d, amount %d", totals, callers, callers)
	}
	if rows := counterRows(t, admin, "provider", key); len(rows) != 1 || rows[0].ReservedValue != callers {
		t.Errorf("counters %+v, want one holding %d reserved", rows, callers)
	}
	assertBooksBalance(t, admin, "provider", key)
}

// awaitEndedOnTheSocket waits until the end of each session has reached
// its client socket (connpeek.Pending), as the Reserves need it to: a
// backend has sent its FATAL before it exits, but PgBouncer in session
// mode closes its client connection only once it has read the end of the
// server's, a moment later, which a loaded machine may stretch.
func awaitEndedOnTheSocket(t *testing.T, sockets []net.Conn) {
	t.Helper()
	for i, c := range sockets {
		for deadline := time.Now().Add(20 * time.Second); !connpeek.Pending(c); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("connection %d: its session's end did not reach its socket in 20s", i)
			}
		}
	}
}
