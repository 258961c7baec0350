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

// A field of a grant that Commit, Release or Attach refuse is named by its
// place in the grant, also when Local reservations come before it (they
// are settled in memory, and have no id to check).
func TestGrantFieldsAreNamedByTheirPlaceInTheGrant(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	defer l.Close()
	ctx := context.Background()
	key := uniqueKey("k")
	local := window("api_key", key, "requests", 1000, 1)
	// An hour's window, or a few minutes more, with a minute left: at its
	// window's end, a Local limit is decided in the database.
	local.Local, local.Window = true, hourWindow(t, pool)
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{local, window("api_key", key, "tokens", 100, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(grant.Reservations) != 2 || !grant.Reservations[0].Local || grant.Reservations[1].Local {
		t.Fatalf("grant = %+v, want a Local reservation then one in the database", grant.Reservations)
	}
	defer func() {
		if _, err := l.Release(ctx, grant, "test over"); err != nil {
			t.Errorf("Release: %v", err)
		}
	}()
	tests := []struct {
		name  string
		edit  func(*ratelimit.Reservation)
		field string
	}{
		{"a malformed id", func(r *ratelimit.Reservation) { r.ID = "not-a-uuid" }, "Reservations.ID[1]"},
		{"NUL in the key", func(r *ratelimit.Reservation) { r.ScopeKey += "\x00" }, "Reservations[1].ScopeKey"},
	}
	const attempt = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range tests {
		altered := grant
		altered.Reservations = slices.Clone(grant.Reservations)
		tc.edit(&altered.Reservations[1])
		ops := map[string]func() error{
			"Commit":  func() error { _, err := l.Commit(ctx, altered, nil); return err },
			"Release": func() error { _, err := l.Release(ctx, altered, "altered"); return err },
		}
		if tc.field == "Reservations.ID[1]" { // Attach sends ids only
			ops["Attach"] = func() error { _, err := l.Attach(ctx, attempt, altered); return err }
		}
		for op, call := range ops {
			var invalid *ratelimit.ValidationError
			if err := call(); !errors.As(err, &invalid) || invalid.Field != tc.field {
				t.Errorf("%s of a grant with %s after a Local reservation: err = %v, want a *ValidationError on %s", op, tc.name, err, tc.field)
			}
		}
	}
}
