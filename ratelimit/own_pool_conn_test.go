package ratelimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// An Executor of one's own that embeds a pool's *pgxpool.Conn is one
// connection, as the *pgxpool.Conn is: the Limiter runs one statement at
// a time on it. The embedded field, named Conn, hides the Conn method New
// told a single connection by (and an embedded Executor shows only its
// own methods), so such a wrapper was taken for a pool: the blocks of a
// Local limit were taken, reported and returned beside the caller's
// statements on the one connection ("conn busy"), and calls failed.
func TestAPoolConnOfOnesOwnRunsOneStatementAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	for _, mode := range []string{"", "&default_query_exec_mode=simple_protocol"} {
		pool := pgtest.OpenPool(t, url+mode)
		wrappers := map[string]func(*pgxpool.Conn) ratelimit.Executor{
			"*pgxpool.Conn":                  func(c *pgxpool.Conn) ratelimit.Executor { return c },
			"own, embedding a *pgxpool.Conn": func(c *pgxpool.Conn) ratelimit.Executor { return struct{ *pgxpool.Conn }{c} },
			"&own, embedding a *pgxpool.Conn": func(c *pgxpool.Conn) ratelimit.Executor {
				return &struct{ *pgxpool.Conn }{c}
			},
			"own, nested": func(c *pgxpool.Conn) ratelimit.Executor {
				return struct{ ownPoolConn }{ownPoolConn{c}}
			},
			"own, embedding an Executor": func(c *pgxpool.Conn) ratelimit.Executor {
				return struct{ ratelimit.Executor }{c}
			},
			"own, embedding a *pgx.Conn": func(c *pgxpool.Conn) ratelimit.Executor { return ownConn{c.Conn()} },
		}
		for name, wrap := range wrappers {
			t.Run(name+mode, func(t *testing.T) {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
				callsOnOneConn(t, ctx, pool, wrap(conn))
			})
		}
	}
}

// ownPoolConn is an Executor of one's own that wraps a pool's connection.
type ownPoolConn struct{ *pgxpool.Conn }

// callsOnOneConn reserves and commits, a Local limit among the limits, on
// a Limiter made from conn, a single connection (one caller: like the
// connection, the Limiter serves one call at a time), and checks that
// every call succeeded and the counters charged exactly what they
// committed. A wrapper taken for a pool fails from the first calls on (the
// Local limit's block is taken beside them): 20 calls caught it in 63 of 64
// subtests without -race, 200 calls in 22 of 24; more calls add commits.
func callsOnOneConn(t *testing.T, ctx context.Context, pool *pgxpool.Pool, conn ratelimit.Executor) {
	const calls, tokens = 20, 10
	l := ratelimit.New(conn)
	key := uniqueKey("ownpoolconn")
	local := window("model", key, ratelimit.MetricTokens, 1e9, tokens)
	local.Local = true
	limits := []ratelimit.Limit{window("api_key", key, "requests", 1e6, 1), concurrent("model", key, 1e6), local}
	var errs []error
	for range calls {
		grant, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			errs = append(errs, fmt.Errorf("Reserve: %w", err))
			continue
		}
		if _, err := l.Commit(ctx, grant, nil); err != nil {
			errs = append(errs, fmt.Errorf("Commit: %w", err))
		}
	}
	l.Close()
	for i, err := range errs {
		if i == 3 {
			t.Errorf("... %d calls failed in all", len(errs))
			break
		}
		t.Error(err)
	}
	used := map[string]float64{}
	for _, scope := range []string{"api_key", "model"} {
		for _, row := range counterRows(t, pool, scope, key) {
			used[row.Metric] += row.UsedValue
			if row.ReservedValue != 0 {
				t.Errorf("%s %s: reserved %v left behind", scope, row.Metric, row.ReservedValue)
			}
		}
		assertBooksBalance(t, pool, scope, key)
	}
	if used["requests"] != calls || used[ratelimit.MetricTokens] != calls*tokens {
		t.Errorf("used %v, want %v requests and %v tokens", used, calls, calls*tokens)
	}
	if live := liveLeases(t, pool, "model", key); live != 0 {
		t.Errorf("%d live leases left", live)
	}
}
