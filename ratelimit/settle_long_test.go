package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// longGrantBound is how long settling the test's grant may take.
const longGrantBound = 10 * time.Second

// A grant of thousands of reservations, joined from many Reserves (the
// clean-up of everything a process holds, as the bench's W4 does with 110
// rows), settles in time about linear in its rows, and as one call would:
// each reservation once, reported at its place in the grant, the counters
// balanced, the leases released; settled again, by ids alone, it is
// reported already settled. Before, one statement settled the whole grant
// in time growing with the square of its rows: this one took 12 s
// (10,000 rows 52 s), holding its counters' locks all along. The bound
// is 10 s: the linear settle took up to 7.75 s on a machine at load 15,
// where the square took 12 s, and more under load.
func TestSettleOfALongGrantIsFastAndWhole(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("long")
	const reserves = 2000 // each: two window limits and a lease
	// Windows of an hour or a few minutes more, with a minute left: every
	// reservation in one counter each.
	limits := hourLimits(t, pool,
		window("api_key", key, "requests", 1e9, 1), window("api_key", key, "tokens", 1e9, 5), concurrent("model", key, 1e9))
	limits[1].Window = limits[0].Window
	limits[2].LeaseTTL = time.Hour
	var mu sync.Mutex
	var grant ratelimit.Grant
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reserves / 16 {
				g, err := l.Reserve(ctx, "", "", limits)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				grant.Reservations = append(grant.Reservations, g.Reservations...)
				grant.Leases = append(grant.Leases, g.Leases...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	start := time.Now()
	s, err := l.Commit(ctx, grant, map[string]float64{"tokens": 3})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Commit of a grant of %d reservations: %v", len(grant.Reservations), err)
	}
	t.Logf("Commit of %d reservations and %d leases: %v", len(grant.Reservations), len(grant.Leases), took)
	if took > longGrantBound {
		t.Errorf("Commit of %d reservations took %v, want under %v", len(grant.Reservations), took, longGrantBound)
	}
	if len(s.Reservations) != 2*reserves || s.LeasesReleased != reserves || s.LeasesAlreadyReleased != 0 {
		t.Fatalf("Commit: %d outcomes, %d leases released, %d already; want %d, %d, 0",
			len(s.Reservations), s.LeasesReleased, s.LeasesAlreadyReleased, 2*reserves, reserves)
	}
	for i, o := range s.Reservations {
		r := grant.Reservations[i]
		want := ratelimit.ReservationOutcome{ID: r.ID, Metric: r.Metric, Status: ratelimit.StatusCommitted, Settled: true, Reserved: r.Amount, Actual: r.Amount}
		if r.Metric == "tokens" {
			want.Actual = 3
		}
		if o != want {
			t.Fatalf("Reservations[%d] = %+v, want %+v", i, o, want)
		}
	}
	assertCounter(t, pool, key, "requests", reserves, 0)
	assertCounter(t, pool, key, "tokens", 3*reserves, 0)
	if n := liveLeases(t, pool, "model", key); n != 0 {
		t.Errorf("%d leases live after the Commit, want 0", n)
	}

	// By ids alone: the counters are read from the reservations.
	ids := ratelimit.Grant{Leases: grant.Leases}
	for _, r := range grant.Reservations {
		ids.Reservations = append(ids.Reservations, ratelimit.Reservation{ID: r.ID})
	}
	start = time.Now()
	again, err := l.Release(ctx, ids, "again")
	took = time.Since(start)
	if err != nil {
		t.Fatalf("Release of the grant by ids: %v", err)
	}
	t.Logf("Release of %d reservations by ids: %v", len(ids.Reservations), took)
	if took > longGrantBound {
		t.Errorf("Release of %d reservations by ids took %v, want under %v", len(ids.Reservations), took, longGrantBound)
	}
	if !again.AlreadySettled() || len(again.Reservations) != 2*reserves || again.LeasesAlreadyReleased != reserves {
		t.Fatalf("Release after the Commit = %d outcomes, already settled %v, %d leases already released; want all already settled",
			len(again.Reservations), again.AlreadySettled(), again.LeasesAlreadyReleased)
	}
	for i, o := range again.Reservations {
		if o.ID != grant.Reservations[i].ID || o.Status != ratelimit.StatusCommitted {
			t.Fatalf("Release: Reservations[%d] = %+v, want %s committed", i, o, grant.Reservations[i].ID)
		}
	}
	assertCounter(t, pool, key, "tokens", 3*reserves, 0)

	// Inside a caller's transaction, all of it is part of that transaction:
	// rolled back, every chunk is.
	other := uniqueKey("longtx")
	var joined ratelimit.Grant
	hour := hourLimits(t, pool, window("api_key", other, "requests", 1e9, 1)) // one window for all
	for range 300 {
		g, err := l.Reserve(ctx, "", "", hour)
		if err != nil {
			t.Fatal(err)
		}
		joined.Reservations = append(joined.Reservations, g.Reservations...)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if s, err := l.WithTx(tx).Commit(ctx, joined, nil); err != nil || len(s.Reservations) != 300 || !s.Reservations[299].Settled {
		t.Fatalf("Commit of 300 reservations in a transaction = %d outcomes, %v; want all settled", len(s.Reservations), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	assertCounter(t, pool, other, "requests", 0, 300)
}
