package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A grant whose counter names (scope type, key, metric) are text that
// PostgreSQL cannot hold or that no counter can have (a grant altered, or
// decoded from a JSON document that was) is refused by Commit and Release
// with a *ValidationError naming the field, and nothing is written: not a
// raw "invalid byte sequence" from the server.
func TestSettleRefusesAGrantWhoseCounterNamesAreNotValidText(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 100, 1), window("api_key", key, "tokens", 100, 10), concurrent("model", key, 5)})
	if err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, pool)
	tests := []struct {
		name  string
		edit  func(*ratelimit.Reservation)
		field string
	}{
		{"NUL in the key", func(r *ratelimit.Reservation) { r.ScopeKey += "\x00" }, "Reservations[1].ScopeKey"},
		{"invalid UTF-8 in the type", func(r *ratelimit.Reservation) { r.ScopeType = "api\xffkey" }, "Reservations[1].ScopeType"},
		{"NUL in the metric", func(r *ratelimit.Reservation) { r.Metric = "tok\x00ens" }, "Reservations[1].Metric"},
		{"key too long", func(r *ratelimit.Reservation) { r.ScopeKey = strings.Repeat("k", ratelimit.MaxScopeBytes+1) }, "Reservations[1].ScopeKey"},
	}
	for _, tc := range tests {
		altered := grant
		altered.Reservations = slices.Clone(grant.Reservations)
		tc.edit(&altered.Reservations[1])
		for op, settle := range map[string]func() (ratelimit.Settlement, error){
			"Commit":  func() (ratelimit.Settlement, error) { return l.Commit(ctx, altered, map[string]float64{"tokens": 5}) },
			"Release": func() (ratelimit.Settlement, error) { return l.Release(ctx, altered, "altered") },
		} {
			_, err := settle()
			var invalid *ratelimit.ValidationError
			if !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) || invalid.Field != tc.field {
				t.Errorf("%s of a grant with %s: err = %v, want a *ValidationError on %s", op, tc.name, err, tc.field)
			}
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("refused settlements wrote rows (-before +after):\n%s", diff)
	}
	if n := liveLeases(t, pool, "model", key); n != 1 {
		t.Errorf("the grant's lease: %d live, want 1 (nothing released)", n)
	}
	assertCounter(t, pool, key, "tokens", 0, 10)
	s, err := l.Commit(ctx, grant, map[string]float64{"tokens": 7})
	if err != nil {
		t.Fatalf("Commit of the grant as Reserve returned it: %v", err)
	}
	if s.AlreadySettled() || s.LeasesReleased != 1 {
		t.Errorf("Commit of the grant as Reserve returned it = %+v, want everything settled now", s)
	}
	assertCounter(t, pool, key, "tokens", 7, 0)
	assertBooksBalance(t, pool, "api_key", key)
}
