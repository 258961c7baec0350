package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Concurrent Commits are combined into one call of pgadmit_settle, whose
// time grows with the square of the rows it is given past a hundred or so
// (1,024 reservations: about 145 µs each, against 35-45 µs up to 128 and
// 58 µs at 256). A combined settle now carries 256 reservations and leases
// at most: 64 Commits of 8 reservations queued behind a settle held on
// their counters went in one statement of 504, now in two.
func TestCombinedSettlesCarryBoundedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, sizes := settleSizedPool(t)
	l := ratelimit.New(pool)
	const callers, perGrant = 64, 8
	key := uniqueKey("rows")
	limits := make([]ratelimit.Limit, perGrant)
	for k := range limits {
		limits[k] = window("api_key", fmt.Sprintf("%s-%d", key, k), ratelimit.MetricTokens, 1e9, 5)
	}
	grants := make([]ratelimit.Grant, callers)
	for i := range grants {
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}

	// Hold the counters so that the first Commit's statement waits for
	// them while the others queue behind it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ids := make([]pgtype.UUID, perGrant)
	for k, r := range grants[0].Reservations {
		ids[k] = mustUUID(t, r.ID)
	}
	if err := queries.CounterLockForReservations(ctx, tx, ids); err != nil {
		t.Fatal(err)
	}
	sizes.reset()
	var wg sync.WaitGroup
	commit := func(g ratelimit.Grant) {
		s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 4})
		settled := 0
		for _, r := range s.Reservations {
			if r.Settled {
				settled++
			}
		}
		if err != nil || settled != perGrant {
			t.Errorf("Commit = %+v, %v; want %d settled", s, err, perGrant)
		}
	}
	wg.Go(func() { commit(grants[0]) })
	waitUntil(t, func() bool { _, n := sizes.largest(); return n == 1 })
	for _, g := range grants[1:] {
		wg.Go(func() { commit(g) })
	}
	waitUntil(t, func() bool { return l.QueuedSettles() == callers-1 })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	most, statements := sizes.largest()
	if most > 256 || statements != 3 {
		t.Errorf("%d Commits of %d reservations went in %d statements of up to %d each; want 3 (the first alone, then 256 and 248)",
			callers, perGrant, statements, most)
	}
	if s := summary(t, pool); s.ReservationsOpen != 0 || s.ReservationsCommitted != callers*perGrant || s.CountersReserved != 0 {
		t.Errorf("books after the Commits: %+v", s)
	}
	assertDoctorOK(t, pool)
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}
