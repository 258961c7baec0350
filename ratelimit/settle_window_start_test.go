package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A grant altered to a WindowStart that PostgreSQL's timestamptz cannot
// hold, or pgx cannot encode, is refused with a *ValidationError naming it, and nothing of the
// grant is settled, whether its Commit or Release goes alone or combined
// with a concurrent caller's, who is settled as usual.
func TestSettleRefusesAWindowStartOutOfPostgreSQLsRange(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("start")
	limits := hourLimits(t, pool, window("api_key", key, "requests", 100, 1), window("api_key", key, "tokens", 100, 1))
	limits[1].Window = limits[0].Window
	reserve := func() ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	settles := map[string]func(ratelimit.Grant) (ratelimit.Settlement, error){
		"Commit":  func(g ratelimit.Grant) (ratelimit.Settlement, error) { return l.Commit(ctx, g, nil) },
		"Release": func(g ratelimit.Grant) (ratelimit.Settlement, error) { return l.Release(ctx, g, "bad") },
	}
	for _, when := range []time.Time{
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(294260, 1, 1, 0, 0, 0, 0, time.UTC), // PostgreSQL's, not pgx's: its microseconds overflow an int64
		time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		for name, settle := range settles {
			bad := reserve()
			bad.Reservations = append([]ratelimit.Reservation(nil), bad.Reservations...)
			bad.Reservations[1].WindowStart = when
			good := reserve()

			var wg sync.WaitGroup
			var goodErr, badErr error
			wg.Add(2)
			go func() { defer wg.Done(); _, goodErr = settle(good) }()
			go func() { defer wg.Done(); _, badErr = settle(bad) }()
			wg.Wait()
			_, aloneErr := settle(bad)
			if goodErr != nil {
				t.Errorf("%s of a good grant beside a bad one: %v", name, goodErr)
			}
			for _, err := range []error{badErr, aloneErr} {
				var v *ratelimit.ValidationError
				if !errors.As(err, &v) || !errors.Is(err, ratelimit.ErrInvalidInput) || v.Field != "Reservations[1].WindowStart" {
					t.Errorf("%s with WindowStart %v = %v, want a *ValidationError on Reservations[1].WindowStart", name, when, err)
				}
			}
			// Nothing of the bad grant was settled: a Commit of it as it
			// was granted settles both reservations now.
			s, err := l.Commit(ctx, bad, nil)
			if err == nil {
				t.Errorf("%s: the bad grant is still accepted", name)
			}
			fixed := bad
			fixed.Reservations = append([]ratelimit.Reservation(nil), bad.Reservations...)
			fixed.Reservations[1].WindowStart = good.Reservations[1].WindowStart
			if s, err = l.Commit(ctx, fixed, nil); err != nil {
				t.Fatal(err)
			}
			for i, r := range s.Reservations {
				if !r.Settled {
					t.Errorf("%s: reservation %d of the refused grant was settled before: %+v", name, i, r)
				}
			}
		}
	}
	assertBooksBalance(t, pool, "api_key", key)
}
