package ratelimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A ReservationOutcome names its reservation as the grant does: its ID as
// the grant spells it (a caller that matches outcomes to its own ids finds
// them), and its Metric also when no row has the id (StatusUnknown), where
// the database has no metric to give. A grant that names no metric (one
// rebuilt from ids) gets its row's.
func TestReservationOutcomeNamesItsReservationAsTheGrantDoes(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
		window("api_key", uniqueKey("k"), "tokens", 100, 6),
		window("api_key", uniqueKey("k"), "requests", 100, 1),
		window("api_key", uniqueKey("k"), "images", 100, 2),
	})
	if err != nil {
		t.Fatal(err)
	}
	upper := strings.ToUpper(grant.Reservations[0].ID)
	grant.Reservations[0].ID = upper
	const nowhere = "123e4567-e89b-42d3-a456-426614174000" // names no row
	grant.Reservations[1].ID = nowhere
	grant.Reservations[2].Metric = ""
	s, err := l.Commit(ctx, grant, map[string]float64{"tokens": 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.ReservationOutcome{
		{ID: upper, Metric: "tokens", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 6, Actual: 3},
		{ID: nowhere, Metric: "requests", Status: ratelimit.StatusUnknown},
		{ID: grant.Reservations[2].ID, Metric: "images", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 2, Actual: 2},
	}
	if diff := cmp.Diff(want, s.Reservations); diff != "" {
		t.Errorf("Commit's outcomes (-want +got):\n%s", diff)
	}
}
