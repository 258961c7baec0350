package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter made from a *pgxpool.Conn already released to its pool (or
// hijacked from it), or from an Executor of one's own that embeds one,
// fails every operation with a *ValidationError on "conn" and writes
// nothing, as one made from a nil conn does: New panicked, reading the
// connection's settings (pgxpool's Conn methods dereference what Release
// cleared), and so did each operation without combining.
func TestReleasedConnFailsWithValidationError(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	released, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released.Release()
	hijacked, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hijacked.Hijack().Close(ctx)
	key := uniqueKey("released")
	limits := []ratelimit.Limit{window("api_key", key, "requests", 10, 1), concurrent("model", key, 2)}
	local := window("model", key, ratelimit.MetricTokens, 1000, 1)
	local.Local = true
	const id = "123e4567-e89b-12d3-a456-426614174000"
	grant := ratelimit.Grant{Reservations: []ratelimit.Reservation{{ID: id}}}
	ops := map[string]func(*ratelimit.Limiter) error{
		"Reserve": func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", limits); return err },
		"Reserve of a Local limit": func(l *ratelimit.Limiter) error {
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{local})
			return err
		},
		"Check":  func(l *ratelimit.Limiter) error { return l.Check(ctx, limits) },
		"Commit": func(l *ratelimit.Limiter) error { _, err := l.Commit(ctx, grant, nil); return err },
		"CreateTask": func(l *ratelimit.Limiter) error {
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w"})
			return err
		},
		"ClaimTask": func(l *ratelimit.Limiter) error { _, err := l.ClaimTask(ctx, "w", time.Minute); return err },
		"GetTask":   func(l *ratelimit.Limiter) error { _, err := l.GetTask(ctx, id); return err },
	}
	for name, conn := range map[string]ratelimit.Executor{
		"released":                  released,
		"hijacked":                  hijacked,
		"own, embedding a released": struct{ *pgxpool.Conn }{released},
		"&own, embedding a hijacked": &struct {
			*pgxpool.Conn
		}{hijacked},
	} {
		for _, opts := range [][]ratelimit.Option{nil, {ratelimit.WithoutCombining()}} {
			l, err := newOrPanic(conn, opts)
			if err != nil {
				t.Errorf("New(%s conn, %d options): %v", name, len(opts), err)
				continue
			}
			for op, run := range ops {
				err := callOrPanic(func() error { return run(l) })
				var invalid *ratelimit.ValidationError
				if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "conn" ||
					!strings.Contains(err.Error(), "not one released (or hijacked)") {
					t.Errorf("%s on a %s conn (%d options): err = %v, want a *ValidationError on conn, released", op, name, len(opts), err)
				}
			}
			l.Close()
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("rows written (-before +after):\n%s", diff)
	}
	// A conn still acquired is a conn: New takes it as it did.
	acquired, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer acquired.Release()
	if _, err := ratelimit.New(acquired).Reserve(ctx, "", "", limits); err != nil {
		t.Errorf("Reserve on an acquired conn: %v", err)
	}
}

// newOrPanic is New, its panic an error.
func newOrPanic(conn ratelimit.Executor, opts []ratelimit.Option) (l *ratelimit.Limiter, err error) {
	err = callOrPanic(func() error { l = ratelimit.New(conn, opts...); return nil })
	return l, err
}

// callOrPanic is f's error, or its panic as one.
func callOrPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return f()
}
