package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local reservation still in flight when its block is returned (Close,
// or a stream that outlives its window by a minute) is charged at its
// estimate then. A Commit that comes later changes nothing in the
// database, and its Settlement must say so: it used to report the actual
// amount as committed by this call, and list the overage in Overages,
// "recorded in the window's used amount, never lost", when the window
// holds only the estimate.
func TestLocalSettlementAfterItsBlockIsReturnedSaysWhatWasCharged(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	l := ratelimit.New(pool)
	key := uniqueKey("latecommit")
	g := reserveLocal(t, l, hour, key, 1000, 1)
	l.Close() // returns the block, charging the request in flight at its estimate

	s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	rows := counterRows(t, pool, "model", key)
	if rows[0].UsedValue != 1 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used 1 (the estimate, charged by Close), reserved 0", rows[0])
	}
	o := s.Reservations[0]
	if o.Settled || o.Status != ratelimit.StatusCommitted || o.Actual != rows[0].UsedValue || len(s.Overages()) != 0 {
		t.Errorf("late Commit: %+v, overages %+v; want Settled false, committed at the estimate charged (1), no overage", o, s.Overages())
	}
	assertDoctorOK(t, pool)
}

// A second settlement of a Local reservation reports the status and
// amount the first one left, as a database reservation's does: a Release
// after a Commit used to report it released, with nothing committed.
func TestLocalSecondSettlementReportsTheFirst(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("settletwice")
	g := reserveLocal(t, l, hour, key, 1000, 1)
	if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 3}); err != nil {
		t.Fatal(err)
	}
	s, err := l.Release(ctx, g, "late")
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Reservations[0]; o.Settled || o.Status != ratelimit.StatusCommitted || o.Actual != 3 {
		t.Errorf("Release after Commit: %+v; want Settled false, still committed with 3", o)
	}
	// The same for a database reservation, which the Local one must match.
	d, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("model", key, "requests", 10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, d, map[string]float64{"requests": 1}); err != nil {
		t.Fatal(err)
	}
	if s, err := l.Release(ctx, d, "late"); err != nil || s.Reservations[0].Status != ratelimit.StatusCommitted || s.Reservations[0].Actual != 1 {
		t.Fatalf("database Release after Commit: %+v, %v", s, err)
	}
	_ = pool
}
