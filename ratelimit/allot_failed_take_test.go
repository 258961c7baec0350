package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A block request that fails (here a constraint the database puts on new
// blocks; a role without the grants on gateway_rate_limit_allotments is the
// same) has the counter's Local requests decided in the database for a
// while, without a failing block request each: 200 requests sent 200. Stats
// reports the failure and its error, which nothing reported before, and
// once blocks can be taken again a request after the pause takes one.
func TestLocalFailedBlockRequestIsCountedAndPutsOffTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool, takes, hour := blockCountingLimiter(t)
	if err := testq.OpsAllotmentsRefuseBlocks(ctx, pool); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey("failedtake")

	start := time.Now()
	for i := range 200 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1e6, 1)})
		if err != nil {
			t.Fatalf("Reserve %d with blocks failing: %v, want it decided in the database", i, err)
		}
		if g.Reservations[0].Local {
			t.Fatalf("Reserve %d admitted from a block, though none can be taken", i)
		}
	}
	// One block request, then a pause of a second (a sixteenth of the
	// hour's window, at most a second): one more per second the 200 took,
	// on a machine slow enough that they outlast a pause.
	failed := takes.n.Load()
	if most := 1 + int64(time.Since(start)/time.Second); failed < 1 || failed > most {
		t.Errorf("200 requests while blocks fail asked for %d blocks in %s, want 1 and one more per second at most (a pause after each)", failed, time.Since(start))
	}
	s := l.Stats().Local
	var pgErr *pgconn.PgError
	if s.Failed != failed || s.Granted != 0 || !errors.As(s.LastError, &pgErr) || pgErr.Code != "23514" || s.InDatabase != 200 || s.FromBlocks != 0 {
		t.Errorf("Stats().Local = %+v, want %d failures whose error is the check violation (23514), no block, 200 limits decided in the database", s, failed)
	}
	if c := counterRows(t, pool, "model", key); len(c) != 1 || c[0].ReservedValue != 200 {
		t.Errorf("counters %+v, want one holding the 200 admissions the database decided", c)
	}

	// After the pause (a second, for an hour's window) the next request
	// asks for a block again, and takes one once the database grants it.
	if err := testq.OpsAllotmentsAllowBlocks(ctx, pool); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	reserveLocal(t, l, hour, key, 1e6, 1)
	if s := l.Stats().Local; s.Granted != 1 || s.Failed != failed || takes.n.Load() != failed+1 || s.FromBlocks != 1 || s.InDatabase != 200 {
		t.Errorf("after the pause: Stats().Local = %+v, %d block requests; want 1 granted, the %d failures, %d requests, 1 limit admitted from it", s, takes.n.Load(), failed, failed+1)
	}
}
