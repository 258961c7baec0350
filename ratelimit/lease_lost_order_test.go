package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// RenewLeases of several leases, two of them lost, given out of the order
// they were taken in (their ids' order, which the renewal runs in) and one
// in upper case: the *LeaseLostError names the lost ones as given and in
// the order given, and counts the one renewed, which comes back alone. Its
// fields were only ever checked with one lease lost and none renewed.
func TestLeaseLostErrorNamesTheLostAsGivenAndCountsTheRenewed(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	var taken []ratelimit.Lease // in the order taken: their ids ascend
	for range 3 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", uniqueKey("lost-order"), 5)})
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, g.Leases[0])
	}
	first, second, third := taken[0], taken[1], taken[2]
	third.ID = strings.ToUpper(third.ID)
	if n, err := l.ReleaseLeases(ctx, []ratelimit.Lease{first, third}, "done"); err != nil || n != 2 {
		t.Fatalf("ReleaseLeases = %d, %v; want 2", n, err)
	}

	renewed, err := l.RenewLeases(ctx, []ratelimit.Lease{third, second, first})
	var lost *ratelimit.LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("RenewLeases: err = %v, want a *LeaseLostError", err)
	}
	if diff := cmp.Diff([]string{third.ID, first.ID}, lost.LeaseIDs); diff != "" {
		t.Errorf("LeaseIDs, as given and in the order given (-want +got):\n%s", diff)
	}
	if lost.Renewed != 1 {
		t.Errorf("Renewed = %d, want 1", lost.Renewed)
	}
	if len(renewed) != 1 || renewed[0].ID != second.ID || !renewed[0].ExpiresAt.After(second.ExpiresAt) {
		t.Errorf("renewed = %+v, want the second lease alone, expiring later than %v", renewed, second.ExpiresAt)
	}
}
