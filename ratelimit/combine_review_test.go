package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A call whose ctx has already ended sends nothing, combined or not, as
// Reserve's doc says ("a request not yet sent is never sent"): the
// combiner sent it with the ctx's cancellation stripped, the server
// admitted it, and the grant was released as abandoned in the background,
// holding capacity meanwhile that live callers could have been refused
// for. Commit and Release likewise: alone, pgx refuses an ended ctx before
// it writes; combined, the settlement was sent all the same.
func TestCallWithAnEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"combined", nil},
		{"combined two in flight", []ratelimit.Option{ratelimit.WithCombining(8, 2)}},
		{"alone", []ratelimit.Option{ratelimit.WithoutCombining()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			l := ratelimit.New(pool, tc.opts...)
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			key := uniqueKey("ended")
			limits := []ratelimit.Limit{window("api_key", key, "tokens", 100, 1), concurrent("model", key, 5)}
			for _, ls := range [][]ratelimit.Limit{limits[:1], limits} { // reserveOne and pgadmit_reserve
				if g, err := l.Reserve(ended, "", "", ls); !errors.Is(err, context.Canceled) || len(g.Reservations) > 0 {
					t.Fatalf("Reserve with an ended ctx: %+v, %v; want context.Canceled", g, err)
				}
			}
			g, err := l.Reserve(context.Background(), "", "", limits)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Commit(ended, g, nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit with an ended ctx: %v; want context.Canceled", err)
			}
			if _, err := l.Release(ended, g, "ended"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Release with an ended ctx: %v; want context.Canceled", err)
			}
			l.Close()
			s := summary(t, pool)
			if n := rowCounts(t, pool).Reservations; n != 1 || s.ReservationsOpen != 1 || s.LeasesUnreleased != 1 {
				t.Errorf("%d reservations (%d open, %d released, %d committed), %d unreleased leases; want the one live caller's grant, open",
					n, s.ReservationsOpen, s.ReservationsReleased, s.ReservationsCommitted, s.LeasesUnreleased)
			}
		})
	}
}
