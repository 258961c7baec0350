package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// leftReturnBound is how soon a caller whose context ended must have its
// call back: its statement, cancel and give-back go on without it.
const leftReturnBound = 50 * time.Millisecond

// A caller whose context ends while its statement waits for a row lock
// returns at once with its context's error, on a pool set up with
// ConfigurePool, direct and behind PgBouncer (one that forwards a cancel
// request promptly, and one that takes 1.5 s, past the second the
// connection waits for its acknowledgement): alone in a combined
// statement, in a batch of several, and WithoutCombining.
func TestReserveCallerWhoLeavesReturnsAtOnce(t *testing.T) {
	t.Parallel()
	setups := []struct {
		name string
		urls func(t *testing.T) (pooled, direct string)
	}{
		{"direct", func(t *testing.T) (string, string) { u := pgtest.NewURL(t); return u, u }},
		{"pgbouncer", func(t *testing.T) (string, string) { return pgtest.NewPoolerURLIn(t, "transaction", 4) }},
		{"pgbouncer forwarding the cancel in 1.5s", func(t *testing.T) (string, string) {
			return pgtest.NewSlowPoolerURL(t, "transaction", 4, 1500*time.Millisecond)
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []string{"alone", "in a batch", "without combining"} {
				t.Run(tc, func(t *testing.T) {
					t.Parallel()
					pooled, directURL := s.urls(t)
					direct, pool := configuredPools(t, pooled, directURL)
					var took time.Duration
					if tc == "in a batch" {
						took = leaveABatch(t, direct, ratelimit.New(pool))
					} else {
						var opts []ratelimit.Option
						if tc == "without combining" {
							opts = append(opts, ratelimit.WithoutCombining())
						}
						took = leaveAlone(t, direct, ratelimit.New(pool, opts...))
					}
					t.Logf("the caller returned %v after its context ended", took.Round(time.Millisecond))
					if took > leftReturnBound {
						t.Errorf("the caller returned %v after its context ended, want within %v", took.Round(time.Millisecond), leftReturnBound)
					}
				})
			}
		})
	}
}

// configuredPools returns a pool on directURL and one on pooled set up with
// ConfigurePool.
func configuredPools(t *testing.T, pooled, directURL string) (direct, pool *pgxpool.Pool) {
	t.Helper()
	direct, err := pgxpool.New(context.Background(), directURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	ratelimit.ConfigurePool(cfg)
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return direct, pool
}

// leaveAlone has a caller alone wait for a lock, ends its context and
// returns how long its Reserve took to return; then it releases the lock
// and checks that nothing is held once l is closed.
func leaveAlone(t *testing.T, direct *pgxpool.Pool, l *ratelimit.Limiter) time.Duration {
	t.Helper()
	key := uniqueKey("k")
	limits, blocker := holdCounter(t, direct, key)
	leave, errs := reserveBehindLock(t, direct, l, limits)
	left := time.Now()
	leave()
	err := <-errs
	took := time.Since(left)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve after its caller left: %v, want context.Canceled", err)
	}
	if err := blocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	assertNothingHeld(t, direct, "key", key)
	return took
}

// leaveABatch has two callers combined in one statement that waits for a
// lock, ends the first one's context and returns how long its Reserve took
// to return; the second stays until the lock is released and is admitted.
func leaveABatch(t *testing.T, direct *pgxpool.Pool, l *ratelimit.Limiter) time.Duration {
	t.Helper()
	first := uniqueKey("first")
	firstLimits, firstBlocker := holdCounter(t, direct, first)
	key := uniqueKey("k")
	limits, blocker := holdCounter(t, direct, key)
	// A caller alone holds the stream behind one lock while two queue.
	firstErr := make(chan error, 1)
	go func() { _, err := l.Reserve(context.Background(), "", "", firstLimits); firstErr <- err }()
	pgtest.AwaitLockWaiters(t, direct, "the first Reserve")
	ctx, leave := context.WithCancel(context.Background())
	t.Cleanup(leave)
	leaving, staying := make(chan error, 1), make(chan error, 1)
	go func() { _, err := l.Reserve(ctx, "", "", limits); leaving <- err }()
	go func() { _, err := l.Reserve(context.Background(), "", "", limits); staying <- err }()
	for deadline := time.Now().Add(5 * time.Second); l.QueuedReserves() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want 2", l.QueuedReserves())
		}
	}
	if err := firstBlocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-firstErr; err != nil {
		t.Fatalf("the first Reserve: %v", err)
	}
	pgtest.AwaitLockWaiters(t, direct, "the batch")
	left := time.Now()
	leave()
	err := <-leaving
	took := time.Since(left)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve after its caller left: %v, want context.Canceled", err)
	}
	if err := blocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-staying; err != nil {
		t.Errorf("the caller who stayed: %v", err)
	}
	l.Close()
	if s := l.Stats().Reserve; s.Batches != 2 || s.Requests != 3 {
		t.Errorf("%d requests in %d statements, want 3 in 2", s.Requests, s.Batches)
	}
	return took
}
