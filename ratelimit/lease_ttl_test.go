package ratelimit_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The database does not keep a lease's TTL: RenewLeases extends each lease
// by the TTL of the Lease it is given. Reserve fills that in with the TTL
// the lease was taken with, DefaultLeaseTTL when the Limit left it zero,
// and a Grant that went through JSON keeps it, so renewing what Reserve
// returned keeps each lease's own TTL.
func TestRenewLeasesKeepsTheTTLTheLeaseWasTakenWith(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	own := concurrent("model", uniqueKey("ttl-own"), 5)
	own.LeaseTTL = 30 * time.Second
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{own, concurrent("model", uniqueKey("ttl-default"), 5)})
	if err != nil {
		t.Fatal(err)
	}
	if got := []time.Duration{grant.Leases[0].TTL, grant.Leases[1].TTL}; got[0] != own.LeaseTTL || got[1] != ratelimit.DefaultLeaseTTL {
		t.Fatalf("Reserve's Lease.TTL = %v, want [%v %v] (the TTL each lease was taken with)", got, own.LeaseTTL, ratelimit.DefaultLeaseTTL)
	}
	data, err := json.Marshal(grant)
	if err != nil {
		t.Fatal(err)
	}
	var decoded ratelimit.Grant
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	before, err := testq.OpsNow(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := l.RenewLeases(ctx, decoded.Leases)
	if err != nil {
		t.Fatal(err)
	}
	after, err := testq.OpsNow(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{own.LeaseTTL, ratelimit.DefaultLeaseTTL} {
		if at := renewed[i].ExpiresAt; at.Before(before.Add(want)) || at.After(after.Add(want)) {
			t.Errorf("lease %d renewed to %v, want now + %v (between %v and %v)", i, at, want, before.Add(want), after.Add(want))
		}
	}

	// A Lease built by hand with a zero TTL is renewed by DefaultLeaseTTL,
	// whatever TTL it was taken with, and comes back with that TTL: the
	// caller that schedules its next renewal by renewed[i].TTL does not
	// read 0.
	byHand := grant.Leases[0]
	byHand.TTL = 0
	if before, err = testq.OpsNow(ctx, pool); err != nil {
		t.Fatal(err)
	}
	renewed, err = l.RenewLeases(ctx, []ratelimit.Lease{byHand})
	if err != nil {
		t.Fatal(err)
	}
	if after, err = testq.OpsNow(ctx, pool); err != nil {
		t.Fatal(err)
	}
	want := ratelimit.DefaultLeaseTTL
	if at := renewed[0].ExpiresAt; at.Before(before.Add(want)) || at.After(after.Add(want)) {
		t.Errorf("a lease of zero TTL renewed to %v, want now + DefaultLeaseTTL (between %v and %v)", at, before.Add(want), after.Add(want))
	}
	if renewed[0].TTL != want {
		t.Errorf("a lease of zero TTL came back with TTL %v, want the %v it was renewed by", renewed[0].TTL, want)
	}
}
