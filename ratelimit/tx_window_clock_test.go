package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve in a caller's transaction counts in the window the transaction
// began in (the database's now()), not the one running when it is sent
// (WithTx says so): here a 1 s window that ended before the Reserve.
func TestReserveInATransactionCountsInTheWindowItBeganIn(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	l := ratelimit.New(pool)
	lim := window("api_key", uniqueKey("txclock"), ratelimit.MetricRequests, 10, 1)
	lim.Window = time.Second
	pgtest.AwaitRoomInWindow(t, pool, time.Second, 500*time.Millisecond)
	tx := heldTx(t, pool)
	began := pgtest.DBNow(t, tx)
	waitPast(t, pool, began.Truncate(time.Second).Add(1100*time.Millisecond))
	g, err := l.WithTx(tx).Reserve(ctx, "", "", []ratelimit.Limit{lim})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.Reservations[0]; !r.WindowStart.Equal(began.Truncate(time.Second)) {
		t.Fatalf("Reserve in a transaction that began at %s, sent after its window ended: counted in the window of %s; want the window it began in",
			began.Format(time.RFC3339Nano), r.WindowStart.Format(time.RFC3339Nano))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
