package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A ReservationOutcome's Reserved is the estimate the reservation held
// where this call found it, whatever the grant (the caller's to alter)
// now says: its row's, or for a Local one its admission's. A reservation
// no row has (StatusUnknown) held nothing the database knows of: 0. A
// Local one this Limiter cannot find (StatusUnknown: a copy settled on
// another Limiter) reports the grant's Amount, the estimate its block
// charges when returned, as nothing else is known of it.
func TestReservationOutcomeReservedIsTheEstimateItHeld(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()

	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
		window("api_key", uniqueKey("k"), "tokens", 100, 6),
		window("api_key", uniqueKey("k"), "requests", 100, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	local := reserveLocal(t, l, hour, uniqueKey("local"), 1000, 10)
	grant.Reservations = append(grant.Reservations, local.Reservations...)
	grant.Reservations[0].Amount = 60 // altered: the row still holds 6
	grant.Reservations[1].ID = "123e4567-e89b-42d3-a456-426614174000"
	grant.Reservations[2].Amount = 100 // altered: the admission still holds 10
	s, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.ReservationOutcome{
		{ID: grant.Reservations[0].ID, Metric: "tokens", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 6, Actual: 12},
		{ID: grant.Reservations[1].ID, Metric: "requests", Status: ratelimit.StatusUnknown},
		{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Settled: true, Reserved: 10, Actual: 12},
	}
	if diff := cmp.Diff(want, s.Reservations); diff != "" {
		t.Errorf("Commit's outcomes (-want +got):\n%s", diff)
	}
	if o := s.Overages(); len(o) != 2 || o[0].Overage() != 6 || o[1].Overage() != 2 {
		t.Errorf("Overages = %+v; want the row's 6 and the Local one's 2", o)
	}

	elsewhere := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(elsewhere.Close)
	other := reserveLocal(t, l, hour, uniqueKey("local"), 1000, 10)
	copied := throughJSON(t, other)
	copied.Reservations[0].Amount = 4
	s, err = elsewhere.Release(ctx, copied, "elsewhere")
	wantUnknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 4}
	if err != nil || len(s.Reservations) != 1 || s.Reservations[0] != wantUnknown {
		t.Errorf("Release of a copy on another Limiter = %+v, %v; want %+v", s, err, wantUnknown)
	}
}
