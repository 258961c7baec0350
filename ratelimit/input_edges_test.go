package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Empty input is no error and writes nothing: no limits to Reserve or
// Check, a zero Grant to Commit or Release, no leases to renew or release,
// an actual amount for a metric the grant has no reservation of. A zero
// Reservation or Lease in a grant (no id) is a *ValidationError naming it.
func TestEmptyInputIsANoOp(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	noOp := func(s ratelimit.Settlement, err error) error {
		if err != nil {
			return err
		}
		if len(s.Reservations) != 0 || s.LeasesReleased != 0 || s.LeasesAlreadyReleased != 0 || !s.AlreadySettled() {
			return errors.New("settled something")
		}
		return nil
	}
	tests := []struct {
		name  string
		call  func() error
		field string // "" when the call must succeed
	}{
		{"Reserve of nil limits", func() error {
			g, err := l.Reserve(ctx, "", "", nil)
			if err == nil && !g.Empty() {
				err = errors.New("a grant that holds something")
			}
			return err
		}, ""},
		{"Reserve of no limits", func() error {
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{})
			if err == nil && !g.Empty() {
				err = errors.New("a grant that holds something")
			}
			return err
		}, ""},
		{"Check of nil limits", func() error { return l.Check(ctx, nil) }, ""},
		{"Commit of a zero Grant", func() error { return noOp(l.Commit(ctx, ratelimit.Grant{}, nil)) }, ""},
		{"Commit of a zero Grant with actual amounts", func() error {
			return noOp(l.Commit(ctx, ratelimit.Grant{}, map[string]float64{"tokens": 5}))
		}, ""},
		{"Release of a zero Grant", func() error { return noOp(l.Release(ctx, ratelimit.Grant{}, "")) }, ""},
		{"RenewLeases of nil", func() error {
			got, err := l.RenewLeases(ctx, nil)
			if err == nil && len(got) != 0 {
				err = errors.New("renewed something")
			}
			return err
		}, ""},
		{"ReleaseLeases of nil", func() error {
			n, err := l.ReleaseLeases(ctx, nil, "")
			if err == nil && n != 0 {
				err = errors.New("released something")
			}
			return err
		}, ""},
		{"Commit of a grant with a zero Reservation", func() error {
			_, err := l.Commit(ctx, ratelimit.Grant{Reservations: []ratelimit.Reservation{{}}}, nil)
			return err
		}, "Reservations.ID[0]"},
		{"Release of a grant with a zero Lease", func() error {
			_, err := l.Release(ctx, ratelimit.Grant{Leases: []ratelimit.Lease{{}}}, "")
			return err
		}, "Leases.ID[0]"},
		{"RenewLeases of a zero Lease", func() error { _, err := l.RenewLeases(ctx, []ratelimit.Lease{{}}); return err }, "Leases.ID[0]"},
	}
	for _, tc := range tests {
		err := tc.call()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want no error and nothing done", tc.name, err)
			}
			continue
		}
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != tc.field {
			t.Errorf("%s: err = %v, want a *ValidationError on %s", tc.name, err, tc.field)
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("empty input wrote rows (-before +after):\n%s", diff)
	}
}

// A grant settled on a Limiter of another database (its ids name no row
// there) settles nothing there and writes nothing: its reservations are
// reported StatusUnknown, its leases already released. The database that
// admitted it still holds it open, and settles it.
func TestGrantOfAnotherDatabaseSettlesNothingThere(t *testing.T) {
	t.Parallel()
	home, homePool := setup(t)
	other, otherPool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	grant, err := home.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 100, 10), concurrent("model", key, 5)})
	if err != nil {
		t.Fatal(err)
	}
	// The counter of the grant exists in the other database too, with a
	// reservation of its own: nothing of it may move.
	mine, err := other.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 100, 10)})
	if err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, otherPool)
	for op, settle := range map[string]func() (ratelimit.Settlement, error){
		"Commit":  func() (ratelimit.Settlement, error) { return other.Commit(ctx, grant, map[string]float64{"tokens": 3}) },
		"Release": func() (ratelimit.Settlement, error) { return other.Release(ctx, grant, "elsewhere") },
	} {
		s, err := settle()
		if err != nil {
			t.Fatalf("%s on another database: %v", op, err)
		}
		want := ratelimit.Settlement{
			Reservations:          []ratelimit.ReservationOutcome{{ID: grant.Reservations[0].ID, Metric: "tokens", Status: ratelimit.StatusUnknown}},
			LeasesAlreadyReleased: 1,
		}
		if diff := cmp.Diff(want, s); diff != "" || !s.AlreadySettled() {
			t.Errorf("%s on another database (-want +got):\n%s", op, diff)
		}
	}
	if n, err := other.ReleaseLeases(ctx, grant.Leases, "elsewhere"); err != nil || n != 0 {
		t.Errorf("ReleaseLeases on another database = %d, %v; want 0, nil", n, err)
	}
	var lost *ratelimit.LeaseLostError
	if _, err := other.RenewLeases(ctx, grant.Leases); !errors.As(err, &lost) || !slices.Equal(lost.LeaseIDs, []string{grant.Leases[0].ID}) {
		t.Errorf("RenewLeases on another database: err = %v, want a *LeaseLostError naming the lease", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, otherPool)); diff != "" {
		t.Errorf("settling a grant of another database wrote rows (-before +after):\n%s", diff)
	}
	assertCounter(t, otherPool, key, "tokens", 0, 10)
	if _, err := other.Release(ctx, mine, ""); err != nil {
		t.Fatal(err)
	}

	assertCounter(t, homePool, key, "tokens", 0, 10)
	s, err := home.Commit(ctx, grant, map[string]float64{"tokens": 4})
	if err != nil || !s.Reservations[0].Settled || s.LeasesReleased != 1 {
		t.Fatalf("Commit at home = %+v, %v; want everything settled", s, err)
	}
	assertCounter(t, homePool, key, "tokens", 4, 0)
	assertBooksBalance(t, homePool, "api_key", key)
}

// A Local limit that can never fit (a Limit of 0, an Amount above the
// Limit) is refused as any limit is, not retryable, by Reserve and Check;
// nothing is held.
func TestLocalLimitThatCanNeverFitIsRefused(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("k")
	for name, lim := range map[string]ratelimit.Limit{
		"limit 0":                localWindow(hour, key, 0, 1),
		"amount above the limit": localWindow(hour, key+"-2", 10, 11),
	} {
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
		var ex *ratelimit.ExceededError
		if !errors.As(err, &ex) || ex.Retryable {
			t.Errorf("Reserve of a Local %s: err = %v, want a non-retryable *ExceededError", name, err)
		}
		if err := l.Check(ctx, []ratelimit.Limit{lim}); !errors.As(err, &ex) || ex.Retryable {
			t.Errorf("Check of a Local %s: err = %v, want a non-retryable *ExceededError", name, err)
		}
	}
	if got := rowCounts(t, pool); got.Reservations != 0 || got.Leases != 0 {
		t.Errorf("refusals left rows: %+v", got)
	}
}
