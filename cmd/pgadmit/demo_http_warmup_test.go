package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The HTTP demo's gateway warms its pool before the load: every connection the pool may hold is
// open and has run the admission statement (pgadmit_reserve, which the gateway's requests
// call), so that the first requests pay neither the connecting nor the planning, which on a
// loaded machine took longer than the decision timeout (three 503s in the first second). A
// non-consuming Check would not do: it runs another statement, and the first Reserve after it
// took as long as on a cold connection. Nothing of the warm-up stays: no counter row, no lease.
func TestDemoHTTPWarmUpRunsTheAdmissionOnEveryConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 5
	// The exec mode whose prepared statements the session lists (the demo's, unless its URL
	// says otherwise).
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	const prefix = "warm-test/"

	n, err := warmUp(ctx, pool, limiter, prefix)
	if err != nil {
		t.Fatalf("warmUp: %v", err)
	}
	if n != 5 {
		t.Errorf("warmUp warmed %d connections, want 5 (the pool's MaxConns)", n)
	}
	if open := pool.Stat().TotalConns(); open != 5 {
		t.Errorf("after warmUp the pool holds %d connections, want 5", open)
	}

	// Each connection, taken all at once so that each is a different one, has run the statement.
	conns := make([]*pgxpool.Conn, 5)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns[i] = c
	}
	for i, c := range conns {
		run, err := dbtest.New().SessionPreparedCallsRun(ctx, c, "pgadmit_reserve")
		if err != nil {
			t.Fatal(err)
		}
		if run == 0 {
			t.Errorf("connection %d (backend %d) has not run pgadmit_reserve", i, c.Conn().PgConn().PID())
		}
	}

	// Nothing of it stays (the database is the test's own).
	rows, err := dbtest.New().TableRowCounts(ctx, conns[0])
	if err != nil {
		t.Fatal(err)
	}
	if rows.Counters != 0 || rows.Reservations != 0 || rows.Leases != 0 {
		t.Errorf("the warm-up left %d counters, %d reservations, %d leases; want none", rows.Counters, rows.Reservations, rows.Leases)
	}
}
