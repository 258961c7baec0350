package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind PgBouncer in statement mode, Recover's reclaim of an expired task
// is refused (FATAL 08P01, transaction blocks not allowed), as README
// says, and the other steps of the pass still run: that refusal is about
// the step's transaction, not a server in trouble. An expired concurrency
// lease is still released.
func TestRecoverBehindStatementPoolingRunsItsOtherSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, directURL := pgtest.NewPoolerURLIn(t, "statement", pgtest.PoolerSize)
	pool := poolsOn(t, pooled, 1, pgx.QueryExecModeExec)[0]
	direct := poolsOn(t, directURL, 1, pgx.QueryExecModeExec)[0]
	var clock testClock
	_, m := clocked(pool, &clock)
	ld, _ := clocked(direct, &clock)

	expired := startSync(t, ld, time.Second)
	lease := concurrent("model", uniqueKey("k"), 10)
	lease.LeaseTTL = time.Second
	g, err := ld.Reserve(ctx, "", "", []ratelimit.Limit{lease})
	if err != nil {
		t.Fatal(err)
	}
	clock.pass(expired.LeaseExpiresAt)
	clock.pass(g.Leases[0].ExpiresAt)

	res, err := m.Recover(ctx)
	if !errors.Is(err, ratelimit.ErrStatementPooling) {
		t.Fatalf("Recover = %v, want an error matching ErrStatementPooling", err)
	}
	if res.ReleasedConcurrencyLeases != 1 {
		t.Errorf("released leases = %d, want 1: the steps after the refused reclaim did not run (%v)", res.ReleasedConcurrencyLeases, err)
	}
}
