package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A caller leaves while its Reserve waits for a counter row; the statement
// is answered (granted), and every session under the pool is terminated (a
// restart, a failover) before the grant is released as abandoned: each
// idle connection fails its first statement. The release is idempotent
// and nobody else knows the grant: it is tried again until a fresh
// connection answers, and nothing stays held until the window ends.
func TestAbandonedGrantIsReleasedAfterTheSessionIsTerminated(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	admin, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	const conns = 6
	cfg.MaxConns = conns
	var pids sync.Map
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pids.Store(c.PgConn().PID(), true)
		return nil
	}
	var armed atomic.Bool
	terminated := make(chan error, 1)
	cfg.AfterRelease = func(*pgx.Conn) bool {
		if armed.CompareAndSwap(true, false) {
			// Every connection goes back to the pool, or stays in it, with
			// its session gone, as when the server restarts.
			var err error
			pids.Range(func(pid, _ any) bool {
				_, err = testq.OpsTerminateBackend(context.Background(), admin, int32(pid.(uint32)))
				return err == nil
			})
			time.Sleep(100 * time.Millisecond)
			terminated <- err
		}
		return true
	}
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
	armed.Store(true)
	cancel()
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve of a caller who left = %v, want context.Canceled", err)
	}
	if err := <-terminated; err != nil {
		t.Fatalf("terminating the session: %v", err)
	}
	l.Close() // waits for the abandoned grant's release

	for _, row := range counterRows(t, admin, "provider", limit.Scope.Key) {
		if row.ReservedValue != 0 || row.UsedValue != 0 {
			t.Errorf("counter used=%v reserved=%v: the abandoned grant is still held", row.UsedValue, row.ReservedValue)
		}
	}
	assertBooksBalance(t, admin, "provider", limit.Scope.Key)
}
