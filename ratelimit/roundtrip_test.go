package ratelimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// roundTrips counts what pgx sends to the server and waits on: one per
// query, one per batch (a pipeline of any length), one per explicit prepare.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// wireTurns counts real network round trips under pgx: each time the
// client writes after it has read (or for the first time) starts one. It
// sees what the tracer cannot, such as the pipelined Parse/Describe pgx
// sends the first time a connection meets a statement.
type wireTurns struct {
	n       atomic.Int64
	reading atomic.Bool
}

type countingConn struct {
	net.Conn
	turns *wireTurns
}

func (c countingConn) Write(p []byte) (int, error) {
	if c.turns.reading.Swap(false) {
		c.turns.n.Add(1)
	}
	return c.Conn.Write(p)
}

func (c countingConn) Read(p []byte) (int, error) {
	c.turns.reading.Store(true)
	return c.Conn.Read(p)
}

// cost is what one operation costs, counted both ways.
type cost struct{ traced, wire int64 }

func (c cost) String() string { return fmt.Sprintf("%d traced / %d on the wire", c.traced, c.wire) }

// meter counts both.
type meter struct {
	trips *roundTrips
	turns *wireTurns
}

// count returns how many round trips fn costs.
func (m meter) count(fn func()) cost {
	traced, wire := m.trips.n.Load(), m.turns.n.Load()
	m.turns.reading.Store(true) // the next write starts a round trip
	fn()
	return cost{m.trips.n.Load() - traced, m.turns.n.Load() - wire}
}

// tracedLimiter returns a Limiter on a one-connection pool whose round trips
// are counted.
func tracedLimiter(t *testing.T) (*ratelimit.Limiter, meter) {
	t.Helper()
	pool, m := tracedPool(t)
	return ratelimit.New(pool), m
}

// tracedPool returns a one-connection pool whose round trips are counted,
// its connection open.
func tracedPool(t *testing.T) (*pgxpool.Pool, meter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	m := meter{trips: &roundTrips{}, turns: &wireTurns{}}
	cfg.ConnConfig.Tracer = m.trips
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, turns: m.turns}, nil
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil { // connect now, outside any count
		t.Fatal(err)
	}
	return pool, m
}

// mixedLimits returns n limits, alternating window and concurrent ones over
// distinct scopes.
func mixedLimits(n int, key string) []ratelimit.Limit {
	limits := make([]ratelimit.Limit, n)
	for i := range n {
		if i%3 == 2 {
			limits[i] = concurrent("model", fmt.Sprintf("%s-m%d", key, i), 1e6)
		} else {
			limits[i] = window("api_key", fmt.Sprintf("%s-k%d", key, i), "tokens", 1e9, 500)
		}
	}
	return limits
}

// Reserve of 1 to 16 limits, Commit and Release of any number of
// reservations each cost one round trip once the connection has prepared
// their statements, and two the first time (pgx's pipelined prepare).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	l, m := tracedLimiter(t)
	ctx := context.Background()
	var err error
	for _, n := range []int{16, 1, 2, 3, 8, 16} { // the first pass meets every statement cold
		for _, settle := range []string{"commit", "release"} {
			limits := mixedLimits(n, uniqueKey("rt"))
			var grant ratelimit.Grant
			reserve := m.count(func() { grant, err = l.Reserve(ctx, "", "", limits) })
			if err != nil {
				t.Fatalf("Reserve(%d): %v", n, err)
			}
			var settled cost
			if settle == "commit" {
				settled = m.count(func() { _, err = l.Commit(ctx, grant, map[string]float64{"tokens": 420}) })
			} else {
				settled = m.count(func() { _, err = l.Release(ctx, grant, "test") })
			}
			if err != nil {
				t.Fatalf("%s(%d): %v", settle, n, err)
			}
			check := m.count(func() { err = l.Check(ctx, limits) })
			if err != nil {
				t.Fatalf("Check(%d): %v", n, err)
			}
			t.Logf("%2d limits: Reserve %s; %s %s; Check %s", n, reserve, settle, settled, check)
			for _, c := range []cost{reserve, settled, check} {
				if c.traced > 2 || c.wire > 2 {
					t.Errorf("%d limits: Reserve %s, %s %s, Check %s; want at most 2 round trips each", n, reserve, settle, settled, check)
				}
			}
		}
	}

	for pass := range 2 {
		grant, err := l.Reserve(ctx, "", "", mixedLimits(6, uniqueKey("leases")))
		if err != nil {
			t.Fatal(err)
		}
		renew := m.count(func() { _, err = l.RenewLeases(ctx, grant.Leases) })
		if err != nil {
			t.Fatal(err)
		}
		release := m.count(func() { _, err = l.ReleaseLeases(ctx, grant.Leases, "done") })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pass %d: RenewLeases %s; ReleaseLeases %s", pass, renew, release)
		if renew.wire > 2 || release.wire > 2 || (pass == 1 && (renew.wire != 1 || release.wire != 1)) {
			t.Errorf("pass %d: RenewLeases %s, ReleaseLeases %s; want at most 2 cold and 1 warm", pass, renew, release)
		}
	}
}
