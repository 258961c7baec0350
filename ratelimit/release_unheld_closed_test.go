package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
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
			l := ratelimit.New(pool, tc.opts...)
			limit := hourLimits(t, pool, window("provider", uniqueKey("closed"), "requests", 10, 1))[0]
			g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
			if err != nil {
				t.Fatal(err)
			}
			pool.Close()
			if tries, took := unheldReleaseTries(l, g); tries != 1 {
				t.Errorf("the give-back on a closed pool made %d tries in %v, want it to stop at once, after one (span %v)", tries, took, ratelimit.UnheldReleaseSpan)
			}
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
	l := ratelimit.New(conn)
	limit := hourLimits(t, pool, window("provider", uniqueKey("closed-conn"), "requests", 10, 1))[0]
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tries, took := unheldReleaseTries(l, g); tries != 1 {
		t.Errorf("the give-back on a closed connection made %d tries in %v, want it to stop at once, after one (span %v)", tries, took, ratelimit.UnheldReleaseSpan)
	}
}

// unheldReleaseTries gives g back as ReleaseUnheld does, and counts the
// tries: stopping at once is one try, whatever the time (under load a
// single try may take longer than a quarter of the span, which this
// test used to allow the whole give-back).
func unheldReleaseTries(l *ratelimit.Limiter, g ratelimit.Grant) (tries int, took time.Duration) {
	start := time.Now()
	l.RetryUnheld(func(ctx context.Context) error {
		tries++
		_, err := l.Release(ctx, g, "abandoned")
		return err
	})
	return tries, time.Since(start)
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
