package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// slowDials returns a pool on pool's database whose new connections, once
// slow is set, take delay to open: pgx opens one to send a cancel request,
// so such a request lands on the server delay late.
func slowDials(t *testing.T, pool *pgxpool.Pool, delay time.Duration, configure func(*pgxpool.Config)) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	var slow atomic.Bool
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slow.Load() {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return dial(ctx, network, addr)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, &slow
}

// A statement its caller left, stuck behind a lock, is cancelled after the
// grace; when the lock is released after that but before pgx's cancel
// request reaches the server, the statement commits. On a pool set up with
// ConfigurePool, pgx reads that answer and what the statement granted is
// released. (With pgx's default the connection is given up unread, and the
// grant stays held until its window ends and its lease expires: this test
// fails so without ConfigurePool.)
func TestReserveStatementThatCommitsBeforeItsCancelLands(t *testing.T) {
	t.Parallel()
	for _, tc := range callerModes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			// The cancel request lands late, yet before ConfigurePool's
			// connection stops waiting for the answer (250 ms).
			const grace, late = 50 * time.Millisecond, 150 * time.Millisecond
			slow, slowOn := slowDials(t, pool, late, ratelimit.ConfigurePool)
			l := ratelimit.New(slow, append(tc.opts, ratelimit.WithLeftStatementGrace(grace))...)
			key := uniqueKey("k")
			limits, blocker := holdCounter(t, pool, key)
			leave, errs := reserveBehindLock(t, pool, l, limits)
			slowOn.Store(true)
			leave()
			time.Sleep(grace + 50*time.Millisecond) // the statement is being cancelled
			if err := blocker.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			time.Sleep(late + 300*time.Millisecond) // the cancel request lands
			slowOn.Store(false)
			l.Close()
			assertNothingHeld(t, pool, "key", key)
		})
	}
}
