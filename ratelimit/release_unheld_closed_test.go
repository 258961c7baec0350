package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A grant nobody holds is given back on a pool that was closed meanwhile:
// no try can succeed, so the give-back stops at once rather than holding
// its goroutine (a caller's, without combining) for the whole span.
func TestUnheldReleaseOnAClosedPoolStopsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"combined", nil},
		{"uncombined", []ratelimit.Option{ratelimit.WithoutCombining()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			var tries atomic.Int64
			l := ratelimit.New(pool, append(tc.opts, ratelimit.WithUnheldTryHook(func() { tries.Add(1) }))...)
			limit := hourLimits(t, pool, window("provider", uniqueKey("closed"), "requests", 10, 1))[0]
			g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
			if err != nil {
				t.Fatal(err)
			}
			pool.Close()
			if took := timed(func() { l.ReleaseUnheld(g) }); tries.Load() != 1 {
				t.Errorf("the give-back on a closed pool made %d tries in %v, want it to stop at once, after one (span %v)", tries.Load(), took, ratelimit.UnheldReleaseSpan)
			}
			assertLost(t, l, 1, "a grant nobody holds left held on a closed pool")
			assertGiveBacks(t, l, 0, 1, 0, "a give-back that failed for good (not dropped)")
		})
	}
}

// So on a single connection that was closed: it stays closed.
func TestUnheldReleaseOnAClosedConnectionStopsAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	conn, err := pgx.ConnectConfig(context.Background(), pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	l := ratelimit.New(conn, ratelimit.WithUnheldTryHook(func() { tries.Add(1) }))
	limit := hourLimits(t, pool, window("provider", uniqueKey("closed-conn"), "requests", 10, 1))[0]
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := timed(func() { l.ReleaseUnheld(g) }); tries.Load() != 1 {
		t.Errorf("the give-back on a closed connection made %d tries in %v, want it to stop at once, after one (span %v)", tries.Load(), took, ratelimit.UnheldReleaseSpan)
	}
	assertLost(t, l, 1, "a grant nobody holds left held on a closed connection")
	assertGiveBacks(t, l, 0, 1, 0, "a give-back that failed for good on a closed connection")
}

// A give-back that succeeds, at once or after a failed try, loses nothing.
func TestUnheldReleaseThatSucceedsLosesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	defer l.Close()
	limit := hourLimits(t, pool, window("provider", uniqueKey("given-back"), "requests", 10, 1))[0]
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	l.ReleaseUnheld(g)
	failedOnce := false
	l.RetryUnheld(func(context.Context) error {
		if !failedOnce {
			failedOnce = true
			return errors.New("a connection lost")
		}
		return nil
	})
	assertLost(t, l, 0, "give-backs that succeeded")
	assertGiveBacks(t, l, 0, 0, 0, "give-backs that succeeded")
}

// assertLost checks what l counts as lost (Stats.Lost).
func assertLost(t *testing.T, l *ratelimit.Limiter, want int64, after string) {
	t.Helper()
	if got := l.Stats().Lost; got != want {
		t.Errorf("Stats().Lost = %d after %s, want %d", got, after, want)
	}
}

// timed runs f and says how long it took. The tests above count the tries
// of the real give-back (WithUnheldTryHook): stopping at once is one try,
// whatever the time (under load a single try may take longer than a
// quarter of the span, which they used to allow the whole give-back).
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// A failure that a later try may not meet (a session ended; on a pool, a
// connection found closed, which the pool replaces) is tried again until
// it succeeds.
func TestUnheldReleaseRetriesATransientFailure(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(pgtest.NewPool(t))
	for _, fail := range []error{
		errors.New("ratelimit: release: unexpected EOF"),
		fmt.Errorf("ratelimit: release: %w", pgconn.ErrConnClosed),
	} {
		tries := 0
		l.RetryUnheld(func(context.Context) error {
			tries++
			if tries < 3 {
				return fail
			}
			return nil
		})
		if tries != 3 {
			t.Errorf("%v: tries = %d, want 3 (two failures, then success)", fail, tries)
		}
	}
}
