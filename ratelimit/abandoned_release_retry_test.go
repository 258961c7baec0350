package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A caller leaves while its Reserve waits for a counter row; the statement
// is answered (granted), and every session under the pool is terminated (a
// restart, a failover) as the abandoned grant's release takes its
// connection: each connection the pool holds fails its first statement. The release is idempotent
// and nobody else knows the grant: it is tried again until a fresh
// connection answers, and nothing stays held until the window ends.
func TestAbandonedGrantIsReleasedAfterTheSessionIsTerminated(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	admin := pgtest.OpenPool(t, url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	const conns = 6
	cfg.MaxConns = conns
	restart := restartOnNextAcquire(t, admin, cfg) // armed once the Reserve waits: the next connection taken is the release's
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	held := make([]*pgxpool.Conn, conns) // open every connection the pool may have
	for i := range held {
		if held[i], err = pool.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		c.Release()
	}
	l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(time.Minute))
	limit := hourLimits(t, admin, window("provider", uniqueKey("abandoned"), "requests", 10, 1))[0]

	// Hold the counter row, as a caller's transaction would.
	tx, err := admin.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	hold := limit
	hold.Amount = 0.5
	if _, err := ratelimit.New(admin).WithTx(tx).Reserve(context.Background(), "", "", []ratelimit.Limit{hold}); err != nil {
		t.Fatalf("the lock holder's Reserve: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{limit})
		done <- err
	}()
	pgtest.AwaitLockWaiters(t, admin, "Reserve")
	restart.Store(true)
	cancel()
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve of a caller who left = %v, want context.Canceled", err)
	}
	l.Close() // waits for the abandoned grant's release
	if restart.Load() {
		t.Fatal("the sessions were not terminated before the grant was released")
	}

	for _, row := range counterRows(t, admin, "provider", limit.Scope.Key) {
		if row.ReservedValue != 0 || row.UsedValue != 0 {
			t.Errorf("counter used=%v reserved=%v: the abandoned grant is still held", row.UsedValue, row.ReservedValue)
		}
	}
	assertBooksBalance(t, admin, "provider", limit.Scope.Key)
}
