package ratelimit_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Commit, Release and Attach refuse a grant that names one Local reservation twice
// (by its handle, or by its LocalID in any spelling that names the same
// admission) as bad input, as they refuse one that names a database row
// twice: nothing is settled, in memory or in the database, and the grant
// as Reserve returned it settles afterwards. Before, the call went on: the
// admission was settled at the first place's amount and the second place
// reported as not settled by this call, though this very call had.
func TestSettleRefusesAGrantNamingALocalReservationTwice(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("localtwice")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
		localWindow(hour, key, 1000, 10), window("api_key", key, "requests", 10, 1), concurrent("model", key, 2),
	})
	if err != nil || !grant.Reservations[0].Local || grant.Reservations[0].LocalID == "" || grant.Reservations[1].Local {
		t.Fatalf("Reserve: %+v, %v; want a Local reservation with a LocalID, then a database one", grant, err)
	}
	twice := func(g ratelimit.Grant, edit func(*ratelimit.Reservation)) ratelimit.Grant {
		g.Reservations = append(slices.Clone(g.Reservations), g.Reservations[0])
		edit(&g.Reservations[2])
		return g
	}
	// The LocalID's parts: instance id, sequence (decimal), tag (hex).
	parts := strings.Split(grant.Reservations[0].LocalID, "-")
	if len(parts) != 3 {
		t.Fatalf("LocalID %q: want three parts", grant.Reservations[0].LocalID)
	}
	respelled := parts[0] + "-0" + parts[1] + "-" + strings.ToUpper(parts[2])
	grants := map[string]ratelimit.Grant{
		"the same reservation again":                 twice(grant, func(*ratelimit.Reservation) {}),
		"another amount at the second place":         twice(grant, func(r *ratelimit.Reservation) { r.Amount = 3 }),
		"a copy decoded from JSON, named twice":      twice(throughJSON(t, grant), func(*ratelimit.Reservation) {}),
		"its LocalID spelled otherwise (zero, case)": twice(throughJSON(t, grant), func(r *ratelimit.Reservation) { r.LocalID = respelled }),
		"the grant's handle and a copy's LocalID":    twice(grant, func(r *ratelimit.Reservation) { *r = throughJSON(t, grant).Reservations[0] }),
	}
	for name, g := range grants {
		_, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 4})
		assertValidation(t, "Commit of a grant naming a Local reservation twice: "+name, err, "Reservations.LocalID[2]")
		_, err = l.Release(ctx, g, "twice")
		assertValidation(t, "Release of a grant naming a Local reservation twice: "+name, err, "Reservations.LocalID[2]")
		_, err = l.Attach(ctx, "123e4567-e89b-12d3-a456-426614174000", g)
		assertValidation(t, "Attach of a grant naming a Local reservation twice: "+name, err, "Reservations.LocalID[2]")
	}
	// Nothing was settled: the database's part is still held...
	assertCounter(t, pool, key, "requests", 0, 1)
	if n := liveLeases(t, pool, "model", key); n != 1 {
		t.Errorf("the grant's lease: %d live, want 1 (nothing released)", n)
	}
	// ...and so is the Local one, which the grant as Reserve returned it settles.
	s, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 4})
	if err != nil {
		t.Fatalf("Commit of the grant as Reserve returned it: %v", err)
	}
	want := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Settled: true, Reserved: 10, Actual: 4}
	if len(s.Reservations) != 2 || s.Reservations[0] != want || !s.Reservations[1].Settled || s.LeasesReleased != 1 {
		t.Fatalf("Commit of the grant as Reserve returned it = %+v, want its Local reservation %+v, its database one settled, its lease released", s, want)
	}
	assertCounter(t, pool, key, "requests", 1, 0)

	// Local reservations of two admissions are two: a grant joined from
	// two Reserves settles both.
	a, b := reserveLocal(t, l, hour, key, 1000, 10), reserveLocal(t, l, hour, key, 1000, 10)
	joined := ratelimit.Grant{Reservations: append(slices.Clone(a.Reservations), b.Reservations...)}
	if s, err := l.Release(ctx, joined, "joined"); err != nil || len(s.Reservations) != 2 || !s.Reservations[0].Settled || !s.Reservations[1].Settled {
		t.Fatalf("Release of a grant joined from two Local admissions = %+v, %v; want both released", s, err)
	}
}
