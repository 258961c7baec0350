package ratelimit_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Commit, Release, RenewLeases and ReleaseLeases refuse a list that names
// one reservation or lease twice as bad input, before anything is sent, as
// Attach refuses such a grant. Before, the statement ran: a lease renewed
// twice by one RenewLeases was renewed by either of its TTLs, a
// reservation named twice by one Commit was committed at either of its
// amounts, and the other place was reported as not settled by the call
// (a lease as LeasesAlreadyReleased), though this very call had settled it.
func TestSettleAndLeaseCallsRefuseARowNamedTwice(t *testing.T) {
	t.Parallel()
	l, m := tracedLimiter(t)
	ctx := context.Background()
	key := uniqueKey("settletwice")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	// The second place differs from the first as a duplicate that makes
	// the call ambiguous would: another estimate, another TTL, the same id
	// in upper case.
	reservationTwice := grant
	reservationTwice.Reservations = append(slices.Clone(grant.Reservations), grant.Reservations[0])
	reservationTwice.Reservations[1].Amount = 7
	leaseTwice := grant
	leaseTwice.Leases = append(slices.Clone(grant.Leases), grant.Leases[0])
	leaseTwice.Leases[1].TTL = 24 * time.Hour
	leaseTwice.Leases[1].ID = strings.ToUpper(grant.Leases[0].ID)

	var longLeaseTwice []ratelimit.Lease
	for i := range 39 {
		longLeaseTwice = append(longLeaseTwice, ratelimit.Lease{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)})
	}
	longLeaseTwice = append(longLeaseTwice, longLeaseTwice[21])

	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Commit of a grant naming a reservation twice", func() error { _, err := l.Commit(ctx, reservationTwice, nil); return err }, "Reservations.ID[1]"},
		{"Commit of a grant naming a lease twice", func() error { _, err := l.Commit(ctx, leaseTwice, nil); return err }, "Leases.ID[1]"},
		{"Release of a grant naming a reservation twice", func() error { _, err := l.Release(ctx, reservationTwice, "twice"); return err }, "Reservations.ID[1]"},
		{"Release of a grant naming a lease twice", func() error { _, err := l.Release(ctx, leaseTwice, "twice"); return err }, "Leases.ID[1]"},
		{"RenewLeases of a lease twice", func() error { _, err := l.RenewLeases(ctx, leaseTwice.Leases); return err }, "Leases.ID[1]"},
		{"ReleaseLeases of a lease twice", func() error { _, err := l.ReleaseLeases(ctx, leaseTwice.Leases, "twice"); return err }, "Leases.ID[1]"},
		// Past the lists compared pairwise (one Reserve's), a set of ids.
		{"RenewLeases of a long list naming a lease twice", func() error { _, err := l.RenewLeases(ctx, longLeaseTwice); return err }, "Leases.ID[39]"},
	}
	for _, tc := range cases {
		var err error
		if c := m.count(func() { err = tc.call() }); c.traced != 0 || c.wire != 0 {
			t.Errorf("%s sent %s, want nothing", tc.name, c)
		}
		assertValidation(t, tc.name, err, tc.field)
	}

	s, err := l.Commit(ctx, grant, nil)
	if err != nil {
		t.Fatalf("Commit of the grant as Reserve returned it: %v", err)
	}
	if len(s.Reservations) != 1 || !s.Reservations[0].Settled || s.Reservations[0].Status != ratelimit.StatusCommitted ||
		s.Reservations[0].Actual != 100 || s.LeasesReleased != 1 || s.LeasesAlreadyReleased != 0 {
		t.Fatalf("Commit of the grant after the refused calls = %+v, want its reservation committed at 100 and its lease released by it", s)
	}
}
